#!/usr/bin/env bash
# Build the HTML documentation with warnings as errors; installs nothing.
# Needs the docs extra: pip install -e ".[docs]". Output: docs/_build/html/index.html.
# The gallery (docs/examples/plot_*.py) runs at build time on dask's synchronous scheduler.
set -euo pipefail
cd "$(dirname "$0")/.."
export MPLBACKEND=Agg
exec python -m sphinx -W --keep-going -b html docs docs/_build/html "$@"
