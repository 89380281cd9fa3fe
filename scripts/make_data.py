#!/usr/bin/env python
"""Write a synthetic data set to zarr chunk by chunk (same as ``bigkernel make-data``).

Usage: python scripts/make_data.py friedman1 data/friedman_1e8.zarr --n-samples 1e8
"""

import sys

from bigkernel.cli import main

if __name__ == "__main__":
    sys.exit(main(["make-data", *sys.argv[1:]]))
