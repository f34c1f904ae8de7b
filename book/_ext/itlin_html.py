"""A Sphinx fix for the rendered book, loaded through `sphinx.local_extensions` in _config.yml.

Inline scripts appear twice on every page. Under Sphinx 7.4 (the version Jupyter Book 1
pins), an extension that calls ``app.add_js_file(None, body=...)`` once the HTML builder exists
(sphinx-togglebutton and sphinx-thebe do, in ``builder-inited`` and ``env-before-read-docs``)
has the script registered with the builder as filename ``None`` and again, when writing starts,
from the registry as filename ``''``. The two do not compare equal, so both copies are written.
The duplicate of sphinx-thebe's ``const THEBE_JS_URL = ...`` then makes every page throw
"SyntaxError: Identifier 'THEBE_JS_URL' has already been declared" in the browser.

This extension drops the second copy of any script with the same source, body and attributes
from each page's ``script_files`` just before the page is rendered. The browser test in
tests/test_book_build.py fails if a page logs a JavaScript error.
"""

from __future__ import annotations


def _script_key(js):
    filename = getattr(js, "filename", js)
    attributes = getattr(js, "attributes", {}) or {}
    return (str(filename or ""), getattr(js, "priority", None),
            tuple(sorted((k, str(v)) for k, v in attributes.items())))


def dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = _script_key(js)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    if len(unique) != len(scripts):
        context["script_files"] = unique


def setup(app):
    # late priority: after extensions that add page-specific scripts in html-page-context
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
