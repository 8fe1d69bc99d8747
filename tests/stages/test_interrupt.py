"""SIGTERM and Ctrl-C during the stages that write their outputs whole or not at all: one
line (interrupted, nothing written, rerun), the exit code of a process the signal killed, no
temporary left behind, the previous output intact, and a worker pool shut down cleanly."""

from __future__ import annotations

import signal
from pathlib import Path

import yaml
from helpers.bert import assert_one_line_error, run_bert, run_bert_interrupted
from helpers.tiny_pretrain import build_data, tiny_config

from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import save_model


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def test_sigterm_during_corpus(tmp_path):
    (tmp_path / "raw.txt").write_text("One doc here. It has two.\n\nAnother doc. Also two.\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": "raw.txt"}}))
    proc = run_bert_interrupted("corpus", at="bertcore.data.corpus.tasks:document_sentences",
                                signum=signal.SIGTERM, cwd=tmp_path)
    assert_one_line_error(proc, "interrupted by SIGTERM: nothing was written",
                          "rerun `bert corpus` to start again", code=128 + signal.SIGTERM)
    assert temporaries(tmp_path / "data") == [] and not (tmp_path / "data" / "corpus").exists()
    assert not (tmp_path / "metrics").exists()


def test_sigterm_and_ctrl_c_during_corpus_with_workers(tmp_path):
    """The corpus stage's pool (the same mechanism as samples'): one line, nothing written,
    and no worker process left behind (none still runs in the stage's folder)."""
    import psutil

    lines = [f"Sentence {i} of the corpus here." + ("" if i % 5 else "\n") for i in range(30000)]
    (tmp_path / "raw.txt").write_text("\n".join(lines) + "\n")  # > 2 tasks: the pool starts
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {
        "source": "raw.txt", "format": "lines", "workers": 2}}))
    for signum in (signal.SIGTERM, signal.SIGINT):
        proc = run_bert_interrupted("corpus", at="bertcore.data.corpus.build:_document_parts",
                                    signum=signum, cwd=tmp_path,
                                    to_group=signum == signal.SIGINT)
        assert_one_line_error(proc, f"interrupted by {signal.Signals(signum).name}: nothing "
                                    "was written", "rerun `bert corpus`", code=128 + signum)
        assert "leaked" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert temporaries(tmp_path / "data") == [] and not (tmp_path / "data" / "corpus").exists()
        left = [p.pid for p in psutil.process_iter(["cwd"]) if p.info["cwd"] == str(tmp_path)]
        assert left == [], left


def test_sigterm_and_ctrl_c_during_samples_with_workers(tmp_path):
    """The pool's workers are stopped by the parent (Ctrl-C reaches them too, and they leave
    it to the parent): no "leaked semaphore" warning, no worker's traceback."""
    data = build_data(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"samples": {
        "max_seq_length": 32, "dupe_factor": 2, "workers": 2}}))
    before = tree(data / "samples")
    for signum in (signal.SIGTERM, signal.SIGINT):
        # the second tokenize_corpus call (val): train's pairs went through the pool already
        proc = run_bert_interrupted("samples", at="bertcore.data.samples.build:tokenize_corpus",
                                    nth=2, signum=signum, cwd=tmp_path,
                                    to_group=signum == signal.SIGINT)
        assert_one_line_error(proc, f"interrupted by {signal.Signals(signum).name}: nothing "
                                    "was written", "rerun `bert samples`", code=128 + signum)
        assert "leaked" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert tree(data / "samples") == before and temporaries(data) == []


def test_ctrl_c_while_a_worker_starts_leaves_no_traceback(capfd):
    """Ctrl-C reaches a worker the moment it is spawned, before its initializer ignores it
    (as at a pool's first task): it is held, then dropped, and the worker runs on."""
    import multiprocessing
    import os

    from bertcore.common.interrupt import ctrl_c_held, ignore_interrupts_in_worker

    with ctrl_c_held():
        worker = multiprocessing.get_context("spawn").Process(target=ignore_interrupts_in_worker)
        worker.start()
    os.kill(worker.pid, signal.SIGINT)  # the child is still starting its interpreter
    worker.join(timeout=60)
    assert worker.exitcode == 0 and "Traceback" not in capfd.readouterr().err


def test_sigterm_during_export_keeps_the_previous_export(tmp_path):
    data = build_data(tmp_path)
    (tmp_path / "params.yaml").write_text("export: {}\n")
    model = BertPretrainingModel(tiny_config(len(read_vocab(data / "vocab"))))
    save_model(model, tmp_path / "models" / "pretrained")
    run_bert("export", cwd=tmp_path, check=True)
    before = tree(tmp_path / "models" / "hf")
    proc = run_bert_interrupted("export", at="bertcore.saved.hf:export_hf", signum=signal.SIGTERM,
                                cwd=tmp_path)  # the new export is written, not yet in place
    assert_one_line_error(proc, "interrupted by SIGTERM: nothing was written",
                          "rerun `bert export`", code=128 + signal.SIGTERM)
    assert tree(tmp_path / "models" / "hf") == before
    assert temporaries(tmp_path / "models") == []


def test_a_signal_between_the_renames_of_an_output_keeps_the_previous_one(tmp_path,
                                                                          monkeypatch):
    """A folder output is swapped in two renames (the old one aside, the new one in): a
    signal between them puts the old one back, so the output is never missing."""
    import os

    from bertcore.common import atomic
    from bertcore.common.interrupt import Interrupted, interrupt_on_signals

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "out.txt").write_text("old")
    renames = []
    rename = os.replace

    def replace_then_signal(src, dst):
        renames.append(Path(dst).name)
        rename(src, dst)
        if len(renames) == 1:  # the old output is aside, the new one not yet in place
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(atomic.os, "replace", replace_then_signal)
    interrupted = None
    try:
        with interrupt_on_signals(), atomic.atomic_dir(tmp_path / "out") as staging:
            (staging / "out.txt").write_text("new")
    except Interrupted as stop:
        interrupted = stop
    monkeypatch.undo()
    assert interrupted is not None and interrupted.exit_code == 128 + signal.SIGTERM
    assert tree(tmp_path / "out") == {"out.txt": b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ------------------------------------ outputs put in place together (issue 62, case 1)
def signal_after_first_output_in_place(monkeypatch) -> list[str]:
    """os.replace, as atomic uses it, sends this process SIGTERM once the first staged output
    is in place (the moment the others are not yet); returns the outputs put in place."""
    import os

    from bertcore.common import atomic

    placed, rename = [], os.replace

    def replace_then_signal(src, dst):
        rename(src, dst)
        if ".tmp-" in Path(src).name:  # a staged output, now in place
            placed.append(Path(dst).name)
            if len(placed) == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(atomic.os, "replace", replace_then_signal)
    return placed


def test_a_signal_while_outputs_are_put_in_place_leaves_one_runs_and_says_which(
        tmp_path, monkeypatch):
    """Three outputs replaced together: a signal after the first is in place waits for the
    others, and the message names what this run wrote."""
    import pytest

    from bertcore.common.atomic import atomic_dir, atomic_file
    from bertcore.common.interrupt import Interrupted, interrupt_on_signals
    from bertcore.common.together import outputs_together
    from bertstages.options import interrupted_message

    for name in ("a.json", "b.json", "c/c.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("old")
    placed = signal_after_first_output_in_place(monkeypatch)
    with pytest.raises(Interrupted) as stop, interrupt_on_signals(), \
            outputs_together() as outputs:
        outputs.enter_context(atomic_file(tmp_path / "a.json")).write("new")
        (outputs.enter_context(atomic_dir(tmp_path / "c")) / "c.txt").write_text("new")
        outputs.enter_context(atomic_file(tmp_path / "b.json")).write("new")
    monkeypatch.undo()
    assert placed == ["b.json", "c", "a.json"]
    assert tree(tmp_path) == {"a.json": b"new", "b.json": b"new", "c/c.txt": b"new"}
    assert [Path(path).name for path in stop.value.replaced] == ["b.json", "c", "a.json"]
    import click

    message = interrupted_message(stop.value, click.Context(click.Command("glue"),
                                                            info_name="glue"))
    assert message.startswith(f"interrupted by SIGTERM after this run wrote {tmp_path}/b.json")
    assert "(each whole); any other output is the last run's; rerun `bert glue`" in message


def test_a_signal_while_glue_puts_its_outputs_in_place_leaves_one_runs(tmp_path, monkeypatch):
    """glue's seven outputs: after a signal, every one is the last run's or every one this
    run's (the last run's are dated 1970 here), never some of each."""
    import os

    import pytest

    from bertcore.common.interrupt import Interrupted, interrupt_on_signals
    from bertcore.downstream.glue.config import GlueConfig
    from bertcore.downstream.glue.report import GluePaths, write_glue_outputs

    out = tmp_path / "out"
    paths = GluePaths("models/pretrained", "data/vocab", str(out / "glue.json"),
                      str(out / "glue_seeds.tsv"), str(out / "glue"), str(out / "models"),
                      str(out / "runs"))
    write_glue_outputs([], None, GlueConfig(), paths)
    outputs = sorted(out.iterdir())
    assert len(outputs) == 7
    for path in outputs:
        os.utime(path, (0, 0))
    placed = signal_after_first_output_in_place(monkeypatch)
    with pytest.raises(Interrupted) as stop, interrupt_on_signals():
        write_glue_outputs([], None, GlueConfig(), paths)
    monkeypatch.undo()
    assert len(placed) == 7 and len(stop.value.replaced) == 7
    assert sorted(out.iterdir()) == outputs
    assert all(path.stat().st_mtime > 0 for path in outputs)
