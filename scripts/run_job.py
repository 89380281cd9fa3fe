#!/usr/bin/env python
"""Run a bigkernel YAML job from Python (same as ``bigkernel run JOB.yaml``).

Usage: python scripts/run_job.py configs/quickstart.yaml [--dry-run]
"""

import sys

from bigkernel.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
