"""`bert vocab` as a process: a failed run keeps the previous vocabulary, `vocab_size: auto`
is sized from the corpus and recorded, a `vocab.source` that does not fit is one line (or a
warning), and under DVC a source missing from the stage's deps is warned of."""

from __future__ import annotations

import json

import yaml
from helpers.bert import assert_one_line_error, run_bert
from helpers.vocab_texts import (
    corpus_lines,
    save_source,
    source_tokens,
    word_lines,
    write_corpus,
    write_vocab_txt,
)

from bertcore.data.vocab.config import AUTO_RANGE, VocabConfig
from bertcore.data.vocab.files import SPECIAL_TOKENS, read_vocab
from bertcore.data.vocab.training import auto_vocab_size


def test_cli_trains_and_keeps_the_previous_vocab_on_failure(tmp_path):
    write_corpus(tmp_path / "corpus", corpus_lines())
    proc = run_bert("vocab", "--set", "vocab.vocab_size=200", "--set", "vocab.min_frequency=1",
                    "--params", "none.yaml", cwd=tmp_path)
    assert_one_line_error(proc, "none.yaml")
    (tmp_path / "params.yaml").write_text("vocab:\n  vocab_size: 200\n  min_frequency: 1\n")
    run_bert("vocab", "--corpus", "corpus", "--out", "vocab", cwd=tmp_path, check=True)
    before = (tmp_path / "vocab" / "vocab.txt").read_bytes()
    assert before.splitlines()[:5] == [t.encode() for t in SPECIAL_TOKENS]

    proc = run_bert("vocab", "--corpus", "missing", "--out", "vocab", cwd=tmp_path)
    assert_one_line_error(proc, "missing", code=1)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "train.txt").write_text("\n\n  \n")
    proc = run_bert("vocab", "--corpus", "empty", "--out", "vocab", cwd=tmp_path)
    assert_one_line_error(proc, "no text", code=1)
    proc = run_bert("vocab", "--corpus", "corpus", "--out", "vocab",
                    "--set", "vocab.vocab_size=3", cwd=tmp_path)
    assert_one_line_error(proc, "vocab.vocab_size", code=2)
    assert (tmp_path / "vocab" / "vocab.txt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "corpus", "empty", "metrics", "params.yaml", "vocab"]
    coverage = json.loads((tmp_path / "metrics" / "vocab.json").read_text())
    assert coverage["source"] == "train" and coverage["vocab_size"] == len(before.splitlines())
    assert coverage["unk_rate"] < 0.01 and 1.0 <= coverage["tokens_per_word"] < 2.0



def test_cli_auto_sizes_the_vocab_from_the_corpus_and_records_it(tmp_path):
    (tmp_path / "params.yaml").write_text("vocab: {}\n")  # the defaults: vocab_size auto
    write_corpus(tmp_path / "tiny", corpus_lines())
    write_corpus(tmp_path / "varied", word_lines(800, 6))
    sizes = {}
    for name in ("tiny", "varied"):
        proc = run_bert("vocab", "--corpus", name, "--out", f"{name}-vocab", "--metrics",
                        f"{name}.json", cwd=tmp_path, check=True)
        metrics = json.loads((tmp_path / f"{name}.json").read_text())
        tokens = read_vocab(tmp_path / f"{name}-vocab")
        assert metrics["vocab_size"] == len(tokens) <= metrics["vocab_size_target"]
        assert f"auto -> {metrics['vocab_size_target']}" in proc.stderr
        sizes[name] = metrics["vocab_size_target"], metrics["frequent_words"], len(tokens)
    low, _ = AUTO_RANGE
    assert sizes["tiny"][:2] == (low, auto_vocab_size([corpus_lines()], VocabConfig())[1])
    assert 30 < sizes["tiny"][1] < 100
    assert sizes["varied"][:2] == (801, 801)
    assert sizes["tiny"][2] < 500 < sizes["varied"][2] <= 801

    # a number is still a number; a wrong value is one line naming the key and what fits
    run_bert("vocab", "--corpus", "varied", "--out", "fixed", "--metrics", "fixed.json",
             "--set", "vocab.vocab_size=600", cwd=tmp_path, check=True)
    fixed = json.loads((tmp_path / "fixed.json").read_text())
    assert fixed["vocab_size_target"] == fixed["vocab_size"] == 600
    assert "frequent_words" not in fixed
    for bad in ("big", "10"):
        proc = run_bert("vocab", "--corpus", "varied", "--out", "fixed",
                        "--set", f"vocab.vocab_size={bad}", cwd=tmp_path)
        assert_one_line_error(proc, "vocab.vocab_size", "auto or an integer", code=2)



def test_cli_source_errors_and_warnings(tmp_path):
    write_corpus(tmp_path / "corpus", corpus_lines())
    (tmp_path / "params.yaml").write_text("vocab:\n  lowercase: true\n")

    def vocab(source):
        return run_bert("vocab", "--corpus", "corpus", "--out", "vocab",
                        "--set", f"vocab.source={source}", cwd=tmp_path)

    write_vocab_txt(tmp_path / "partial.txt", ["[PAD]", "[UNK]", "[CLS]", "the", "dog"])
    assert_one_line_error(vocab("partial.txt"), "[SEP] [MASK]", code=1)
    assert_one_line_error(vocab("nowhere"), "vocab.source not found: nowhere", code=1)
    (tmp_path / "empty_folder").mkdir()
    assert_one_line_error(vocab("empty_folder"), "neither tokenizer.json nor vocab.txt", code=1)
    (tmp_path / "bpe.json").write_text(json.dumps({"version": "1.0", "model": {
        "type": "BPE", "vocab": {"a": 0}, "merges": []}}))
    assert_one_line_error(vocab("bpe.json"), "BPE tokenizer", "WordPiece", code=1)
    assert not (tmp_path / "vocab").exists()

    save_source(tmp_path / "cased", cased=True)
    proc = vocab("cased")
    assert proc.returncode == 0, proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert "cased/tokenizer_config.json (lowercase false" in warning
    assert "vocab.lowercase / vocab.strip_accents (lowercase true" in warning
    metrics = json.loads((tmp_path / "metrics" / "vocab.json").read_text())
    assert metrics["source"] == "cased" and metrics["lowercase"] is False
    assert len(metrics["source_sha256"]) == 64 and metrics["unk_rate"] > 0
    write_vocab_txt(tmp_path / "cased.txt", source_tokens(cased=True))
    proc = vocab("cased.txt")  # a bare vocab.txt: params decide, capitals are suspicious
    assert proc.returncode == 0 and "set vocab.lowercase: false" in proc.stderr



def test_under_dvc_a_source_path_missing_from_the_deps_is_a_warning(tmp_path):
    """DVC reruns a stage when vocab.source changes, not when the files behind it do, unless
    dvc.yaml lists them (DVC_STAGE / DVC_ROOT are what `dvc repro` sets for a stage)."""
    write_corpus(tmp_path / "corpus", corpus_lines())
    write_vocab_txt(tmp_path / "mine" / "vocab.txt", source_tokens(cased=False))
    (tmp_path / "params.yaml").write_text("vocab:\n  source: mine\n")
    env = {"DVC_STAGE": "vocab", "DVC_ROOT": str(tmp_path)}
    for deps, warned in ((["data/corpus/train.txt"], True), (["mine"], False),
                         (["mine/vocab.txt"], False), (["min"], True)):
        stage = {"cmd": "bert vocab", "deps": deps, "outs": ["vocab"]}
        (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"vocab": stage}}))
        proc = run_bert("vocab", "--corpus", "corpus", "--out", "vocab", cwd=tmp_path, env=env,
                        check=True)
        assert ("vocab.source mine is not among the deps of the vocab stage" in proc.stderr) is (
            warned), (deps, proc.stderr)
    proc = run_bert("vocab", "--corpus", "corpus", "--out", "vocab", cwd=tmp_path, check=True)
    assert "not among the deps" not in proc.stderr  # not under dvc repro: nothing to say
