"""Kernels: the registry (one table of names, parameters and paths) and their exact evaluations."""
