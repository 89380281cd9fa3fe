"""Bootstrap bands: resampled refits as Dask tasks, replicate plans per solver, percentiles."""
