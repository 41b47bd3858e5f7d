"""Sphinx configuration of the book: the executed notebooks of a run (``make book``), read with myst-nb
and never executed again, in the Furo theme. Everything the pages load ships with these packages:
nothing is fetched at build time or when a page opens. A headless run draws the widgets as their table
and figure (``interactive=False``), so no widget JavaScript is needed: myst-nb's, which would come from a
CDN, is left out."""
project = "nogradlab"
html_title = "nogradlab: what torch.no_grad really does"
extensions = ["myst_nb"]
root_doc = "contents"  # index.html is the run's report (html_extra_path), the front page
exclude_patterns = ["_build", "_extra", "**.ipynb_checkpoints"]
nb_execution_mode = "off"  # the notebooks come executed from the run
nb_ipywidgets_js = {}  # no require.js / widget manager from a CDN
html_theme = "furo"
html_extra_path = ["_extra"]
# book.css: code blocks and outputs wrap instead of scrolling sideways (issue 39)
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {"navigation_with_keys": True}
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]
# the footer: who holds the copyright and under which licence (LICENSE), not an empty "Copyright ©"
copyright = "2026, the nogradlab authors; MIT License"
