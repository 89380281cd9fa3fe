"""Layer 4 (shell): job configuration, the job runner, the Dask client from config, plots, CLI."""
