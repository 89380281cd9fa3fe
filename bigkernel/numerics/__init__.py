"""Layer 1: pure numerics on numpy blocks (kernels, feature maps, sums, solvers). No dask, no files."""
