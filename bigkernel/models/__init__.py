"""Layer 3: orchestrators (estimators, bootstrap). They own the compute, the client and zarr I/O."""
