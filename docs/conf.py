"""Sphinx configuration of the bigkernel documentation.

Build (from the repository root; no network access needed):
``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

# Document the bigkernel of this tree, not an installed copy elsewhere.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Gallery examples run in this process and in any subprocess they start (dask workers).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

import bigkernel  # noqa: E402

project = "bigkernel"
author = "the bigkernel developers"
copyright = "the bigkernel developers"
version = release = bigkernel.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "examples"]
templates_path = ["_templates"]

# API reference: one page per public name of bigkernel.__all__ (docs/api.rst).
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True}
autodoc_typehints = "none"  # the numpydoc sections carry the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

# The Markdown pages of docs/ are included as they are; their in-page links are header anchors.
myst_heading_anchors = 3

# Gallery: docs/examples/plot_*.py run at build time (small n, the synchronous dask scheduler).
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    # "Examples using X" at the foot of each API page
    "doc_module": ("bigkernel",),
    "backreferences_dir": "generated/backreferences",
}

html_theme = "alabaster"
html_title = f"bigkernel {release}"
html_static_path: list[str] = []
html_theme_options = {
    "description": "Kernel ridge regression for large n, out of core on Dask.",
    "fixed_sidebar": True,
    "page_width": "1200px",
    "body_max_width": "none",
    "sidebar_width": "230px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}


#: public methods that serve bigkernel's own orchestrators (job runner, bootstrap), not users
_INTERNAL_METHODS = {"fit_dataset", "stats_graph"}


def _skip_member(app, what, name, obj, skip, options):
    """Leave out scikit-learn's metadata routing (``get_metadata_routing``, the generated
    ``set_fit_request`` …) and the orchestrator hooks."""
    if re.fullmatch(r"set_\w+_request|get_metadata_routing", name) or name in _INTERNAL_METHODS:
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
