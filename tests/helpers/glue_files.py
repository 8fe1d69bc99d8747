"""A tiny GLUE folder in the layout of GLUE's own distribution (download_glue_data.py's), with
each file's real header written out here, independently of the reader: the texts hold bare
quotes, MRPC's headers start with a UTF-8 BOM, MNLI's dev has label1..label5 before
gold_label, CoLA's train/dev have no header, QNLI's dev ends in an empty line."""

from __future__ import annotations

from pathlib import Path

from bertcore.downstream.glue.tasks import GLUE_TASKS, GlueExample

_MNLI = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
         "sentence1_parse\tsentence2_parse\tsentence1\tsentence2")
_STSB = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
_NLI = "index\tsentence1\tsentence2"
# task key -> (header of train/dev (None: no header), of MNLI's dev, of test)
HEADERS = {
    "cola": (None, None, "index\tsentence"),
    "sst2": ("sentence\tlabel", None, "index\tsentence"),
    "mrpc": ("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String", None,
             "index\t#1 ID\t#2 ID\t#1 String\t#2 String"),
    "stsb": (f"{_STSB}\tscore", None, _STSB),
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", None,
            "id\tquestion1\tquestion2"),
    "mnli": (f"{_MNLI}\tlabel1\tgold_label",
             f"{_MNLI}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label", _MNLI),
    "qnli": ("index\tquestion\tsentence\tlabel", None, "index\tquestion\tsentence"),
    "rte": (f"{_NLI}\tlabel", None, _NLI),
    "wnli": (f"{_NLI}\tlabel", None, _NLI),
}
WORDS = ("alpha", "beta", "gamma")  # one per class, first in the text: a learnable signal


def glue_row(key: str, file_name: str, i: int) -> tuple[str, str | None, str | float | None]:
    """(text, pair, label) of row i of a file; label None in test files."""
    task = GLUE_TASKS[key]
    split = file_name.removesuffix(".tsv")
    if split.startswith("test"):
        label = None
    elif task.is_regression:
        label = (i % 11) / 2
    else:
        label = task.labels[i % len(task.labels)]
    if label is None:
        word = WORDS[0]
    else:  # STS-B: high scores and low ones
        word = WORDS[int(label >= 2.5) if task.is_regression else task.labels.index(label)]
    text = f'{word} {key} {split} text {i} "quoted'
    return text, f"{key} {split} pair {i}" if task.pair else None, label


def expected_examples(key: str, file_name: str, rows: int = 8) -> list[GlueExample]:
    """What reading a file of `write_glue_folder` gives."""
    test = file_name.startswith("test")
    first_line = 2 - (key == "cola" and not test)  # CoLA's train/dev have no header
    return [GlueExample(*glue_row(key, file_name, i), index=str(i) if test else str(first_line + i))
            for i in range(rows)]


def write_glue_folder(root: Path, tasks=None, rows: int = 8) -> Path:
    """Write train, dev and test files of `rows` rows for each task (keys; None: all nine)
    into `root`, a GLUE folder; returns root."""
    for key in tasks or GLUE_TASKS:
        task = GLUE_TASKS[key]
        for file_name in ("train.tsv", *task.dev.values(), *task.test.values()):
            path = root / task.folder / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = [_row(key, file_name, i) for i in range(rows)]
            header = _header(key, file_name)
            ending = "\n\n" if (key, file_name) == ("qnli", "dev.tsv") else "\n"
            path.write_text("\n".join(([header] if header else []) + lines) + ending,
                            encoding="utf-8")
    return root


def write_glue_vocab(root: Path, vocab_size: int) -> Path:
    """A WordPiece vocabulary of the GLUE folder's words at `root / "glue_data"` (so that its
    rows differ to a model, digits included), saved in `root / "data" / "vocab"`; returns
    that folder."""
    from bertcore.data.vocab.config import VocabConfig
    from bertcore.data.vocab.files import save_vocab
    from bertcore.data.vocab.training import LineBatches, train_tokenizer

    text = root / "text.txt"
    text.write_text("\n".join(cell for path in sorted((root / "glue_data").rglob("*.tsv"))
                              for line in path.read_text(encoding="utf-8").splitlines()
                              for cell in line.split("\t")), encoding="utf-8")
    config = VocabConfig(vocab_size=vocab_size, min_frequency=1)
    folder = root / "data" / "vocab"
    folder.mkdir(parents=True)
    save_vocab(train_tokenizer(LineBatches(text), config), folder)
    return folder


def _header(key: str, file_name: str) -> str | None:
    labelled, mnli_dev, test = HEADERS[key]
    if file_name.startswith("test"):
        return test
    return mnli_dev if mnli_dev and file_name.startswith("dev") else labelled


def _row(key: str, file_name: str, i: int) -> str:
    text, pair, label = glue_row(key, file_name, i)
    if key == "mnli":
        values = _mnli(i, text, pair, label, file_name)
    elif file_name.startswith("test"):
        values = _TEST_ROWS[key](i, text, pair)
    else:
        values = _ROWS[key](i, text, pair, label)
    return "\t".join(values)


def _mnli(i: int, text: str, pair: str, label: str | None, file_name: str) -> list[str]:
    values = [str(i), str(31193 + i), f"{i}n", "government", "( ( The ) )", "( This )",
              "(ROOT (S (NP The)))", "(ROOT (S (NP This)))", text, pair]
    if file_name.startswith("dev"):  # the annotators' labels, one disagreeing, then the gold
        labels = GLUE_TASKS["mnli"].labels
        other = labels[(labels.index(label) + 1) % len(labels)]
        return [*values, other, label, label, label, label, label]
    return values if label is None else [*values, label, label]


_ROWS = {  # the values of a labelled row (train, dev)
    "cola": lambda i, text, pair, label: [f"src{i}", label, "*" * (label == "0"), text],
    "sst2": lambda i, text, pair, label: [text, label],
    "mrpc": lambda i, text, pair, label: [label, str(1000 + i), str(2000 + i), text, pair],
    "stsb": lambda i, text, pair, label: [
        str(i), "main-captions", "MSRvid", "2012test", f"{i:04d}", "none", "none", text, pair,
        f"{label:.3f}"],
    "qqp": lambda i, text, pair, label: [str(i), str(2 * i + 1), str(2 * i + 2), text, pair,
                                         label],
    "qnli": lambda i, text, pair, label: [str(i), text, pair, label],
    "rte": lambda i, text, pair, label: [str(i), text, pair, label],
    "wnli": lambda i, text, pair, label: [str(i), text, pair, label],
}
_TEST_ROWS = {  # the values of a test row
    "cola": lambda i, text, pair: [str(i), text],
    "sst2": lambda i, text, pair: [str(i), text],
    "mrpc": lambda i, text, pair: [str(i), str(1000 + i), str(2000 + i), text, pair],
    "stsb": lambda i, text, pair: [
        str(i), "main-captions", "MSRvid", "2012test", f"{i:04d}", "none", "none", text, pair],
    "qqp": lambda i, text, pair: [str(i), text, pair],
    "qnli": lambda i, text, pair: [str(i), text, pair],
    "rte": lambda i, text, pair: [str(i), text, pair],
    "wnli": lambda i, text, pair: [str(i), text, pair],
}
