"""Where users' tools look, on a tiny model made here: the export as an MLflow Model that
`mlflow.pyfunc` loads and answers as `bert fill-mask` does (a text too long for the model cut as
it cuts it; top_k tokens with their scores), registrable, with no path of this machine; model
cards that huggingface_hub reads back with the figures of the reports made from the very
weights; the reports carried into a new run of the same weights once, never twice; the
charts the same bytes for the same curves."""

from __future__ import annotations

import hashlib
import json
import re

import mlflow
import pytest
import torch
import yaml
from click.testing import CliRunner
from huggingface_hub import ModelCard
from mlflow.pyfunc.scoring_server import invocations
from mlflow.tracking import MlflowClient

from bertcore.common.report import write_metrics, write_report
from bertcore.common.tracking import Tracker, sqlite_uri
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import save_vocab
from bertcore.data.vocab.training import train_tokenizer
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.card import CARD_NAME
from bertcore.saved.card_meta import card_meta
from bertcore.saved.config import CardConfig
from bertcore.saved.hf import WEIGHTS_NAME, export_hf, save_model
from bertcore.saved.run_reports import MODEL_KEY, carry_reports, log_report_into
from bertcore.saved.sentence_embeddings import SENTENCE_FILES
from bertcore.training.run.charts import chart_paths, write_pretrain_charts
from bertcore.training.run.export import export_pretrained
from bertstages.cli import cli

SENTENCES = ["paris is the capital of france.", "berlin is the capital of germany.",
             "the cat sat on the mat.", "the dog slept on the rug."]
SOURCE = {"mlflow.source.git.commit": "0123abc", "mlflow.source.name": "bert test",
          "mlflow.source.type": "LOCAL"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny BERT (random weights, seeded) in our format beside its vocabulary, and its
    Hugging Face export; and one MLflow store for the module."""
    root = tmp_path_factory.mktemp("model")
    config = VocabConfig(vocab_size=60, min_frequency=1)
    (root / "vocab").mkdir()
    save_vocab(train_tokenizer([SENTENCES], config), root / "vocab")
    torch.manual_seed(0)
    bert = BertPretrainingModel(BertConfig(
        vocab_size=len((root / "vocab" / "vocab.txt").read_text().splitlines()),
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32)).eval()
    save_model(bert, root / "pretrained")
    export_hf(bert, root / "hf", root / "vocab")
    return root, sqlite_uri(root / "mlflow.db")


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def top_tokens(printed: str) -> list[str]:
    """The most likely token of each [MASK] as `bert fill-mask` prints them."""
    return [block.splitlines()[1].split()[1]
            for block in re.split(r"^\[MASK\] \d+ of \d+:$", printed, flags=re.M)[1:]]


@pytest.fixture(scope="module")
def logged(model):
    """The export with a card, logged as `hf_model` into a run of the store: the run's id."""
    root, uri = model
    (root / "hf" / CARD_NAME).write_text("# the card\n")
    tracker = Tracker.start(uri, "models", tags=SOURCE)
    try:
        assert tracker.log_transformers_model(root / "hf", "fill-mask", "hf_model")
    finally:
        (root / "hf" / CARD_NAME).unlink()
    status = MlflowClient(uri).get_run(tracker.run_id).info.status
    tracker.finish()
    return tracker.run_id, status


def test_the_logged_model_loads_in_pyfunc_answers_as_bert_fill_mask_and_registers(model, logged,
                                                                                  monkeypatch):
    root, uri = model
    run_id, status = logged
    assert status == "RUNNING"  # its end is the run's own
    client = MlflowClient(uri)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # where pyfunc and the registry look
    loaded = mlflow.pyfunc.load_model(f"runs:/{run_id}/hf_model")
    text = "paris is the [MASK] of france."
    answer = loaded.predict({"text": [text]})
    printed = CliRunner().invoke(cli, ["fill-mask", "--model", str(root / "hf"), text])
    assert printed.exit_code == 0, printed.stderr
    assert [tokens[0] for tokens in answer["tokens"]] == top_tokens(printed.stdout)
    assert [len(tokens) for tokens in answer["tokens"]] == [5]  # bert fill-mask's default
    # a text longer than the model's 32 positions: cut to them, as `bert fill-mask` cuts it,
    # not a tensor-size error
    long = text + " the cat sat on the mat." * 40
    printed = CliRunner().invoke(cli, ["fill-mask", "--model", str(root / "hf"), long])
    assert printed.exit_code == 0 and "the model takes 32: truncated" in printed.stderr
    answer = loaded.predict({"text": [long]})
    assert [tokens[0] for tokens in answer["tokens"]] == top_tokens(printed.stdout)

    experiment = client.get_run(run_id).info.experiment_id
    (found,) = mlflow.search_logged_models([experiment], output_format="list")
    assert found.source_run_id == run_id and found.tags.items() >= SOURCE.items()
    version = mlflow.register_model(f"models:/{found.model_id}", "tiny-bert")  # MLflow 3's
    assert (version.version, version.status) == (1, "READY")
    folder = mlflow.artifacts.download_artifacts(f"models:/{found.model_id}",
                                                 dst_path=str(root / "downloaded"))
    requirements = (root / "downloaded" / "requirements.txt").read_text().split()
    assert [r.split("==")[0] for r in requirements] == ["mlflow", "torch", "transformers"], folder
    # the folder logged whole, its card in it: a Hugging Face folder again
    assert (root / "downloaded" / "artifacts" / "model" / CARD_NAME).read_text() == "# the card\n"


def test_the_served_model_answers_top_k_tokens_with_scores_one_row_per_mask(model, logged,
                                                                            monkeypatch):
    """fill-mask through pyfunc: `top_k` tokens with their scores, most likely first, for each
    [MASK]; the same columns for one [MASK] as for two; its params, signature and input
    example in the MLmodel; no path of the machine that logged it there, nor a licence file
    that points at the Hub."""
    root, uri = model
    run_id, _ = logged
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    loaded = mlflow.pyfunc.load_model(f"runs:/{run_id}/hf_model")
    texts = ["paris is the [MASK] of france.", "the [MASK] sat on the [MASK]."]
    answer = loaded.predict({"text": texts}, params={"top_k": 3})
    assert list(answer.columns) == ["input", "mask", "tokens", "scores"]
    assert [(row.input, row.mask) for row in answer.itertuples()] == [(0, 0), (1, 0), (1, 1)]
    for tokens, scores in zip(answer["tokens"], answer["scores"], strict=True):
        assert len(tokens) == len(scores) == 3 and len(set(tokens)) == 3
        assert list(scores) == sorted(scores, reverse=True) and 0 < sum(scores) <= 1
    one = loaded.predict({"text": texts[:1]}, params={"top_k": 3})
    assert one.to_dict("records") == answer[:1].to_dict("records")  # the same row alone
    # what `mlflow models serve` does with a request (its scoring server's `invocations`)
    body = json.dumps({"dataframe_records": [{"text": texts[1]}], "params": {"top_k": 2}})
    served = invocations(body, "application/json", loaded, loaded.metadata.get_input_schema())
    assert served.status == 200, served.response
    rows = json.loads(served.response)["predictions"]
    assert [(row["input"], row["mask"], row["tokens"]) for row in rows] == [
        (0, mask, tokens[:2]) for mask, tokens in enumerate(answer["tokens"][1:])]

    saved = root / "served"
    mlflow.artifacts.download_artifacts(f"runs:/{run_id}/hf_model", dst_path=str(saved))
    files = [path for path in (saved / "hf_model").rglob("*") if path.is_file()]
    assert not [path.name for path in files if "licen" in path.name.lower()]
    assert not [path.name for path in files
                if path.suffix != ".safetensors" and str(root / "hf") in path.read_text()]
    meta = yaml.safe_load((saved / "hf_model" / "MLmodel").read_text())
    assert json.loads(meta["signature"]["params"]) == [
        {"name": "top_k", "type": "long", "default": 5, "shape": None}]
    assert [c["name"] for c in json.loads(meta["signature"]["inputs"])] == ["text"]
    example = json.loads((saved / "hf_model" / "serving_input_example.json").read_text())
    assert example["params"] == {"top_k": 3} and "[MASK]" in str(example["dataframe_split"])


def reports_of(folder, weights: str, other: str) -> dict:
    """An eval report made from `weights`, a probe report made from `other` weights, and
    pretrain's, of `weights`, in `folder` (as the stages write them)."""
    write_report(folder / "eval.json", "eval",
                 {"mlm_accuracy": 0.25, "perplexity": 80.0, "nsp_accuracy": 0.6},
                 {"mlm_baseline_accuracy": 0.05, "nsp_baseline_accuracy": 0.5, MODEL_KEY: weights})
    write_report(folder / "probe.json", "probe",
                 {"builtin": {"cloze": {"p_at_1": 0.3, "p_at_10": 0.6}}},
                 {"builtin": {"cloze": {"frequency_baseline": {"p_at_1": 0.1}}},
                  MODEL_KEY: other})
    write_metrics(folder / "pretrain.json", "pretrain", {"steps": 6, "train": {"loss": 4.5}})
    (folder / "pretrain_details.json").write_text(json.dumps({"tokens_seen": 1234,
                                                              MODEL_KEY: weights}))
    return {"eval": folder / "eval.json", "probe": folder / "probe.json"}


def test_the_export_s_model_card_reads_back_with_the_figures_of_these_weights_only(model,
                                                                                    tmp_path):
    root, _ = model
    weights = sha256(root / "pretrained" / WEIGHTS_NAME)
    reports_of(tmp_path, weights, "another model's weights")
    out = tmp_path / "hf"
    shown = export_pretrained(root / "pretrained", root / "vocab", out, tmp_path,
                              {"model": {"preset": "tiny"}},
                              card_meta(CardConfig(), "builtin:python-docs"))
    assert shown == ["pretrain", "eval"]  # the probe report scored other weights
    card = ModelCard.load(out / CARD_NAME)
    assert (card.data.library_name, card.data.pipeline_tag, card.data.language) == (
        "transformers", "fill-mask", ["en"])
    figures = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert figures == {"MLM accuracy (val split)": 0.25, "MLM perplexity (val split)": 80.0,
                       "NSP accuracy (val split)": 0.6}
    assert "| MLM accuracy (val split) | 0.2500 | 0.0500 (most frequent token) |" in card.text
    assert "In brackets" not in card.text  # no interval in these reports: none on the card
    assert "tokens seen: 1,234" in card.text and "preset: tiny" in card.text
    assert "cloze" not in card.text
    # the card (and sentence-transformers' files) beside the weights: their bytes are the
    # export's without it
    assert sha256(out / WEIGHTS_NAME) == sha256(root / "hf" / WEIGHTS_NAME)
    sentence = {name.split("/")[0] for name in SENTENCE_FILES}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [CARD_NAME, *sentence, *(p.name for p in (root / "hf").iterdir())])


def test_the_card_shows_each_figure_with_its_interval_where_the_report_has_one(model,
                                                                             tmp_path):
    """A figure with `<name>_ci95` beside it in its report (eval's, probe's, GLUE's: any) is
    shown with its interval, to the precision the interval supports, its baseline to the
    same; the model-index keeps the figure; the card is the same bytes for the same reports."""
    root, _ = model
    weights = sha256(root / "pretrained" / WEIGHTS_NAME)
    write_report(tmp_path / "eval.json", "eval",
                 {"mlm_accuracy": 0.261, "mlm_accuracy_ci95": [0.255, 0.267],
                  "perplexity": 81.0, "perplexity_ci95": [78.0, 84.0],
                  "nsp_accuracy": 0.68, "nsp_accuracy_ci95": [0.65, 0.7]},
                 {"mlm_baseline_accuracy": 0.05528, "nsp_baseline_accuracy": 0.5077,
                  MODEL_KEY: weights})
    write_report(tmp_path / "probe.json", "probe",
                 {"builtin": {"cloze": {"p_at_1": 0.275, "p_at_1_ci95": [0.235, 0.315],
                                        "p_at_10": 0.6},
                              "swapped_pairs": {"accuracy": 0.7,
                                                "accuracy_ci95": [0.66, 0.74]}}},
                 {"builtin": {"cloze": {"frequency_baseline": {"p_at_1": 0.1,
                                                               "p_at_10": 0.3}}},
                  MODEL_KEY: weights})
    cards = []
    for _ in range(2):
        export_pretrained(root / "pretrained", root / "vocab", tmp_path / "hf", tmp_path,
                          {"model": {"preset": "tiny"}}, card_meta(CardConfig(), "corpus.txt"))
        cards.append((tmp_path / "hf" / CARD_NAME).read_bytes())
    assert cards[0] == cards[1]
    card = ModelCard.load(tmp_path / "hf" / CARD_NAME)
    rows = [line for line in card.text.splitlines() if line.startswith("| ")][2:]
    assert rows == [
        "| MLM accuracy (val split) | 0.261 [0.255, 0.267] | 0.055 (most frequent token) |",
        "| MLM perplexity (val split) | 81 [78, 84] |  |",
        "| NSP accuracy (val split) | 0.68 [0.65, 0.70] | 0.51 (majority class) |",
        "| cloze P@1 (built-in probe) | 0.275 [0.235, 0.315] | 0.100 (word frequency) |",
        "| cloze P@10 (built-in probe) | 0.6000 | 0.3000 (word frequency) |",
        "| swapped pairs PLL accuracy (built-in probe) | 0.70 [0.66, 0.74] |  |"]
    assert "In brackets: the 95% interval" in card.text
    figures = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert figures["MLM accuracy (val split)"] == 0.261
    assert figures["cloze P@1 (built-in probe)"] == 0.275


def test_the_downstream_cards_show_the_intervals_their_reports_have():
    """The fine-tuned, pruned and GLUE task cards: each figure with `<name>_ci95` beside it
    shown with its interval; pruning's paired differences in words; none where there are
    none."""
    from bertcore.downstream.cards import finetuned_facts, glue_task_facts, pruned_facts
    from bertcore.saved.card import card_text

    finetuned = card_text(finetuned_facts(
        "f", {"task": "t", "pretrained": {"accuracy": 0.79, "accuracy_ci95": [0.75, 0.83],
                                          "macro_f1": 0.78},
              "scratch": {"accuracy": 0.5, "accuracy_ci95": [0.45, 0.55]}},
        {"majority_class": {"accuracy": 0.5, "macro_f1": 0.33}}, {}))
    assert "| test accuracy | 0.79 [0.75, 0.83] | 0.50 (majority class) |" in finetuned
    assert "| test macro-F1 | 0.7800 | 0.3300 (majority class) |" in finetuned
    assert "| test accuracy, same model from random init | 0.50 [0.45, 0.55] |  |" in finetuned
    glue = card_text(glue_task_facts(
        "g", "CoLA", {"CoLA": {"score": 20.1, "mcc": 20.1, "mcc_ci95": [15.0, 25.3]}},
        {"tasks": {"CoLA": {"seeds": [1, 2, 3]}}}, {}))
    assert "| CoLA mcc (dev, median of 3 seeds, x100) | 20.1 [15.0, 25.3] |  |" in glue
    assert "| CoLA score (dev, median of 3 seeds, x100) | 20.1000 |  |" in glue
    assert "CoLA mcc_ci95" not in glue
    pruned = card_text(pruned_facts(
        "p", {"val": {"mlm_accuracy": {"before": 0.261, "before_ci95": [0.255, 0.267],
                                       "pruned": 0.236, "pruned_ci95": [0.23, 0.242]}},
              "heads": {"before": 8, "removed": 4}, "parameters": {"before": 9, "after": 8}},
        {"differences": {"mlm_accuracy": {"pruned": {"difference": -0.025,
                                                     "ci95": [-0.029, -0.021],
                                                     "verdict": "worse"}}}}, {}))
    assert "| val MLM accuracy | 0.236 [0.230, 0.242] | 0.261 (before pruning) |" in pruned
    assert ("- val MLM accuracy, pruned minus before: -0.025 [-0.029, -0.021] (worse)"
            in pruned)
    plain = card_text(pruned_facts("p", {"val": {"mlm_accuracy": {"before": 0.2608,
                                                                  "pruned": 0.2362}}}, {}, {}))
    assert "| val MLM accuracy | 0.2362 | 0.2608 (before pruning) |" in plain
    assert "In brackets" not in plain and "What pruning changed" not in plain


def test_a_report_is_carried_into_a_run_of_its_weights_once_never_twice(model, tmp_path):
    """Pretraining that wrote the weights a report scored logs it into its new run (DVC skips
    that stage); the stage run anyway afterwards adds no second point."""
    _, uri = model
    reports = reports_of(tmp_path, "the weights", "other weights")
    tracker = Tracker.start(uri, "carried")
    assert carry_reports(tracker, 6, "the weights", reports) == ["eval"]
    files = (reports["eval"], tmp_path / "eval_details.json")
    metrics = json.loads(files[0].read_text())["eval"]
    assert not log_report_into(tracker, 6, files, metrics, "eval")  # the stage's own
    tracker.finish()
    client = MlflowClient(uri)
    run = client.get_run(tracker.run_id)
    assert run.data.metrics == {"eval_mlm_accuracy": 0.25, "eval_perplexity": 80.0,
                                "eval_nsp_accuracy": 0.6}
    assert [(m.step, m.value) for m in client.get_metric_history(
        tracker.run_id, "eval_mlm_accuracy")] == [(6, 0.25)]
    assert "eval.mlm_baseline_accuracy" not in run.data.tags  # in eval_details.json
    assert {a.path for a in client.list_artifacts(tracker.run_id, "metrics")} == {
        "metrics/eval.json", "metrics/eval_details.json"}


def test_the_charts_are_the_same_bytes_for_the_same_curves(tmp_path):
    log, evals = tmp_path / "pretrain_log.tsv", tmp_path / "pretrain_eval.tsv"
    log.write_text("step\tmlm_loss\tnsp_loss\tmlm_accuracy\tnsp_accuracy\n"
                   "10\t7.9\t0.69\t0.01\t0.5\n20\t6.5\t0.68\t0.05\t0.55\n")
    evals.write_text("step\tmlm_loss\tnsp_loss\tmlm_accuracy\tnsp_accuracy\tcloze_p_at_1\t"
                     "cloze_p_at_10\tswapped_pairs\treplaced_pairs\n"
                     "20\t6.6\t0.68\t0.04\t0.52\t0.1\t0.3\t0.6\t0.5\n")
    written = write_pretrain_charts(log, evals)
    assert written == list(chart_paths(log).values())
    first = {path.name: path.read_bytes() for path in written}
    assert all(data.startswith(b"\x89PNG") for data in first.values())
    assert b"matplotlib" not in b"".join(first.values())  # no version in the bytes
    write_pretrain_charts(log, evals)
    assert {path.name: path.read_bytes() for path in written} == first


def _pixels_of_the_first_series(png) -> int:
    """The pixels in matplotlib's first colour (C0, the first series' own) of a chart."""
    import matplotlib.image
    import numpy as np

    rgb = np.asarray([0x1F, 0x77, 0xB4]) / 255
    return int((np.abs(matplotlib.image.imread(png)[..., :3] - rgb) < 0.02).all(-1).sum())


def test_a_run_with_one_evaluation_draws_its_one_point(tmp_path):
    """One logged train row and one evaluation: every chart shows its point (a marker; a line
    through one point draws nothing), not only the axes and the legend. Measured against the
    same charts with those cells empty (the legend alone in the first series' colour)."""
    header = ("step\tmlm_loss\tnsp_loss\tmlm_accuracy\tnsp_accuracy\tcloze_p_at_1\t"
              "cloze_p_at_10\tswapped_pairs\treplaced_pairs\n")
    drawn = {}
    for case, row in (("values", "10\t6.6\t0.68\t0.04\t0.52\t0.1\t0.3\t0.6\t0.5\n"),
                      ("empty", "10\t\t\t\t\t\t\t\t\n")):
        folder = tmp_path / case
        folder.mkdir()
        train = row.replace("6.6", "7.9").replace("0.04", "0.01")  # not under val's point
        (folder / "pretrain_log.tsv").write_text(header.split("\tcloze")[0] + "\n" +
                                                 "\t".join(train.split("\t")[:5]) + "\n")
        (folder / "pretrain_eval.tsv").write_text(header + row)
        charts = write_pretrain_charts(folder / "pretrain_log.tsv",
                                       folder / "pretrain_eval.tsv")
        drawn[case] = {path.name: _pixels_of_the_first_series(path) for path in charts}
    for name in ("pretrain_loss.png", "pretrain_accuracy.png", "pretrain_probes.png"):
        # a marker of 4 points: some 30 pixels beyond the legend's
        assert drawn["values"][name] > drawn["empty"][name] + 15, (name, drawn)
