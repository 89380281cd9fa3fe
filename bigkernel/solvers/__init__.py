"""Solvers that run on the cluster: the distributed Gram operator of the exact path."""
