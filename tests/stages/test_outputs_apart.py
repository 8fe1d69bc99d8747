"""No stage writes an output over what it reads, nor one output over another: an output that
is, holds or sits inside an input (an option's path or one its params name) or another
output is one line, before any work, and every file stays as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.bert import assert_one_line_error, run_bert

bert = run_bert


def files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture()
def repo(tmp_path) -> Path:
    """A folder with the pipeline's inputs in place (their content does not matter: nothing
    may be read or written), and params.yaml."""
    for path in ("models/pretrained/model.safetensors", "models/pretrained/config.json",
                 "data/vocab/vocab.txt", "data/samples/meta.json", "data/corpus/train.txt",
                 "data/corpus/val.txt", "tasks/task.csv", "hf/bert/config.json"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(f"the finished {path}\n")
    (tmp_path / "params.yaml").write_text("{}\n")
    return tmp_path


# (the command line, the fragments of its one line)
CASES = [
    (["glue", "--out", "models/pretrained"],
     "--out models/pretrained is --model (models/pretrained), which bert glue reads: point "
     "--out elsewhere"),
    (["finetune", "--out", "models/pretrained"],
     "--out models/pretrained is --model (models/pretrained), which bert finetune reads"),
    (["glue", "--predictions", "shared", "--out", "shared"],
     "--predictions shared is --out (shared), which bert glue writes too: point one of them "
     "elsewhere"),
    (["glue", "--out", "hf", "--set", "glue.model=hf/bert"],
     "--out hf holds glue.model (hf/bert), which bert glue reads"),
    (["probe", "--items", "hf/bert/items", "--set", "probe.model=hf/bert"],
     "--items hf/bert/items sits inside probe.model (hf/bert), which bert probe reads"),
    (["finetune", "--out", "tasks", "--set", "finetune.data=tasks/task.csv"],
     "--out tasks holds finetune.data (tasks/task.csv), which bert finetune reads"),
    (["corpus", "--out", "data/corpus", "--set", "corpus.source=data/corpus/train.txt"],
     "--out data/corpus holds corpus.source (data/corpus/train.txt), which bert corpus reads"),
    (["corpus", "--out", "."], "--out . holds --params (params.yaml), which bert corpus reads"),
    (["vocab", "--out", "data/corpus"], "--out data/corpus is --corpus (data/corpus)"),
    (["samples", "--out", "data/vocab"], "--out data/vocab is --vocab (data/vocab)"),
    (["pretrain", "--checkpoints", "data/samples/checkpoints"],
     "--checkpoints data/samples/checkpoints sits inside --samples (data/samples)"),
    (["pretrain", "--out", "hf/bert", "--set", "model.init_from=hf/bert"],
     "--out hf/bert is model.init_from (hf/bert)"),
    (["pretrain", "--out", "side", "--log", "side.tsv"],
     "--out side is not models/pretrained, but --metrics, --eval-log are left at the reports "
     "of models/pretrained"),
    (["evaluate", "--out", "data/vocab/vocab.txt"],
     "--out data/vocab/vocab.txt sits inside --vocab (data/vocab)"),
    (["export", "--out", "models"], "--out models holds --model (models/pretrained)"),
    (["prune", "--metrics", "data/samples/meta.json"],
     "--metrics data/samples/meta.json sits inside --samples (data/samples)"),
    (["probe", "--out", "models/pretrained/config.json"],
     "--out models/pretrained/config.json sits inside --model (models/pretrained)"),
]


@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_an_output_over_an_input_or_another_output_is_one_line_and_writes_nothing(
        repo, args, message):
    before = files(repo)
    proc = bert(*args, cwd=repo)
    assert_one_line_error(proc, message, code=1)
    assert files(repo) == before


def test_an_output_beside_the_files_a_glob_reads_is_written(tmp_path):
    """A glob's folder holds the output without the output replacing any file it matches."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text("One short document here.\n\nAnd another one.\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": "raw/*.txt"}}))
    proc = bert("corpus", "--out", "raw/corpus", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "raw" / "corpus" / "train.txt").is_file()
