"""The corpus library: cleaning, sentence splitting, sources, the train/val split."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertcore.common.errors import BertError, ConfigError
from bertcore.data.corpus.build import build_corpus
from bertcore.data.corpus.cleaning import TextCleaner
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.corpus.pythondocs import PythonDocsSource, readable_prose, stdlib_modules
from bertcore.data.corpus.sentences import SentenceSplitter, split_sentences
from bertcore.data.corpus.sources import detect_format


def build(tmp_path: Path, source, **config):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    stats = build_corpus(CorpusConfig(source=str(source), **config), out, progress=False)
    return stats, documents(out / "train.txt"), documents(out / "val.txt")


def documents(path: Path) -> list[list[str]]:
    """The file as documents (lists of sentences), checking the format on the way."""
    text = path.read_text(encoding="utf-8")
    if not text:
        return []
    assert text.endswith("\n") and not text.endswith("\n\n")
    docs = [block.split("\n") for block in text[:-1].split("\n\n")]
    assert all(sentence.strip() == sentence and sentence for doc in docs for sentence in doc)
    return docs


# --- sentence splitting -------------------------------------------------------------------


def test_english_sentences_abbreviations_and_numbers():
    text = (
        'Dr. Smith paid 3.14 dollars, e.g. for tea. It was "fine." Was it? '
        "Yes! J. R. R. Tolkien wrote it in the U.S. in 1937. 1938 came. He said yes. "
        "2. Numbered items stay whole. See p. 5 and No. 7. Then stop."
    )
    assert split_sentences(text) == [
        "Dr. Smith paid 3.14 dollars, e.g. for tea.",
        'It was "fine."',
        "Was it?",
        "Yes!",
        "J. R. R. Tolkien wrote it in the U.S. in 1937.",
        "1938 came.",
        "He said yes.",
        "2. Numbered items stay whole.",
        "See p. 5 and No. 7.",
        "Then stop.",
    ]
    assert split_sentences("the end. of nothing. lower case does not split.") == [
        "the end. of nothing. lower case does not split."
    ]


def test_cjk_sentences_split_after_full_stop_without_space():
    text = "今日は良い天気です。「散歩に行こう。」と彼は言った！本当？はい。我们走吧。"
    assert split_sentences(text) == [
        "今日は良い天気です。",
        "「散歩に行こう。」",
        "と彼は言った！",
        "本当？",
        "はい。",
        "我们走吧。",
    ]
    # NFKC folds ！？ to !?; after a CJK character they still end a sentence.
    assert split_sentences("你好!我很好?谢谢。") == ["你好!", "我很好?", "谢谢。"]


def test_overlong_sentences_are_cut_at_spaces_or_hard():
    words = " ".join(f"word{i}" for i in range(500))  # 3889 characters, no sentence end
    pieces = split_sentences(words, max_chars=1000)
    assert [len(piece) for piece in pieces] == [993, 999, 999, 895]
    assert " ".join(pieces) == words  # cut at spaces: nothing lost
    solid = "字" * 2500
    assert split_sentences(solid, max_chars=1000) == ["字" * 1000, "字" * 1000, "字" * 500]


def test_splitting_in_chunks_equals_splitting_at_once():
    text = "First one here. Second, with e.g. an aside! Third? " * 50 + "Tail without end"
    whole = split_sentences(text, max_chars=60)
    splitter = SentenceSplitter(max_chars=60)
    pieces = []
    for start in range(0, len(text), 7):  # cut anywhere, even inside words
        pieces += splitter.feed(text[start : start + 7])
    assert pieces + splitter.end() == whole


# --- cleaning -----------------------------------------------------------------------------


def test_cleaning_removes_html_and_control_characters_and_folds_whitespace():
    cleaner = TextCleaner("NFKC")
    raw = (
        "<p>Hello&nbsp;<b>world</b>\u0007!</p>\t\n <script>var x = 1;</script>"
        "Read from <stdin>, List<int>, a < b > c.\u200b ﬁne"
    )
    assert cleaner.clean(raw) == " Hello world ! Read from <stdin>, List<int>, a < b > c. fine"
    assert cleaner.counts.html_tags_removed == 5
    assert cleaner.counts.control_characters_removed == 2  # \a and the zero-width space
    assert TextCleaner("NFC").clean("ﬁne Ａ") == "ﬁne Ａ"
    assert TextCleaner("NFKC").clean("ﬁne Ａ") == "fine A"


# --- sources and the whole build ------------------------------------------------------------


def test_cjk_text_survives_intact(tmp_path):
    text = "東京は日本の首都です。人口は約千四百万人です。\n北京是中国的首都。上海很大！"
    (tmp_path / "cjk.txt").write_text(text, encoding="utf-8")
    stats, train, _ = build(tmp_path, tmp_path / "cjk.txt", normalization="NFC")
    assert train == [
        ["東京は日本の首都です。", "人口は約千四百万人です。", "北京是中国的首都。", "上海很大！"]
    ]
    assert "".join(train[0]) == text.replace("\n", "")
    assert stats.characters == len(text) - 1
    # NFKC (the default) keeps every Han and kana character; only ！ becomes its ASCII form.
    _, train, _ = build(tmp_path, tmp_path / "cjk.txt", normalization="NFKC")
    assert "".join(train[0]) == text.replace("\n", "").replace("！", "!")


def test_prose_and_lines_files_and_format_detection(tmp_path):
    prose = "This is wrapped\nprose over lines. It has\ntwo sentences.\n\nNew paragraph\n"
    lines = (
        "One sentence per line.\nAnother one, e.g. this. Kept whole.\nA third line\n"
        "And a fourth.\n\nSecond doc here.\n"
    )
    assert detect_format(prose) == "prose"
    assert detect_format(lines * 5) == "lines"
    assert detect_format("One paragraph per line here.\n\nAnd another one.\n\n" * 5) == "prose"
    assert detect_format("Paragraph per line. Two sentences.\nAgain. And again.\n" * 5) == "prose"
    folder = tmp_path / "src"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(prose)
    (folder / "sub" / "b.txt").write_text(lines * 5)  # repeated: documents 3-10 are duplicates
    (folder / ".hidden.txt").write_text("Never read.")
    # whole documents (auto would split these 4 by parts): this test is about reading them
    stats, train, val = build(tmp_path, folder, val_fraction=0.3, split_by="documents")
    docs = sorted(train + val)
    first = ["One sentence per line.", "Another one, e.g. this. Kept whole."]
    assert docs == sorted(
        [
            ["This is wrapped prose over lines.", "It has two sentences.", "New paragraph"],
            [*first, "A third line", "And a fourth."],
            ["Second doc here.", *first, "A third line", "And a fourth."],
            ["Second doc here."],
        ]
    )
    assert stats.documents == 4 and stats.dropped["duplicate_documents"] == 3
    assert stats.input["files"] == 2


def test_glob_jsonl_and_parquet_with_text_field(tmp_path):
    records = [{"body": "A first record. It has two sentences."}, {"title": "no body"}]
    with open(tmp_path / "a.jsonl", "w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
        handle.write("{not json\n")
    table = pa.table({"body": ["A parquet row.\n\nIts second paragraph.", None, "Row three."]})
    pq.write_table(table, tmp_path / "b.parquet")
    stats, train, val = build(tmp_path, tmp_path / "*.*", text_field="body", val_fraction=0.5)
    assert sorted(train + val) == [
        ["A first record.", "It has two sentences."],
        ["A parquet row.", "Its second paragraph."],
        ["Row three."],
    ]
    assert stats.dropped["records_without_text"] == 2
    assert stats.dropped["invalid_json_lines"] == 1
    with pytest.raises(BertError, match=r"no column 'text'.*corpus\.text_field"):
        build(tmp_path, tmp_path / "b.parquet")


def test_binary_files_skipped_and_invalid_utf8_replaced(tmp_path):
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    (tmp_path / "latin1.txt").write_bytes("Café crème. Déjà vu.\n".encode("latin-1"))
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "nowhere.txt")  # skipped: not a file
    stats, train, val = build(tmp_path, tmp_path)
    assert train + val == [["Caf\ufffd cr\ufffdme.", "D\ufffdj\ufffd vu."]]
    assert stats.dropped["binary_files"] == 1 and stats.input["files"] == 2
    assert stats.cleaning["invalid_utf8_sequences"] == 4


def test_empty_and_duplicate_documents_dropped_and_counted(tmp_path):
    lines = "Kept doc.\n\n<div></div>\n\nKept doc.\n\n   \t\n\nOther doc.\n\n"
    (tmp_path / "docs.txt").write_text(lines * 3)
    stats, train, val = build(tmp_path, tmp_path / "docs.txt", format="lines")
    assert sorted(train + val) == [["Kept doc."], ["Other doc."]]
    assert stats.dropped["duplicate_documents"] == 7
    assert stats.dropped["empty_documents"] == 3  # the <div></div> ones; blank lines are gaps
    assert stats.to_dict()["documents"] == 2


def test_nothing_left_after_cleaning_is_an_error(tmp_path):
    (tmp_path / "tags.html").write_text("<html><body>\n<p> </p>\n</body></html>\n")
    with pytest.raises(BertError, match="no text left after cleaning"):
        build(tmp_path, tmp_path / "tags.html")


def test_split_is_deterministic_by_content_and_keeps_one_val_document(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(200):
        (folder / f"{i:03d}.txt").write_text(f"Document number {i} is here. It ends now.")
    stats, train, val = build(tmp_path, folder, val_fraction=0.2, seed=1)
    assert 20 <= len(val) <= 60 and len(train) + len(val) == 200
    assert stats.val.documents == len(val) and stats.val.sentences == 2 * len(val)
    again = build(tmp_path, folder, val_fraction=0.2, seed=1)
    assert (again[1], again[2]) == (train, val)
    other_seed = build(tmp_path, folder, val_fraction=0.2, seed=2)
    assert other_seed[2] != val
    # A document's split depends on its content only: dropping others does not move it.
    for path in sorted(folder.iterdir())[100:]:
        path.unlink()
    half = build(tmp_path, folder, val_fraction=0.2, seed=1)
    assert half[2] == [doc for doc in val if int(doc[0].split()[2]) < 100]
    # Two documents: one goes to val whatever the fraction says.
    for path in sorted(folder.iterdir())[2:]:
        path.unlink()
    stats, train, val = build(tmp_path, folder, val_fraction=0.01)
    assert len(train) == 1 and len(val) == 1 and stats.train.documents == 1


def test_long_line_is_read_cleaned_and_split_in_chunks(tmp_path):
    """3 MB in one line: read in 1 MiB pieces, cleaned in 64k pieces, split as if whole
    (test_corpus_cli checks memory on 10 MB)."""
    sentence = "The quick brown fox jumps over the lazy dog near 3.14 meters, e.g. twice. "
    count = 3_000_000 // len(sentence)
    (tmp_path / "line.txt").write_text(sentence * count + "字" * 3000)
    stats, train, _ = build(tmp_path, tmp_path / "line.txt", split_by="documents")
    assert stats.sentences == count + 3 and stats.documents == 1
    assert train[0][0] == sentence.strip() and train[0][-3:] == ["字" * 1000] * 3
    assert stats.cleaning["overlong_sentence_cuts"] == 2


def test_config_validation():
    with pytest.raises(ConfigError, match="val_fraction"):
        CorpusConfig(val_fraction=1.0)
    with pytest.raises(ConfigError, match="normalization"):
        CorpusConfig(normalization="NFD")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_sentence_chars"):
        CorpusConfig(max_sentence_chars=0)


# --- the built-in corpus --------------------------------------------------------------------


def test_builtin_reads_docstrings_without_importing(tmp_path):
    stdlib = tmp_path / "lib"
    (stdlib / "pkg").mkdir(parents=True)
    (stdlib / "test").mkdir()
    (stdlib / "pkg" / "__init__.py").write_text('"""The package."""\nraise SystemExit(3)\n')
    (stdlib / "pkg" / "mod.py").write_text(
        '"""Module doc.\n\n>>> example()\n42\n"""\n'
        'class Thing:\n    """A thing."""\n    def run(self):\n        """Run it."""\n'
        'def _private():\n    """Hidden."""\n'
    )
    (stdlib / "_private.py").write_text('"""Private module."""')
    (stdlib / "test" / "__init__.py").write_text('"""Tests."""')
    assert [name for name, _ in stdlib_modules(stdlib)] == ["pkg", "pkg.mod"]
    source = PythonDocsSource(stdlib)
    texts = [
        "".join(text for text, _ in doc.pieces) for doc in source.documents({}, lambda n: None)
    ]
    assert texts[-2:] == ["The package. ", "Module doc. A thing. Run it. "]
    assert readable_prose("Title\n*****\n\nText:\n\n   code()\n\n+--+\n| x |") == "Title\n\nText:"
    assert readable_prose("Use :meth:`str.format` on ``x``.\n.. versionadded:: 3.2") == (
        "Use str.format on x.\nNew in version 3.2."
    )


def test_builtin_python_docs_default(tmp_path):
    stats, train, val = build(tmp_path, "builtin:python-docs")
    assert stats.documents > 300 and len(val) >= 5
    assert stats.characters > 500_000
    assert any(doc[0] == 'The "assert" statement' for doc in train + val)
    # the text is this interpreter's documentation: metrics/corpus.json says which
    assert stats.to_dict()["made_with"] == {"python": platform.python_version()}


def test_digest_set_membership_across_merges():
    from bertcore.data.corpus.writer import DigestSet

    seen = DigestSet(pending_limit=8)
    keys = [(i * 0x9E3779B97F4A7C15) % (1 << 64) for i in range(100)]
    for key in keys[:50]:
        assert key not in seen
        seen.add(key)
    assert len(seen) == 50
    assert all(key in seen for key in keys[:50])
    assert not any(key in seen for key in keys[50:])
