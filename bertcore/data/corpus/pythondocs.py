"""The built-in corpus: the documentation that ships with the Python interpreter.

`builtin:python-docs` gives one document per pydoc topic (`pydoc_data.topics`, the text
behind `help("for")`) and one per public standard-library module: its docstring followed by
the docstrings of its public classes, methods and functions, in source order. Docstrings are
read from the source files with `ast`, never by importing a module (no side effects, no
`antigravity`). Code is left out: doctest examples, indented blocks (code, grammar rules)
and heading underlines. Offline and deterministic for a given Python version (another one
has other docs: metrics/corpus.json records the version); about 2 MB.
"""

from __future__ import annotations

import ast
import os
import platform
import re
import sysconfig
import warnings
from collections.abc import Iterator
from pathlib import Path

from bertcore.data.corpus.counts import CorpusCounts
from bertcore.data.corpus.documents import Advance, Record, Source

# Packages that are tests, GUIs, demos or bundled wheels rather than documented library.
SKIPPED_PACKAGES = frozenset(
    (
        "test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo", "lib2to3",
        "ensurepip", "pydoc_data", "antigravity", "this",
    )
)
_RULE = re.compile(r"^\s*([*=\-~^#+`'\".])\1{2,}\s*$")  # a heading underline
_TABLE_ROW = re.compile(r"^\s*(\+[-=+]{3,}|\|)")  # a row or border of a grid table
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")  # :class:`~foo.Bar` -> foo.Bar
_LITERAL = re.compile(r"``([^`]+)``")  # ``x`` -> x
_DIRECTIVE = re.compile(r"^(\s*)\.\. ([a-z-]+)::\s*(\S*)")
_VERSION_DIRECTIVES = {
    "versionadded": "New in version {}.",
    "versionchanged": "Changed in version {}:",
    "deprecated": "Deprecated since version {}.",
}


class PythonDocsSource(Source):
    def __init__(self, stdlib: str | Path | None = None):
        self.stdlib = Path(stdlib or sysconfig.get_paths()["stdlib"])
        self.topics = _pydoc_topics()
        self.modules = stdlib_modules(self.stdlib)
        self.total = len(self.topics) + len(self.modules)

    def made_with(self) -> dict[str, str]:
        """The interpreter whose documentation the text is."""
        return {"python": platform.python_version()}

    def documents(self, counts: CorpusCounts, advance: Advance) -> Iterator[Record]:
        for name, text in self.topics:
            advance(1)
            yield Record(f"topic:{name}", readable_prose(text))
        for name, path in self.modules:
            advance(1)
            text = module_text(path)
            if text is None:
                counts.unparsable_modules += 1
                continue
            yield Record(f"module:{name}", text)


BUILTINS = {"builtin:python-docs": PythonDocsSource}


def _pydoc_topics() -> list[tuple[str, str]]:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions leave pydoc_data out
        return []
    return sorted(topics.items())


def stdlib_modules(stdlib: Path) -> list[tuple[str, Path]]:
    """(dotted name, source path) of the public modules under `stdlib`, sorted by name."""
    modules = []
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = [d for d in dirs if _public(d)]
        package = Path(root).relative_to(stdlib).parts
        for file in files:
            stem, suffix = os.path.splitext(file)
            if suffix != ".py" or not (stem == "__init__" or _public(stem)):
                continue
            if package and not os.path.exists(os.path.join(root, "__init__.py")):
                continue  # a folder of scripts or data, not a package
            parts = package if stem == "__init__" else (*package, stem)
            if parts:
                modules.append((".".join(parts), Path(root, file)))
    return sorted(modules)


def _public(name: str) -> bool:
    return name.isidentifier() and not name.startswith("_") and name not in SKIPPED_PACKAGES


def module_text(path: Path) -> str | None:
    """The module's public docstrings as prose paragraphs, or None if it does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old modules
            tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return None
    return "\n\n".join(readable_prose(doc) for doc in _docstrings(tree))


def _docstrings(node: ast.AST) -> Iterator[str]:
    docstring = ast.get_docstring(node)  # type: ignore[arg-type]
    if docstring:
        yield docstring
    for child in getattr(node, "body", ()):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if child.name.startswith("_") and not child.name.endswith("__"):
                continue
            if isinstance(child, ast.ClassDef):
                yield from _docstrings(child)
            else:
                docstring = ast.get_docstring(child)
                if docstring:
                    yield docstring


def readable_prose(text: str) -> str:
    """Keep the prose of reST-like documentation: drop doctest examples, heading underlines,
    tables, and paragraphs that are entirely indented (code blocks, grammar rules); turn
    inline markup into plain text."""
    kept = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        lines = []
        for line in paragraph.splitlines():
            if line.lstrip().startswith(">>>"):
                break  # the rest of the paragraph is the example and its output
            if not _RULE.match(line) and not _TABLE_ROW.match(line):
                line = _without_markup(line)
                if line.strip():
                    lines.append(line)
        if lines and not all(line[:1].isspace() for line in lines):
            kept.append("\n".join(lines))
    return "\n\n".join(kept)


def _without_markup(line: str) -> str:
    """Inline reST markup as plain text; `.. versionchanged:: 3.2` as the rendered docs say."""
    if "`" in line:
        line = _LITERAL.sub(r"\1", _ROLE.sub(r"\1", line))
    directive = _DIRECTIVE.match(line)
    if directive:
        indent, name, argument = directive.groups()
        template = _VERSION_DIRECTIVES.get(name, "{}")
        line = f"{indent}{template.format(argument)}{line[directive.end() :]}"
    return line
