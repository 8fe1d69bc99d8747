"""GLUE's nine tasks and their data: a folder in the layout of GLUE's own distribution (the one
`download_glue_data.py` makes), or `hf:glue` through the `datasets` package.

Each task's files have its own columns; they are found by the header where the file has one,
CoLA's train/dev (headerless) by position. The TSVs hold bare quotes, so they are split on tabs
with no quoting, as GLUE's own code reads them. A row that does not parse (another number of
columns than the file's: QQP's questions with a line break inside, MRPC's sentences with a tab
inside; a label outside the task's) is skipped and counted, as GLUE's reference loaders skip
it; a file with more such rows than GLUE's own files hold is not the task's file.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertcore.common.errors import BertError

log = logging.getLogger(__name__)

_HOW_TO_GET = ("download GLUE with its download_glue_data.py, or use hf:glue "
              "(docs/evaluation.md)")


@dataclass(frozen=True)
class GlueTask:
    key: str                      # "cola", "sst2", ...: also the config name of hf:glue
    folder: str                   # "CoLA", "SST-2", ...: its sub-folder in GLUE's layout
    labels: tuple[str, ...]       # class names in HF's glue id order; () = regression
    metrics: tuple[str, ...]      # names of `metrics.task_metrics`, GLUE's for the task
    pair: bool                    # sentence-pair task
    # evaluation name -> file (test: without labels)
    dev: dict[str, str] = field(default_factory=lambda: {"dev": "dev.tsv"})
    test: dict[str, str] = field(default_factory=lambda: {"test": "test.tsv"})

    @property
    def is_regression(self) -> bool:
        return not self.labels

    def columns(self) -> list[tuple[str, str, str]]:
        """(column, evaluation, metric) of each figure the report gives the task: `matthews`,
        or `mnli_m_accuracy` where a task has several evaluations."""
        return [(metric if len(self.dev) == 1 else f"{name}_{metric}", name, metric)
                for name in self.dev for metric in self.metrics]

    def __hash__(self) -> int:  # its dicts are not hashable; the key names it
        return hash(self.key)


BINARY = ("0", "1")
ENTAILMENT = ("entailment", "not_entailment")
GLUE_TASKS: dict[str, GlueTask] = {task.key: task for task in (
    GlueTask("cola", "CoLA", BINARY, ("matthews",), pair=False),
    GlueTask("sst2", "SST-2", BINARY, ("accuracy",), pair=False),
    GlueTask("mrpc", "MRPC", BINARY, ("f1", "accuracy"), pair=True),
    GlueTask("stsb", "STS-B", (), ("pearson", "spearman"), pair=True),
    GlueTask("qqp", "QQP", BINARY, ("f1", "accuracy"), pair=True),
    GlueTask("mnli", "MNLI", ("entailment", "neutral", "contradiction"), ("accuracy",), pair=True,
             dev={"mnli_m": "dev_matched.tsv", "mnli_mm": "dev_mismatched.tsv"},
             test={"mnli_m": "test_matched.tsv", "mnli_mm": "test_mismatched.tsv"}),
    GlueTask("qnli", "QNLI", ENTAILMENT, ("accuracy",), pair=True),
    GlueTask("rte", "RTE", ENTAILMENT, ("accuracy",), pair=True),
    GlueTask("wnli", "WNLI", BINARY, ("accuracy",), pair=True),
)}


@dataclass(frozen=True)
class GlueExample:
    text: str
    pair: str | None
    label: str | float | None     # a name of task.labels, a float (stsb), None (test files)
    index: str                    # test files: their index/id; else the line number (hf: its idx)


@dataclass(frozen=True)
class _Columns:
    """The columns a task's files are read by: text, pair, label (train/dev), index (test)."""

    text: str
    pair: str | None
    label: str
    index: str = "index"


_COLUMNS = {
    "cola": _Columns("sentence", None, "label"),  # test.tsv only: train/dev have no header
    "sst2": _Columns("sentence", None, "label"),
    "mrpc": _Columns("#1 String", "#2 String", "Quality"),
    "stsb": _Columns("sentence1", "sentence2", "score"),
    "qqp": _Columns("question1", "question2", "is_duplicate", index="id"),
    "mnli": _Columns("sentence1", "sentence2", "gold_label"),
    "qnli": _Columns("question", "sentence", "label"),
    "rte": _Columns("sentence1", "sentence2", "label"),
    "wnli": _Columns("sentence1", "sentence2", "label"),
}
# CoLA's train/dev: source, label, original label ("*" when unacceptable), sentence.
_COLA_LABEL, _COLA_TEXT, _COLA_WIDTH = 1, 3, 4

_MNLI = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse",
         "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
_STSB = ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
         "sentence2")
_MRPC = ("#1 ID", "#2 ID", "#1 String", "#2 String")
_NLI = ("index", "sentence1", "sentence2")
# The headers of GLUE's files, to say which task's file a wrong one looks like.
_KNOWN_HEADERS = {
    ("index", "sentence"): "CoLA's or SST-2's test file",
    ("sentence", "label"): "SST-2's train/dev file",
    ("Quality", *_MRPC): "MRPC's train/dev file",
    ("index", *_MRPC): "MRPC's test file",
    (*_STSB, "score"): "STS-B's train/dev file",
    _STSB: "STS-B's test file",
    ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"): "QQP's train/dev file",
    ("id", "question1", "question2"): "QQP's test file",
    (*_MNLI, "label1", "gold_label"): "MNLI's train file",
    (*_MNLI, "label1", "label2", "label3", "label4", "label5", "gold_label"): "MNLI's dev file",
    _MNLI: "MNLI's test file",
    ("index", "question", "sentence", "label"): "QNLI's train/dev file",
    ("index", "question", "sentence"): "QNLI's test file",
    (*_NLI, "label"): "RTE's or WNLI's train/dev file",
    _NLI: "RTE's or WNLI's test file",
}


# -------------------------------------------------------------------------------- folders
def tasks_in(folder: str | Path, wanted: Sequence[str] | None) -> list[GlueTask]:
    """The tasks to run from a GLUE folder, in GLUE's order: `wanted` (keys), or all that are
    there; a one-line BertError for a folder, key or task folder that is not."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise BertError(f"GLUE data folder not found: {folder}; {_HOW_TO_GET}")
    found, others = _task_folders(folder)
    if others:
        log.warning("glue: %s in %s %s no GLUE task's folder (%s): passed over",
                    ", ".join(f"{name}/" for name in others), folder,
                    "is" if len(others) == 1 else "are",
                    ", ".join(task.folder for task in GLUE_TASKS.values()))
    present = [task for task in GLUE_TASKS.values() if task.key in found]
    if not present:
        names = ", ".join(task.folder for task in GLUE_TASKS.values())
        raise BertError(f"{folder} holds none of GLUE's task folders ({names}); {_HOW_TO_GET}")
    if wanted is None:
        return present
    unknown = [key for key in wanted if key not in GLUE_TASKS]
    if unknown:
        raise BertError(f"unknown GLUE task {unknown[0]!r}: the tasks are "
                        f"{', '.join(GLUE_TASKS)}")
    for key in wanted:
        task = GLUE_TASKS[key]
        if task not in present:
            there = ", ".join(t.key for t in present)
            raise BertError(f"{folder / task.folder} not found for GLUE task {key}; the tasks "
                            f"in {folder}: {there}")
    return [task for task in present if task.key in wanted]


# what download_glue_data.py writes beside the tasks, passed over without a word
_NOT_TASKS = {"diagnostic"}


def _task_folders(folder: Path) -> tuple[dict[str, Path], list[str]]:
    """Task key -> its sub-folder of `folder`, whatever its case or hyphen (`SST-2`, `sst2`,
    `Sst-2`), and the names of the sub-folders that are no task's; two for one task are a
    one-line BertError."""
    found: dict[str, Path] = {}
    others = []
    for child in sorted(folder.iterdir()):
        if not child.is_dir() or child.name.startswith(".") or child.name in _NOT_TASKS:
            continue
        key = child.name.replace("-", "").replace("_", "").casefold()
        if key not in GLUE_TASKS:
            others.append(child.name)
        elif key in found:
            raise BertError(f"{folder} holds both {found[key].name}/ and {child.name}/ for "
                            f"GLUE's {GLUE_TASKS[key].folder}: keep one")
        else:
            found[key] = child
    return found, others


def task_file(folder: str | Path, task: GlueTask, file_name: str) -> Path:
    """The path of one of a task's files in a GLUE folder (its sub-folder in any case)."""
    folder = Path(folder)
    found = _task_folders(folder)[0] if folder.is_dir() else {}
    return found.get(task.key, folder / task.folder) / file_name


# ---------------------------------------------------------------------------------- files
@dataclass(frozen=True)
class SplitRows:
    """A file's examples, and the rows skipped because they do not parse (`first_skipped`:
    why the first was)."""

    examples: list[GlueExample]
    skipped: int = 0
    first_skipped: str | None = None


# GLUE's own files hold a few rows that do not parse (QQP's train: a handful in 364k); more
# than this share of a file's rows means another file, or another labelling, than the task's
MAX_SKIPPED_SHARE = 0.01


def read_split(folder: str | Path, task: GlueTask, file_name: str) -> SplitRows:
    """The examples of one file of a task (train.tsv, dev.tsv, test_matched.tsv, ...): labelled
    unless its name starts with "test". Rows that do not parse are skipped and counted (one
    warning); a one-line BertError naming the file and line for what is not GLUE's layout."""
    path = task_file(folder, task, file_name)
    if not path.is_file():
        raise BertError(f"{path} not found: GLUE's {task.folder} needs {file_name}; "
                        f"{_HOW_TO_GET}")
    labelled = not file_name.startswith("test")
    records = _records(path)
    first = next(records, None)
    if first is None:
        raise BertError(f"{path} is empty: GLUE's {task.folder} {file_name} has one example "
                        "per line")
    if task.key == "cola" and labelled:
        positions = _cola_positions(path, first)
        records = itertools.chain([first], records)
    else:
        positions = _positions(path, task, file_name, first, labelled)
    examples, skipped = [], []
    for record in records:
        try:
            examples.append(_example(path, task, positions, record))
        except BertError as reason:
            skipped.append(str(reason))
    if not examples and not skipped:
        raise BertError(f"{path} has only a header, no examples: GLUE's {task.folder} "
                        f"{file_name} has one example per line after it")
    rows = len(examples) + len(skipped)
    if skipped and (not examples or len(skipped) > MAX_SKIPPED_SHARE * rows):
        raise BertError(f"{skipped[0]} ({len(skipped)} of {rows} rows do not parse)")
    if skipped:
        log.warning("glue: %s: %d of %d rows skipped that do not parse, as GLUE's reference "
                    "loaders skip them (the first: %s)", path, len(skipped), rows, skipped[0])
    return SplitRows(examples, len(skipped), skipped[0] if skipped else None)


def _records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, tab-separated values) of each non-blank line; a UTF-8 BOM is dropped,
    and only "\\n" ends a line (the texts may hold other line separators)."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise BertError(f"{path}:{number} is not UTF-8 text: GLUE's files are UTF-8; "
                                f"{_HOW_TO_GET}") from None
            line = line.removesuffix("\n").removesuffix("\r")
            if line.strip():
                yield number, line.split("\t")


@dataclass(frozen=True)
class _Positions:
    text: int
    pair: int | None
    label: int | None
    index: int | None
    width: int          # the values a row has (its header's)
    names: str          # the columns, for a message


def _positions(path: Path, task: GlueTask, file_name: str, first: tuple[int, list[str]],
               labelled: bool) -> _Positions:
    number, header = first
    columns = _COLUMNS[task.key]
    first = (columns.text, columns.pair) if columns.pair else (columns.text,)
    wanted = (*first, columns.label) if labelled else (columns.index, *first)
    missing = [name for name in wanted if name not in header]
    if missing:
        looks = _KNOWN_HEADERS.get(tuple(header))
        if looks is None and len(header) == _COLA_WIDTH and header[_COLA_LABEL] in BINARY:
            looks = "CoLA's train/dev file (no header)"
        raise BertError(f"{path}:{number}: the header has {_shown(header)} but GLUE's "
                        f"{task.folder} {file_name} needs the columns {', '.join(wanted)}"
                        + (f"; it looks like {looks}" if looks else ""))
    at = {name: header.index(name) for name in wanted}
    return _Positions(
        text=at[columns.text], pair=at.get(columns.pair),
        label=at[columns.label] if labelled else None,
        index=None if labelled else at[columns.index],
        width=len(header), names=", ".join(header))


def _cola_positions(path: Path, first: tuple[int, list[str]]) -> _Positions:
    """CoLA's train/dev have no header: a first line that is a header is another file."""
    looks = _KNOWN_HEADERS.get(tuple(first[1]))
    if looks:
        raise BertError(f"{path}:{first[0]}: a header {_shown(first[1])}, but CoLA's train/dev "
                        "files have none (source, label, original label, sentence); it looks "
                        f"like {looks}")
    return _Positions(text=_COLA_TEXT, pair=None, label=_COLA_LABEL, index=None,
                      width=_COLA_WIDTH, names="source, label, original label, sentence")


def _shown(values: list[str], width: int = 30) -> str:
    cut = [v if len(v) <= width else v[: width - 3] + "..." for v in values]
    return f"({', '.join(cut)})"


def _example(path: Path, task: GlueTask, at: _Positions,
             record: tuple[int, list[str]]) -> GlueExample:
    number, values = record
    if len(values) != at.width:
        why = ("a row cut short (a line break inside a text), or a tab missing"
               if len(values) < at.width else "a tab inside a text shifts its columns")
        raise BertError(f"{path}:{number} has {len(values)} columns where GLUE's {task.folder} "
                        f"needs {at.width} ({at.names}): {why}")
    return GlueExample(
        text=values[at.text],
        pair=values[at.pair] if at.pair is not None else None,
        label=None if at.label is None else _label(path, number, task, values[at.label]),
        index=str(number) if at.index is None else values[at.index],
    )


def _label(path: Path, number: int, task: GlueTask, value: str) -> str | float:
    value = value.strip()
    if task.is_regression:
        try:
            score = float(value)
        except ValueError:
            score = None
        if score is None or not 0.0 <= score <= 5.0:
            raise BertError(f"{path}:{number}: score {value!r} is not a number in [0, 5], "
                            f"as GLUE's {task.folder} scores are")
        return score
    if value not in task.labels:
        raise BertError(f"{path}:{number}: label {value!r} is not one of GLUE's "
                        f"{task.folder} labels ({', '.join(task.labels)})")
    return value


# -------------------------------------------------------------------------------- hf:glue
HF_DATASET = "nyu-mll/glue"  # the hub's GLUE (formerly "glue"), its configs named by our keys
_HF_TEXTS = {  # the text and pair fields of each config
    "cola": ("sentence", None), "sst2": ("sentence", None),
    "mrpc": ("sentence1", "sentence2"), "stsb": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"), "mnli": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}


def hf_split(file_name: str) -> str:
    """The hf:glue split of a file of GLUE's layout: dev_matched.tsv -> validation_matched."""
    stem = file_name.removesuffix(".tsv")
    return "validation" + stem.removeprefix("dev") if stem.startswith("dev") else stem


def read_hf_split(task: GlueTask, split: str) -> SplitRows:
    """The examples of one split of hf:glue (train, validation(_matched/_mismatched), test(_...)),
    its int labels mapped to task.labels, test labels None, the index its `idx`."""
    try:
        import datasets
    except ImportError:
        raise BertError("hf:glue needs the datasets package: pip install '.[hf]', or give a "
                        "GLUE folder (docs/evaluation.md)") from None
    try:
        rows = datasets.load_dataset(HF_DATASET, task.key, split=split)
    except Exception as exc:  # the hub's and the cache's errors are many; each is one line here
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BertError(f"hf:glue could not load {task.key} {split} from the Hugging Face hub "
                        f"({reason}); check the network, or download GLUE with its "
                        "download_glue_data.py (docs/evaluation.md)") from None
    text, pair = _HF_TEXTS[task.key]
    labelled = not split.startswith("test")
    return SplitRows([GlueExample(text=row[text], pair=row[pair] if pair else None,
                                  label=_hf_label(task, row["label"]) if labelled else None,
                                  index=str(row["idx"]))
                      for row in rows])


def _hf_label(task: GlueTask, label: int | float) -> str | float:
    return float(label) if task.is_regression else task.labels[int(label)]
