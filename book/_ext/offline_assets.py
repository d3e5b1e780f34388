"""Sphinx extension: serve Vega and MathJax from the book itself, so it renders offline.

Both are generated into the build output from installed packages at build time (nothing
third-party is committed): the Vega/Vega-Lite/vega-embed bundle from vl-convert-python, and
MathJax from the npm package pinned in package.json (``npm ci`` puts it in node_modules).
"""
from __future__ import annotations

import shutil
from pathlib import Path

VEGA_JS = "vendor/vega-bundle.js"
MATHJAX_DIR = Path(__file__).resolve().parents[2] / "node_modules" / "mathjax" / "es5"


def _add_scripts(app) -> None:
    app.add_js_file(VEGA_JS, priority=400)


def _write_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import vl_convert

    static = Path(app.outdir) / "_static"
    vega = static / VEGA_JS
    vega.parent.mkdir(parents=True, exist_ok=True)
    # Wrapped in a function so its top-level names (e.g. `_`) cannot collide with Sphinx's
    # scripts; the bundle exports window.vegaEmbed itself.
    vega.write_text("(function () {\n" + vl_convert.javascript_bundle() + "\n})();\n",
                    encoding="utf-8")
    if not MATHJAX_DIR.is_dir():
        raise RuntimeError(f"MathJax not found at {MATHJAX_DIR}: run `npm ci` (make book does)")
    target = static / "vendor" / "mathjax"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(MATHJAX_DIR, target)


def _drop_thebe(app, pagename, templatename, context, doctree) -> None:
    """Remove sphinx-thebe's scripts: the book has no live kernels, and its inline config
    (included twice by jupyter-book) names a CDN and raises a redeclaration error."""
    scripts = context.get("script_files")
    if scripts:
        context["script_files"] = [
            s for s in scripts
            if "thebe" not in str(s) and "THEBE" not in getattr(s, "attributes", {}).get("body", "")]


def setup(app):
    app.connect("builder-inited", _add_scripts)
    app.connect("html-page-context", _drop_thebe)
    app.connect("build-finished", _write_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
