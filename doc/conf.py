"""Sphinx configuration for skbnngp (numpydoc, sphinx-gallery, autosummary, intersphinx)."""

import os
import re
import sys

sys.path.insert(0, os.path.abspath(".."))

import skbnngp  # noqa: E402

project = "skbnngp"
author = "skbnngp developers"
release = skbnngp.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]
autosummary_generate = True
numpydoc_show_class_members = False
templates_path = ["_templates"]
exclude_patterns = ["_build"]
html_theme = "pydata_sphinx_theme"

# Cross-links to other projects need their inventories from the internet; the offline build
# (CI, ``sphinx -W``) leaves them out. SKBNNGP_DOCS_INTERSPHINX=1 turns them on.
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "numpy": ("https://numpy.org/doc/stable", None),
    "scipy": ("https://docs.scipy.org/doc/scipy", None),
    "sklearn": ("https://scikit-learn.org/stable", None),
    "torch": ("https://pytorch.org/docs/stable", None),
} if os.environ.get("SKBNNGP_DOCS_INTERSPHINX") == "1" else {}

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"plot_",
}


# Methods inherited from scikit-learn (score, the metadata-routing setters) carry references
# to sklearn's own documentation labels, which do not exist here: show them as plain text.
_SKLEARN_ROLE = re.compile(r":(?:ref|term|class|func|meth|attr):`~?([^`<]*?)\s*(?:<[^>]*>)?`")


def _plain_sklearn_references(app, what, name, obj, options, lines):
    module = getattr(obj, "__module__", None) or ""
    if module.startswith("sklearn"):
        lines[:] = [_SKLEARN_ROLE.sub(lambda m: f"*{m.group(1).strip()}*", line)
                    for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _plain_sklearn_references, priority=100)
