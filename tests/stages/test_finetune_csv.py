"""`bert finetune` on labelled CSV files, read as written: huge texts, extra fields, quoted
newlines, the line a bad row starts on."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.bert import assert_one_line_error, run_bert


def finetune(root: Path, data: Path, *more: str):
    # in the stage's process: the workers are tests/unit/downstream/test_finetune_seeds.py's
    return run_bert("finetune", "--set", f"finetune.data={data}", "--set", "finetune.workers=1",
                    "--out", "finetuned", "--metrics", "finetune.json", *more, cwd=root)


def finetune_data(root: Path) -> dict:
    return json.loads((root / "finetune_details.json").read_text())["data"]


# ------------------------------------------------------------------------ CSV (4, 8, 9, 14)
def test_a_csv_text_over_128_kb_is_read(model_dir, tmp_path):
    rows = [f"the big sees the,{label}" for label in ("pos", "neg") * 3]  # 6 tokens: not cut
    huge = " ".join(["the red ship sails the sea ."] * 6000)  # ~170 KB in one field
    (tmp_path / "huge.csv").write_text("text,label\n" + "\n".join(rows) + f"\n{huge},pos\n")
    proc = finetune(model_dir, tmp_path / "huge.csv")
    assert proc.returncode == 0, proc.stderr
    data = finetune_data(model_dir)
    assert data["train_examples"] + data["test_examples"] == 7
    assert sum(data["truncated"].values()) == 1  # the huge one, cut to max_seq_length


def test_a_csv_row_with_more_fields_than_the_header_is_an_error_naming_its_line(model_dir,
                                                                                tmp_path):
    (tmp_path / "extra.csv").write_text("text,label\nI loved this film.,pos\n"
                                        "I hated this film, it was awful.,neg\n")
    proc = finetune(model_dir, tmp_path / "extra.csv")
    assert_one_line_error(proc, "extra.csv:3 has 3 fields where the header has 2 (text, label)",
                          "double quotes")
    (tmp_path / "extra.tsv").write_text("text\tlabel\nfine\tpos\na\ttab\tneg\n")
    assert_one_line_error(finetune(model_dir, tmp_path / "extra.tsv"), "extra.tsv:3 has 3 fields",
                          "cannot hold a tab")


def test_a_newline_inside_a_quoted_csv_text_becomes_a_space(model_dir, tmp_path):
    # 8 tokens with [CLS] and [SEP], the most fine-tuning takes here; "big\nsees" read as
    # "bigsees" is 4 tokens (big ##s ##ee ##s), and the example would be cut
    rows = [f'"the big\nsees the big\nsees",{label}' for label in ("pos", "neg") * 4]
    (tmp_path / "lines.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    proc = finetune(model_dir, tmp_path / "lines.csv")
    assert proc.returncode == 0, proc.stderr
    data = finetune_data(model_dir)
    assert data["train_examples"] + data["test_examples"] == 8
    assert data["truncated"] == {"train": 0, "test": 0}


def test_a_csv_error_names_the_line_a_row_starts_on(model_dir, tmp_path):
    (tmp_path / "late.csv").write_text('text,label\n"one\ntwo\nthree",pos\n"four\nfive",neg\n'
                                       "six,\n")
    assert_one_line_error(finetune(model_dir, tmp_path / "late.csv"), "late.csv:7: the label is "
                          "empty")
    (tmp_path / "open.csv").write_text('text,label\nfine,pos\n"never closed,neg\nmore,pos\n')
    assert_one_line_error(finetune(model_dir, tmp_path / "open.csv"), "open.csv:3: not valid CSV")
