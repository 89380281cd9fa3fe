"""Data in: opening and validating sources, synthetic generators written chunk by chunk."""
