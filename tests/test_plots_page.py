"""`dvc plots show` with the page `make plots-page` makes (plots/page.py), opened in a real
headless browser with the network off: every chart of dvc.yaml's `plots:` is drawn (with its
own templates, .dvc/plots/), except one whose files hold no row (GLUE off), which is left out.
Small files in a temporary DVC repo, no pipeline. Debian's chromium draws it (`make
install-dev` installs it); where it is missing the test fails, naming it, rather than passing
unchecked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
DVC = shutil.which("dvc", path=str(VENV_BIN)) or shutil.which("dvc")
NOT_MADE = "metrics/glue_seeds.tsv"  # GLUE off: the glue stage writes only its header
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                  "source", "track", "wbr"})  # elements with no end tag
DATA_MARKS = {"mark-line", "mark-symbol"}  # vega's SVG: the groups of a chart's lines, points
# every host unknown and every connection to a proxy that is not there: no network
OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9"]


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}{proc.stderr}"
    return proc


def charts() -> dict[str, dict]:
    """dvc.yaml's charts (not its images), by name."""
    declared = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["plots"]
    return {name: spec for plot in declared if isinstance(plot, dict)
            for name, spec in plot.items()}


def write_plot_files(repo: Path, made: bool) -> None:
    """Three rows in each file a chart reads, with every column it names (a word where it is
    not the x of a line, GLUE's task); NOT_MADE with its header only unless `made`."""
    columns: dict[str, dict[str, str]] = {}
    for spec in charts().values():
        for path, fields in spec["y"].items():
            named = columns.setdefault(path, {})
            named[spec["x"]] = "word" if spec.get("template") else "number"  # default: lines
            named.update(dict.fromkeys([fields] if isinstance(fields, str) else fields,
                                       "number"))
    for path, named in columns.items():
        rows = [] if path == NOT_MADE and not made else [
            [f"task{i}" if kind == "word" else str(i + 0.5) for kind in named.values()]
            for i in range(3)]
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("\n".join("\t".join(row) for row in [list(named), *rows])
                                 + "\n", encoding="utf-8")


def html_template_setting() -> str:
    """The `plots.html_template` that `make plots-page` sets (relative to .dvc/)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return re.search(r"dvc config --local plots\.html_template (\S+)", makefile).group(1)


def plots_repo(tmp_path: Path) -> Path:
    """A DVC repo holding dvc.yaml's plots and their templates, and the page's template where
    `make plots-page` writes it, named in .dvc/config.local as it does."""
    repo = tmp_path / "repo"
    repo.mkdir()
    run([DVC, "init", "--no-scm", "-q"], repo)
    (repo / "dvc.yaml").write_text(yaml.safe_dump(
        {"plots": yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["plots"]}))
    shutil.copytree(ROOT / ".dvc" / "plots", repo / ".dvc" / "plots")
    setting = html_template_setting()
    page = (repo / ".dvc" / setting).resolve()
    assert page == repo / "plots" / "page.html", setting
    page.parent.mkdir()
    made = subprocess.run([sys.executable, ROOT / "plots" / "page.py", "--out", page],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr  # no bundles: `make plots-page` installs them
    run([DVC, "config", "--local", "plots.html_template", setting], repo)
    return repo


class DrawnCharts(HTMLParser):
    """The ids of the elements in a DOM that hold a chart vega drew with its data (a line or a
    point, an SVG path in a group of data marks: not an axis, a legend or an empty frame), and
    every id present."""

    def __init__(self):
        super().__init__()
        self.open: list[tuple[str, str | None, bool]] = []  # tag, id, a group of data marks
        self.drawn: set[str] = set()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        if tag == "path" and self.open and self.open[-1][2]:
            self.drawn |= {element_id for _, element_id, _ in self.open if element_id}
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag not in VOID:
            data_marks = tag == "g" and "role-mark" in classes and bool(DATA_MARKS & classes)
            self.open.append((tag, attrs.get("id"), data_marks))

    def handle_endtag(self, tag):
        while self.open and self.open.pop()[0] != tag:
            pass


def rendered(page: Path, tmp_path: Path) -> DrawnCharts:
    """The DOM of `page` once headless chromium ran its scripts with no network."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: `make install-dev` installs it (apt, Debian)"
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium'}", *OFFLINE, "--virtual-time-budget=10000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    parser = DrawnCharts()
    parser.feed(dom.stdout)
    return parser


def shown(repo: Path, tmp_path: Path) -> DrawnCharts:
    """A plain `dvc plots show` (the template from .dvc/config.local), drawn offline."""
    run([DVC, "plots", "show"], repo)
    page = repo / "dvc_plots" / "index.html"
    assert not re.search(r"<script[^>]*\bsrc=", page.read_text(encoding="utf-8"))
    return rendered(page, tmp_path)


def test_plots_show_draws_every_chart_offline_and_none_for_an_output_not_made(tmp_path):
    repo = plots_repo(tmp_path)
    write_plot_files(repo, made=False)
    dom = shown(repo, tmp_path)
    made = {name for name, spec in charts().items() if NOT_MADE not in spec["y"]}
    assert made and dom.drawn & set(charts()) == made
    assert not (set(charts()) - made) & dom.ids  # no frame, no error: not in the page at all
    write_plot_files(repo, made=True)
    assert shown(repo, tmp_path).drawn & set(charts()) == set(charts())
