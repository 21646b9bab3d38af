"""Sphinx configuration of the documentation site (see docs/about-this-site.md for why Sphinx).

The sources are not this folder: ``python -m sdaccel.tools.workshop.docs_site`` stages the README (as the landing
page), the executed smoke notebooks, this folder's pages and the READMEs they link to into
``build/docs/src`` with the repository's own layout, so every relative link that works on GitHub
works on the site too, and then runs ``sphinx-build -c docs build/docs/src build/docs/html``.

The API reference is curated, one page per room (``docs/api/<room>.md``, indexed by ``docs/api.md``):
each names its room's public functions and classes with ``autofunction`` / ``autoclass``, so
autodoc documents those and nothing else (no recursive autosummary of every module).
"""

project = "Making Stable Diffusion fast"
author = "sdaccel contributors"
copyright = "the sdaccel contributors, Apache-2.0"

extensions = [
    "myst_nb",  # Markdown (MyST) and Jupyter notebooks with their stored outputs
    "sphinx.ext.autodoc",  # the API pages, from the sdaccel package's docstrings
    "sphinx.ext.napoleon",  # Google-style "Args:" sections
    "sphinx.ext.viewcode",
]

root_doc = "index"
# benchmarks/results/*.md are not pages: the lab notes include their tables ({include}).
exclude_patterns = ["_build", "**/*.previous.ipynb", "**/.ipynb_checkpoints", "benchmarks/**"]

# The notebooks were executed by `python -m sdaccel.tools.workshop.run_notebooks --profile smoke` (in CI: by the
# test suite, with every notebook's results checked) just before the site is built; the site
# shows exactly those executed copies, so myst-nb must not execute them again.
nb_execution_mode = "off"
nb_merge_streams = True
nb_output_stderr = "remove"  # progress bars and library warnings on stderr stay out of the pages
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
add_module_names = False

html_theme = "furo"
html_title = "Making Stable Diffusion fast"
html_static_path: list[str] = []
html_show_sourcelink = False

suppress_warnings = ["mystnb.unknown_mime_type"]
