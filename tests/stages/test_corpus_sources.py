"""`bert corpus` reading awkward sources: symlink loops, UTF-16/32 files, Parquet columns of
the wrong type, unreadable folders."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.bert import REPO, assert_one_line_error
from helpers.unprivileged import without_root_powers

DOCS = {
    "a.txt": "Alpha talks first. Alpha talks again.\n",
    "sub/b.txt": "Beta has a story. It ends here.\n",
    "sub/deeper/c.txt": "Gamma closes the set. Nothing follows.\n",
}


def corpus(cwd: Path, source: str, *, prefix: tuple[str, ...] = (), timeout: int = 120):
    """`bert corpus` with `corpus.source=source` (raw prose), failing fast if it hangs."""
    (cwd / "params.yaml").write_text(yaml.safe_dump(
        {"corpus": {"source": source, "format": "prose", "val_fraction": 0.3}}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*prefix, sys.executable, "-m", "bertstages", "corpus"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def written(cwd: Path) -> str:
    return "".join((cwd / "data" / "corpus" / f"{s}.txt").read_text(encoding="utf-8")
                   for s in ("train", "val"))


def metrics(cwd: Path) -> dict:
    return json.loads((cwd / "metrics" / "corpus.json").read_text())


def make_tree(root: Path) -> None:
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_glob_and_folder_never_loop_through_directory_links(tmp_path):
    source = tmp_path / "s"
    make_tree(source)
    (source / "sub" / "deeper" / "up").symlink_to("../..")  # two links back into the tree
    (source / "sub" / "loop").symlink_to("..")
    (source / "same.txt").symlink_to("a.txt")  # a second name of a file
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "d.txt").write_text("Delta lives outside. It is linked in.\n")
    (source / "linked").symlink_to(outside)  # a link out of the tree is followed
    for spec in ("s/**/*.txt", "s", "s/**"):
        proc = corpus(tmp_path, spec, timeout=60)
        assert proc.returncode == 0, (spec, proc.stderr)
        found = metrics(tmp_path)
        assert found["input"]["files"] == 4, spec  # each file read once
        assert found["dropped"].get("duplicate_documents", 0) == 0, spec
        assert found["documents"] == 4
        assert "Delta lives outside." in written(tmp_path)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_utf16_and_utf32_files_with_a_byte_order_mark_are_read(tmp_path, encoding):
    text = "Windows wrote this file. Its lines end in CR LF.\r\n\r\n東京は大きい。京都は古い。\r\n"
    bom = "\ufeff".encode(encoding)
    (tmp_path / "notes.txt").write_bytes(bom + text.encode(encoding))
    proc = corpus(tmp_path, "notes.txt")
    assert proc.returncode == 0, proc.stderr
    assert written(tmp_path).split("\n") == [
        "Windows wrote this file.", "Its lines end in CR LF.", "東京は大きい。", "京都は古い。", ""]
    assert metrics(tmp_path)["dropped"].get("binary_files", 0) == 0
    # without its byte order mark it cannot be told from binary data: said so
    (tmp_path / "notes.txt").write_bytes(text.encode(encoding))
    proc = corpus(tmp_path, "notes.txt")
    assert_one_line_error(proc, "cannot use notes.txt as corpus.source: it is binary",
                          "UTF-16 or UTF-32 text needs a byte order mark")


@pytest.mark.parametrize(
    ("values", "shown"),
    [([1, 2], "int64"), ([["a"], ["b"]], "list<"), ([b"a", b"b"], "binary")],
)
def test_a_parquet_text_column_of_another_type_is_named_with_its_type(tmp_path, values, shown):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"text": values, "body": ["One text here.", "Another one there."]})
    pq.write_table(table, tmp_path / "records.parquet")
    proc = corpus(tmp_path, "records.parquet")
    assert_one_line_error(proc, f"column 'text' holds {shown}", "not text",
                          "set corpus.text_field", "(text columns: body)")


def test_an_unreadable_folder_is_one_line_like_an_unreadable_file(tmp_path):
    source = tmp_path / "s"
    make_tree(source)
    prefix = without_root_powers()
    locked = source / "sub"
    locked.chmod(0)
    try:
        for spec in ("s", "s/**/*.txt"):
            proc = corpus(tmp_path, spec, prefix=prefix)
            assert_one_line_error(proc, "cannot read folder s/sub: Permission denied",
                                  "fix its permissions or leave it out of corpus.source")
        assert not (tmp_path / "data" / "corpus").exists()
    finally:
        locked.chmod(0o755)


def test_the_corpus_modules_import_each_other_in_one_direction():
    """No import cycle among bertcore.data.corpus modules (imports inside functions count too)."""
    package = REPO / "bertcore" / "data" / "corpus"
    graph = {}
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                  for alias in node.names}
        graph[path.stem] = {n.rsplit(".", 1)[1] for n in names
                            if n and n.startswith("bertcore.data.corpus.")}

    def reaches(start: str, goal: str, seen: set) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n}))
                   for n in graph.get(start, ()))

    cycles = sorted(m for m in graph if m != "__init__" and reaches(m, m, set()))
    assert cycles == []
