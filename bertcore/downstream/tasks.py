"""Labelled data for fine-tuning from a user's file: reading, splitting, encoding.

A user's file is JSON Lines (`.jsonl`), `.csv` or `.tsv` (a header row names the columns),
with a text field, an optional second text field for sentence pairs, and a label field.
Labels are strings or numbers, a number written one way whatever the file wrote (`1`, `1.0`
and `01` are one label, `1`). A task is classification (the class order is the labels'
natural order, numbers numerically, then strings, so `id2label` of an export is predictable)
or regression (numeric labels, a continuous score as STS-B's); `task_problem` says which. The
built-in tasks, made from held-out text, are in `builtin_tasks`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bertcore.common.errors import BertError

if TYPE_CHECKING:
    import torch

FORMATS = (".jsonl", ".csv", ".tsv")
CLASSIFICATION, REGRESSION, AUTO = "classification", "regression", "auto"
# a number as a label may be written: 3, -2, 0.5, .5, 4., 1e-3 (not 1_000, nan, inf)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# what a spreadsheet or numpy writes where a number is missing or not finite
NOT_A_NUMBER = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity",
                "-infinity", "#n/a", "n/a", "#na", "na", "#value!", "#div/0!", "#num!",
                "#null!", "null", "none"}
LARGEST_SCORE = 3.4028234663852886e38  # float32's largest: a model's targets are float32


@dataclass(frozen=True)
class Example:
    text: str
    pair: str | None
    label: str
    where: str = field(default="", compare=False)  # a user's file: path:line, for messages


# ---------------------------------------------------------------------------- user files
def read_examples(
    path: str | Path, text_field: str, pair_field: str | None, label_field: str
) -> list[Example]:
    """The examples of a .jsonl / .csv / .tsv file; a one-line BertError for what is unusable."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise BertError(f"labelled data not found: {path} (set finetune.data)")
    if path.suffix.lower() not in FORMATS:
        raise BertError(f"{path}: unknown format; finetune.data must end in {', '.join(FORMATS)}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BertError(_not_utf8(path, data)) from None
    if not text.strip():
        raise BertError(f"{path} is empty: it needs one labelled example per line")
    rows = _jsonl_rows(path, text) if path.suffix.lower() == ".jsonl" else _table_rows(path, text)
    examples = []
    for where, row in rows:
        if label_field not in row:
            raise BertError(f"{where}: no label field {label_field!r} (set finetune.label_field; "
                            f"fields here: {', '.join(map(str, row))})")
        examples.append(Example(
            text=_text(row, text_field, where, "text_field"),
            pair=_text(row, pair_field, where, "text_pair_field") if pair_field else None,
            label=_label(row[label_field], where),
            where=where,
        ))
    if not examples:
        raise BertError(f"{path} has no examples, only a header: add labelled rows")
    return examples


def _not_utf8(path: Path, data: bytes) -> str:
    """What is not UTF-8 in a file: one damaged line (its number and byte), or a file in
    another encoding (how many of its lines are not UTF-8, the first)."""
    bad = []
    for number, line in enumerate(data.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            bad.append((number, line[error.start]))
    number, byte = bad[0]
    if len(bad) == 1:
        return (f"{path}:{number} is not UTF-8 (byte 0x{byte:02x}), the file's other lines are: "
                "fix or remove that line")
    return (f"{path} is not UTF-8 text ({len(bad)} lines are not, the first line {number}, byte "
            f"0x{byte:02x}): convert it to UTF-8, or point at another file")


def _jsonl_rows(path: Path, text: str):
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise BertError(f"{where} is not valid JSON: one JSON object per line") from None
        if not isinstance(row, dict):
            raise BertError(f"{where} is not a JSON object: one object per line")
        yield where, row


def _table_rows(path: Path, text: str) -> list[tuple[str, dict]]:
    """(path:line where the row starts, {column: value}) per row; a newline inside a quoted
    text becomes a space."""
    tsv = path.suffix.lower() == ".tsv"
    # GLUE's TSVs have quote characters inside the text: no quoting in TSV. Strict: a quote
    # left open is an error, not the rest of the file read as one text.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if tsv else ",",
                        quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL, strict=True)
    limit = csv.field_size_limit(max(csv.field_size_limit(), len(text)))  # none is longer
    try:
        _, header = _next_record(reader, path) or (1, [])
        _refuse_another_separator(path, header, tsv)
        rows = []
        while record := _next_record(reader, path):
            line, values = record
            if not any(v.strip() for v in values):
                continue
            if not any(v.strip() for v in values[len(header):]):
                values = values[: len(header)]  # empty cells past the last column (a spreadsheet)
            if len(values) != len(header):
                raise BertError(_misaligned(path, line, values, header, tsv))
            # (read_text made every line end a "\n")
            row = {name: value.replace("\n", " ") for name, value in zip(header, values,
                                                                         strict=True)}
            rows.append((f"{path}:{line}", row))
        return rows
    finally:
        csv.field_size_limit(limit)


SEPARATORS = {",": "commas", ";": "semicolons", "\t": "tabs", "|": "bars"}


def _refuse_another_separator(path: Path, header: list[str], tsv: bool) -> None:
    """A header of one column that another separator cuts into several: the file is
    separated by something else than its name says (a spreadsheet's `;`, tabs in a .csv)."""
    own = "\t" if tsv else ","
    found = [sep for sep in SEPARATORS if sep != own and len(header) == 1 and sep in header[0]]
    if not found:
        return
    renamed = {",": ".csv", "\t": ".tsv"}.get(found[0])
    fix = f"save it with {SEPARATORS[own]}" + (f", or name it {renamed}" if renamed else "")
    raise BertError(f"{path}: its header is one column ({header[0]!r}) separated by "
                    f"{SEPARATORS[found[0]]}, not {SEPARATORS[own]} as in a {path.suffix} "
                    f"file: {fix}")


def _next_record(reader, path: Path) -> tuple[int, list[str]] | None:
    """(the line the record starts on, its values), or None at the end."""
    line = reader.line_num + 1
    try:
        return line, next(reader)
    except StopIteration:
        return None
    except csv.Error as exc:
        raise BertError(f"{path}:{line}: not valid CSV ({exc}): a text holding a comma, a quote "
                        "or a newline goes in double quotes, its own quotes doubled") from None


def _misaligned(path: Path, line: int, values: list[str], header: list[str], tsv: bool) -> str:
    if len(values) < len(header):
        fix = "give every row one value per column"
    elif tsv:
        fix = "a text cannot hold a tab in a .tsv file (no quoting there): use .csv or .jsonl"
    else:
        fix = "put a text holding a comma in double quotes"
    return (f"{path}:{line} has {len(values)} fields where the header has {len(header)} "
            f"({', '.join(header)}): {fix}")


def _text(row: dict, field: str, where: str, key: str) -> str:
    if field not in row:
        raise BertError(f"{where}: no text field {field!r} (set finetune.{key}; fields here: "
                        f"{', '.join(map(str, row))})")
    value = row[field]
    if not isinstance(value, str):
        raise BertError(f"{where}: field {field!r} is {type(value).__name__} {value!r}, not a "
                        "string: texts must be strings")
    return value


def _label(value, where: str) -> str:
    """A label as one class: a number written one way (1, 1.0, "1.0", "01" -> "1"; 2.50 ->
    "2.5"), any other text stripped."""
    if isinstance(value, bool) or not isinstance(value, str | int | float) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise BertError(f"{where}: label {value!r} is neither a string nor a finite number")
    text = str(value).strip()
    if not text:
        raise BertError(f"{where}: the label is empty")
    number = label_number(text)
    if number is None or abs(number) > LARGEST_SCORE:  # 1e300: kept as written, for messages
        return text
    if isinstance(value, int) or re.fullmatch(r"[+-]?\d+", text):
        return str(int(text))
    return str(int(number)) if number.is_integer() else repr(number)


def label_number(label: str) -> float | None:
    """The number a label writes, None for a label that is no number."""
    if not _NUMBER.fullmatch(label):
        return None
    number = float(label)
    return number if math.isfinite(number) else None


def task_problem(task: str, examples: Sequence[Example]) -> tuple[str, str]:
    """(CLASSIFICATION or REGRESSION, why) for `finetune.task` over the examples' labels:
    auto is regression when every label is a number and one of them is not whole (a score
    such as 3.8), else classification (names, or whole numbers: classes 1..5)."""
    if task != AUTO:
        return task, f"finetune.task: {task}"
    numbers = [label_number(e.label) for e in examples]
    unusable = [e for e in examples if unusable_score(e.label)]
    if unusable and len(unusable) < sum(n is not None for n in numbers):
        raise BertError(_unusable_message(unusable[0], "every other label is a number"))
    if any(n is None for n in numbers):
        return CLASSIFICATION, "auto: the labels are names"
    if all(n.is_integer() for n in numbers):
        return CLASSIFICATION, "auto: the labels are whole numbers"
    return REGRESSION, "auto: the labels are numbers, not all whole"


def regression_targets(train: Sequence[Example], test: Sequence[Example] = ()) -> None:
    """Check a regression task's labels: every one a number, the training ones not all
    equal (nothing to learn, and no correlation to score)."""
    for example in (*train, *test):
        if unusable_score(example.label):
            raise BertError(_unusable_message(example, "a regression needs a score on every row"))
        if label_number(example.label) is None:
            raise BertError(f"{_at(example)}label {example.label!r} is not a number: a "
                            "regression task needs numbers (set finetune.task to "
                            "classification or auto)")
    values = {label_number(e.label) for e in train}
    if len(values) < 2:
        raise BertError(f"every training label is {train[0].label}: a regression needs "
                        "scores that differ")


def unusable_score(label: str) -> str | None:
    """Why `label` is a number gone wrong (missing, not finite, beyond float32), or None."""
    if label.strip().lower() in NOT_A_NUMBER:
        return "a missing or not finite number"
    number = label_number(label)
    if number is not None and abs(number) > LARGEST_SCORE:
        return f"beyond the largest score a model holds, {LARGEST_SCORE:.3g}"
    return None


def _unusable_message(example: Example, why: str) -> str:
    return (f"{_at(example)}label {example.label!r} is {unusable_score(example.label)}, and "
            f"{why}: give that row its score, or remove it")


def _at(example: Example) -> str:
    return f"{example.where}: " if example.where else ""


def label_names(train: Sequence[Example], test: Sequence[Example] = ()) -> list[str]:
    """The classes in natural order (integers numerically, then strings); at least two, and
    every test label seen in training."""
    counts = Counter(e.label for e in train)
    if len(counts) < 2:
        only = next(iter(counts), None)
        raise BertError(f"the training data has only one class ({only!r}): a classifier needs "
                        "at least two")
    unseen = sorted({e.label for e in test} - set(counts))
    if unseen:
        raise BertError(f"test label {unseen[0]!r} never appears in the training data: add "
                        "training examples of it, or remove it from the test data")
    return sorted(counts, key=_natural)


def _natural(label: str):
    number = label_number(label)
    return (1, 0.0, label) if number is None else (0, number, label)


def split_examples(
    examples: Sequence[Example], test_fraction: float, seed: int, stratified: bool = True
) -> tuple[list[Example], list[Example]]:
    """A seeded split, stratified by label: each class gives round(n * test_fraction) of its
    examples to the test split, but always keeps at least one for training. Not `stratified`
    (a regression's scores, each a class of its own), the examples are one group."""
    rng = random.Random(seed)
    train, test = [], []
    by_label: dict[str, list[Example]] = {}
    for example in examples:
        by_label.setdefault(example.label if stratified else "", []).append(example)
    for label in sorted(by_label):
        group = by_label[label]
        rng.shuffle(group)
        n_test = min(round(len(group) * test_fraction), len(group) - 1)
        test += group[:n_test]
        train += group[n_test:]
    rng.shuffle(train)
    rng.shuffle(test)
    if not test:
        raise BertError(f"finetune.test_fraction={test_fraction} leaves no test examples out of "
                        f"{len(examples)}: raise it, or give finetune.test_data")
    return train, test


# ------------------------------------------------------------------------------- encoding
def require_fits(section: str, max_seq_length: int, positions: int) -> None:
    """`<section>.max_seq_length` within the model's positions, before any training."""
    if max_seq_length > positions:
        raise BertError(f"{section}.max_seq_length={max_seq_length} is longer than the "
                        f"model's max_position_embeddings={positions}: lower it")


@dataclass
class EncodedExamples:
    """Token ids (unpadded) and class indices (or a regression task's values);
    `truncated`: examples cut to the max length."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: list[int] | list[float]
    truncated: int

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
        """Padded to the longest of these examples."""
        import torch  # here: the finetune section's check reads this module (bertstages/cli.py)
        from torch.nn.utils.rnn import pad_sequence

        ids = [torch.tensor(self.input_ids[i], dtype=torch.long) for i in indices]
        types = [torch.tensor(self.token_type_ids[i], dtype=torch.long) for i in indices]
        return {"input_ids": pad_sequence(ids, batch_first=True, padding_value=pad_id),
                "token_type_ids": pad_sequence(types, batch_first=True),
                "attention_mask": pad_sequence([torch.ones_like(row) for row in ids],
                                               batch_first=True),
                "labels": torch.tensor([self.labels[i] for i in indices])}


def encode_examples(examples: Sequence[Example], tokenizer, labels: Sequence[str],
                    max_length: int) -> EncodedExamples:
    """[CLS] text [SEP] (pair [SEP]) with the `tokenizers` Tokenizer of the vocab stage, cut
    to `max_length` tokens (the longer text first), counting the examples that were cut.
    Labels become class indices in the order of `labels`; with no `labels` (regression) they
    are the examples' values. An example without a label (a test file's) gets 0."""
    index = {label: i for i, label in enumerate(labels)}

    def target(label) -> int | float:
        if label is None:
            return 0.0 if not labels else 0
        return index[label] if labels else float(label)

    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    try:
        inputs = [e.text if e.pair is None else (e.text, e.pair) for e in examples]
        encodings = tokenizer.encode_batch(inputs)
    finally:
        tokenizer.no_truncation()
    return EncodedExamples(
        input_ids=[e.ids for e in encodings],
        token_type_ids=[e.type_ids for e in encodings],
        labels=[target(e.label) for e in examples],
        truncated=sum(1 for e in encodings if e.overflowing),
    )
