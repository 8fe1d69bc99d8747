"""The HTML template of `dvc plots show` and `dvc plots diff` that draws their charts with no
network: `make plots-page` installs Vega, Vega-Lite and vega-embed from npm into
plots/node_modules (plots/package-lock.json pins them), runs this script, which writes them
inlined into plots/page.html, and names that file in .dvc/config.local (`plots.html_template`),
so a plain `dvc plots show` uses it. DVC's own page loads the same scripts from the web, and
offline its charts are simply absent.

The template has no `{scripts}` placeholder (DVC would put its web scripts there), only
`{plot_divs}`, where DVC puts each chart as `vegaEmbed('#name', spec)`, and `{refresh_tag}`.
A chart whose files hold no row, an output its stage did not make (the GLUE seeds' chart with
GLUE off), gets the spec `{}`: the page leaves it out instead of drawing an empty frame. The
others are drawn as SVG (vega-embed's default is a canvas): lines and points are elements of
the page, which tests/test_plots_page.py counts.

Usage: python plots/page.py [--out PATH]   (stdlib only; exits 1 naming what is missing)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLES = ("vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js",
           "vega-embed/build/vega-embed.min.js")
PLACEHOLDERS = ("{scripts}", "{plot_divs}", "{refresh_tag}")  # what DVC replaces in a template

# Runs after vega-embed, before DVC's charts: a chart with nothing to draw is removed, the
# others drawn as SVG.
SKIP_EMPTY = """
(function () {
  var embed = window.vegaEmbed;
  window.vegaEmbed = function (selector, spec, options) {
    if (spec && Object.keys(spec).length) {
      return embed(selector, spec, Object.assign({renderer: "svg"}, options));
    }
    var chart = document.querySelector(selector);
    if (chart) chart.remove();  // its files hold no row: an output that was not made
    return Promise.resolve(null);
  };
})();
"""

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
@SCRIPTS@
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


class MissingBundle(Exception):
    """A script the page inlines is not installed."""


def inline_script(source: str) -> str:
    """`source` as an inline <script>: its source-map comment dropped (the map is not beside
    the page), and nothing in it that would end the element or that DVC would replace."""
    source = re.sub(r"\n//# sourceMappingURL=\S+\s*$", "\n", source)
    source = source.replace("</script", "<\\/script")
    for placeholder in PLACEHOLDERS:
        if placeholder in source:
            raise ValueError(f"a script holds {placeholder}, which DVC would replace")
    return f"    <script>\n{source}\n    </script>"


def page(modules: Path = HERE / "node_modules") -> str:
    """The template's text, with every bundle under `modules` inlined."""
    missing = [name for name in BUNDLES if not (modules / name).is_file()]
    if missing:
        raise MissingBundle(f"{modules} lacks {', '.join(missing)}: run `make plots-page` "
                            f"(npm ci --prefix plots)")
    scripts = [inline_script((modules / name).read_text(encoding="utf-8")) for name in BUNDLES]
    return PAGE.replace("@SCRIPTS@", "\n".join([*scripts, inline_script(SKIP_EMPTY)]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "page.html",
                        help="where to write the template (default: plots/page.html)")
    args = parser.parse_args(argv)
    try:
        text = page()
    except MissingBundle as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    partial = args.out.with_name(f".{args.out.name}.tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(args.out)  # whole or not at all
    print(f"wrote {args.out} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
