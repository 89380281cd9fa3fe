"""Layer 2: dask graph builders over the numerics of layer 1. Nothing here calls compute."""
