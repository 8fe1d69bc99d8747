"""GLUE's data, metrics and prediction files (bertcore/downstream/glue): every task's files
read back from its real layout, each bad input as one line naming the file and line, each
metric on values known by hand, the leaderboard's file names and format."""

from __future__ import annotations

import math
import sys
import types

import pytest
from helpers.glue_files import expected_examples, write_glue_folder
from scipy.stats import pearsonr, spearmanr

from bertcore.common.errors import BertError
from bertcore.downstream.glue.metrics import Spread, glue_score, spread, task_metrics, task_score
from bertcore.downstream.glue.predictions import (
    SUBMISSION_FILES,
    write_dev_predictions,
    write_submission,
)
from bertcore.downstream.glue.tasks import (
    GLUE_TASKS,
    GlueExample,
    SplitRows,
    hf_split,
    read_hf_split,
    read_split,
    tasks_in,
)

GLUE_ORDER = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_glue_folder(tmp_path_factory.mktemp("glue"))


def one_line_error(call, *args) -> str:
    with pytest.raises(BertError) as caught:
        call(*args)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------- the tasks
def test_the_tasks_in_glue_order_with_their_labels_metrics_and_files():
    assert list(GLUE_TASKS) == GLUE_ORDER
    assert [t.folder for t in GLUE_TASKS.values()] == [
        "CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI"]
    mnli, stsb, mrpc = GLUE_TASKS["mnli"], GLUE_TASKS["stsb"], GLUE_TASKS["mrpc"]
    assert mnli.labels == ("entailment", "neutral", "contradiction")
    assert mnli.dev == {"mnli_m": "dev_matched.tsv", "mnli_mm": "dev_mismatched.tsv"}
    assert mnli.test == {"mnli_m": "test_matched.tsv", "mnli_mm": "test_mismatched.tsv"}
    assert stsb.is_regression and not mrpc.is_regression
    assert (mrpc.metrics, stsb.metrics) == (("f1", "accuracy"), ("pearson", "spearman"))
    assert [t.key for t in GLUE_TASKS.values() if not t.pair] == ["cola", "sst2"]
    assert {task: task.key for task in GLUE_TASKS.values()}[mnli] == "mnli"  # a dict's key


def test_every_file_of_every_task_reads_back(glue):
    for task in GLUE_TASKS.values():
        for file_name in ("train.tsv", *task.dev.values(), *task.test.values()):
            assert read_split(glue, task, file_name) == SplitRows(
                expected_examples(task.key, file_name)), \
                f"{task.folder}/{file_name}"


def test_a_file_with_windows_line_ends_reads_the_same(tmp_path):
    folder = write_glue_folder(tmp_path, ["cola"])
    path = folder / "CoLA" / "train.tsv"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert read_split(folder, GLUE_TASKS["cola"], "train.tsv").examples == expected_examples(
        "cola", "train.tsv")


def test_tasks_in_gives_those_present_or_wanted_in_glue_order(tmp_path):
    folder = write_glue_folder(tmp_path, ["wnli", "cola", "mnli"], rows=2)
    assert [t.key for t in tasks_in(folder, None)] == ["cola", "mnli", "wnli"]
    assert [t.key for t in tasks_in(folder, ["wnli", "cola"])] == ["cola", "wnli"]


def test_tasks_in_refuses_what_is_not_there(tmp_path):
    message = one_line_error(tasks_in, tmp_path / "nowhere", None)
    assert "nowhere" in message and "docs/evaluation.md" in message
    message = one_line_error(tasks_in, tmp_path, None)
    assert "none of GLUE's task folders (CoLA, SST-2, MRPC" in message
    assert "download_glue_data.py" in message
    write_glue_folder(tmp_path, ["cola", "rte"], rows=2)
    message = one_line_error(tasks_in, tmp_path, ["rte", "sst-2"])
    assert "'sst-2'" in message and ", ".join(GLUE_ORDER) in message
    message = one_line_error(tasks_in, tmp_path, ["mnli"])
    assert str(tmp_path / "MNLI") in message and "cola, rte" in message


# --------------------------------------------------------------------------- bad input
def test_a_missing_file_names_the_task_that_needs_it(tmp_path):
    folder = write_glue_folder(tmp_path, ["mnli"], rows=2)
    (folder / "MNLI" / "dev_mismatched.tsv").unlink()
    message = one_line_error(read_split, folder, GLUE_TASKS["mnli"], "dev_mismatched.tsv")
    assert str(folder / "MNLI" / "dev_mismatched.tsv") in message
    assert "MNLI needs dev_mismatched.tsv" in message


def _write(path, *lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(("key", "header", "looks_like"), [
    ("rte", "index\tquestion\tsentence\tlabel", "QNLI's train/dev file"),
    ("rte", "index\tsentence1\tsentence2", "RTE's or WNLI's test file"),
    ("sst2", "src\t1\t\tA sentence.", "CoLA's train/dev file (no header)"),
    ("qqp", "q1\tq2\tduplicate", None),
])
def test_another_tasks_columns_say_which_it_has_needs_and_looks_like(tmp_path, key, header,
                                                                     looks_like):
    task = GLUE_TASKS[key]
    folder = write_glue_folder(tmp_path, [key], rows=2)
    path = _write(folder / task.folder / "dev.tsv", header, "\t".join(["x"] * 4))
    message = one_line_error(read_split, folder, task, "dev.tsv")
    needs = {"rte": "sentence1, sentence2, label", "sst2": "sentence, label",
             "qqp": "question1, question2, is_duplicate"}[key]
    assert f"{path}:1: the header has ({header.replace(chr(9), ', ')})" in message
    assert f"needs the columns {needs}" in message
    assert (f"it looks like {looks_like}" in message) if looks_like else "looks" not in message


def test_a_header_in_colas_headerless_train_file_says_whose_it_looks_like(tmp_path):
    folder = write_glue_folder(tmp_path, ["cola"], rows=2)
    path = _write(folder / "CoLA" / "train.tsv", "sentence\tlabel", "A sentence.\t1")
    message = one_line_error(read_split, folder, GLUE_TASKS["cola"], "train.tsv")
    assert f"{path}:1" in message and "SST-2's train/dev file" in message


@pytest.mark.parametrize(("key", "row", "shown", "allowed"), [
    ("rte", "7\tA.\tB.\tmaybe", "'maybe'", "labels (entailment, not_entailment)"),
    ("cola", "src\t2\t\tA.", "'2'", "labels (0, 1)"),
    ("mnli", "\t".join(["1"] * 15 + ["-"]), "'-'", "labels (entailment, neutral, contradiction)"),
    ("stsb", "\t".join(["1"] * 9 + ["high"]), "score 'high'", "not a number in [0, 5]"),
    ("stsb", "\t".join(["1"] * 9 + ["5.5"]), "score '5.5'", "not a number in [0, 5]"),
])
def test_a_label_outside_the_tasks_set_names_the_line_and_the_allowed(tmp_path, key, row,
                                                                      shown, allowed):
    task = GLUE_TASKS[key]
    file_name = next(iter(task.dev.values()))
    folder = write_glue_folder(tmp_path, [key], rows=2)
    path = folder / task.folder / file_name
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(2, row)  # after the header and one row, or after two rows of CoLA
    _write(path, *lines)
    message = one_line_error(read_split, folder, task, file_name)
    assert f"{path}:3: " in message and shown in message and allowed in message


def test_a_row_with_too_few_columns_names_the_line_and_the_columns(tmp_path):
    folder = write_glue_folder(tmp_path, ["qqp"], rows=3)
    path = folder / "QQP" / "train.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[2] = "\t".join(lines[2].split("\t")[:4])  # a question with a newline in it, cut
    _write(path, *lines)
    message = one_line_error(read_split, folder, GLUE_TASKS["qqp"], "train.tsv")
    assert f"{path}:3 has 4 columns" in message
    assert "needs 6 (id, qid1, qid2, question1, question2, is_duplicate)" in message


@pytest.mark.parametrize(("content", "problem"), [
    ("", "is empty"), ("\n\n", "is empty"),
    ("index\tsentence1\tsentence2\tlabel\n", "has only a header, no examples"),
])
def test_an_empty_file_or_a_header_alone_is_no_examples(tmp_path, content, problem):
    folder = write_glue_folder(tmp_path, ["rte"], rows=2)
    path = folder / "RTE" / "train.tsv"
    path.write_text(content, encoding="utf-8")
    message = one_line_error(read_split, folder, GLUE_TASKS["rte"], "train.tsv")
    assert f"{path} {problem}" in message


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    folder = write_glue_folder(tmp_path, ["sst2"], rows=2)
    path = folder / "SST-2" / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\nna\xefve\t1\n")
    assert f"{path}:2 is not UTF-8" in one_line_error(read_split, folder, GLUE_TASKS["sst2"],
                                                      "dev.tsv")


# -------------------------------------------------------------------------------- hf:glue
def _fake_datasets(monkeypatch, rows=None, error=None):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        if error:
            raise error
        return rows

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def test_hf_glue_maps_its_int_labels_to_the_tasks_names(monkeypatch):
    calls = _fake_datasets(monkeypatch, [
        {"premise": "P0", "hypothesis": "H0", "label": 0, "idx": 0},
        {"premise": "P1", "hypothesis": "H1", "label": 2, "idx": 1},
        {"premise": "P2", "hypothesis": "H2", "label": 1, "idx": 2}])
    mnli = GLUE_TASKS["mnli"]
    assert read_hf_split(mnli, "validation_matched").examples == [
        GlueExample("P0", "H0", "entailment", "0"), GlueExample("P1", "H1", "contradiction", "1"),
        GlueExample("P2", "H2", "neutral", "2")]
    assert calls == [("nyu-mll/glue", "mnli", "validation_matched")]
    _fake_datasets(monkeypatch, [{"sentence1": "A", "sentence2": "B", "label": 1, "idx": 5}])
    assert read_hf_split(GLUE_TASKS["wnli"], "train").examples == [
        GlueExample("A", "B", "1", "5")]
    _fake_datasets(monkeypatch, [{"sentence": "S", "label": -1, "idx": 9}])
    assert read_hf_split(GLUE_TASKS["sst2"], "test").examples == [
        GlueExample("S", None, None, "9")]
    _fake_datasets(monkeypatch, [{"sentence1": "A", "sentence2": "B", "label": 3.2, "idx": 0}])
    assert read_hf_split(GLUE_TASKS["stsb"], "validation").examples[0].label == 3.2


def test_hf_glue_without_datasets_or_the_hub_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails
    assert "pip install '.[hf]'" in one_line_error(read_hf_split, GLUE_TASKS["rte"], "train")
    _fake_datasets(monkeypatch, error=ConnectionError("Couldn't reach 'nyu-mll/glue' on the "
                                                      "Hub (LocalEntryNotFoundError)\nmore"))
    message = one_line_error(read_hf_split, GLUE_TASKS["rte"], "train")
    assert "Couldn't reach 'nyu-mll/glue'" in message and "download_glue_data.py" in message


def test_hf_split_of_each_file_name():
    assert [hf_split(f) for f in ("train.tsv", "dev.tsv", "dev_matched.tsv",
                                  "dev_mismatched.tsv", "test.tsv", "test_matched.tsv")] == [
        "train", "validation", "validation_matched", "validation_mismatched", "test",
        "test_matched"]


# -------------------------------------------------------------------------------- metrics
# A 2x2 confusion: 3 true positives, 1 false negative, 2 false positives, 4 true negatives.
GOLDS = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
PREDICTIONS = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]


def test_matthews_f1_and_accuracy_of_a_known_confusion():
    assert task_metrics(GLUE_TASKS["cola"], PREDICTIONS, GOLDS) == {
        "matthews": pytest.approx((3 * 4 - 2 * 1) / math.sqrt(5 * 4 * 6 * 5))}
    mrpc = task_metrics(GLUE_TASKS["mrpc"], PREDICTIONS, GOLDS)
    assert mrpc == {"f1": pytest.approx(2 * 3 / (2 * 3 + 2 + 1)), "accuracy": pytest.approx(0.7)}
    assert all(type(v) is float for v in mrpc.values())
    assert task_metrics(GLUE_TASKS["mnli"], [0, 1, 2, 2], [0, 1, 2, 0]) == {"accuracy": 0.75}


def test_pearson_and_spearman_of_known_correlations():
    stsb = GLUE_TASKS["stsb"]
    assert task_metrics(stsb, [1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 1.5, 2.0]) == {
        "pearson": pytest.approx(1.0), "spearman": pytest.approx(1.0)}
    assert task_metrics(stsb, [4.0, 3.0, 2.0, 1.0], [0.5, 1.0, 1.5, 2.0]) == {
        "pearson": pytest.approx(-1.0), "spearman": pytest.approx(-1.0)}
    # the same ranks, not a line: Pearson by hand (deviations -1.5..1.5 and -25.5..73.5)
    assert task_metrics(stsb, [1.0, 2.0, 3.0, 100.0], [1.0, 2.0, 3.0, 4.0]) == {
        "pearson": pytest.approx(149 / math.sqrt(5 * 7205)), "spearman": pytest.approx(1.0)}
    assert task_metrics(stsb, [2.5] * 4, [1.0, 2.0, 3.0, 4.0]) == {"pearson": 0.0,
                                                                   "spearman": 0.0}


def test_matthews_of_a_dev_set_of_one_class_is_0_and_said(caplog):
    assert task_metrics(GLUE_TASKS["cola"], [1, 0, 1], [1, 1, 1]) == {"matthews": 0.0}
    assert [r.getMessage() for r in caplog.records] == [
        "cola: Matthews correlation of a dev set of one class is undefined, counted as 0"]
    caplog.clear()
    task_metrics(GLUE_TASKS["cola"], [1, 1, 1], [1, 0, 1])  # constant predictions: a real 0
    assert not caplog.records


def test_predictions_equal_to_3_decimals_are_constant_not_a_correlation(caplog):
    stsb = GLUE_TASKS["stsb"]
    golds = [0.4, 1.2, 2.0, 2.8, 3.6, 4.4] * 50
    # float noise that happens to follow the golds: a correlation of 1 from 1e-7 apart
    noise = [2.5 + 1e-7 * (gold > 2.5) for gold in golds]
    assert task_metrics(stsb, noise, golds) == {"pearson": 0.0, "spearman": 0.0}
    assert len(caplog.records) == 2 and "constant predictions or golds (all within 0.001)" in (
        caplog.records[0].getMessage())
    caplog.clear()
    visible = [2.5 + 2e-3 * (gold > 2.5) for gold in golds]  # apart in what is written
    assert task_metrics(stsb, visible, golds) == {
        "pearson": pytest.approx(pearsonr(visible, golds).statistic),
        "spearman": pytest.approx(spearmanr(visible, golds).statistic)}
    assert not caplog.records


def test_task_score_means_the_metrics_and_mnlis_two_evaluations():
    assert task_score(GLUE_TASKS["mrpc"], {"dev": {"f1": 0.9, "accuracy": 0.8}}) == \
        pytest.approx(0.85)
    assert task_score(GLUE_TASKS["mnli"], {"mnli_m": {"accuracy": 0.8},
                                           "mnli_mm": {"accuracy": 0.6}}) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="mnli_mm"):
        task_score(GLUE_TASKS["mnli"], {"mnli_m": {"accuracy": 0.8}})


def test_glue_score_averages_the_tasks_given_and_names_them_in_glue_order():
    assert glue_score({"rte": 0.6, "cola": 0.3, "mnli": 0.9}) == (pytest.approx(0.6),
                                                                   ["cola", "mnli", "rte"])
    with pytest.raises(ValueError):
        glue_score({"ax": 0.5})


def test_spread_over_odd_and_even_counts_of_seeds():
    assert spread([0.3, 0.1, 0.2]) == Spread(0.2, 0.1, 0.3, (0.3, 0.1, 0.2))
    assert spread([0.4, 0.1, 0.3, 0.2]).median == pytest.approx(0.25)


# ------------------------------------------------------------------------ prediction files
def test_dev_predictions_hold_index_texts_gold_and_prediction(tmp_path):
    examples = [GlueExample("A\tone", "B", "not_entailment", "2"),
                GlueExample("C", "D\nwith a line break", "entailment", "3")]
    write_dev_predictions(tmp_path / "rte.tsv", GLUE_TASKS["rte"], examples, [0, 0])
    assert (tmp_path / "rte.tsv").read_text(encoding="utf-8") == (
        "index\ttext\tpair\tgold\tprediction\n"
        "2\tA one\tB\tnot_entailment\tentailment\n"
        "3\tC\tD with a line break\tentailment\tentailment\n")
    write_dev_predictions(tmp_path / "stsb.tsv", GLUE_TASKS["stsb"],
                          [GlueExample("A", "B", 3.8, "2")], [4.12345])
    assert (tmp_path / "stsb.tsv").read_text(encoding="utf-8") == (
        "index\ttext\tpair\tgold\tprediction\n2\tA\tB\t3.800\t4.123\n")
    write_dev_predictions(tmp_path / "sst2.tsv", GLUE_TASKS["sst2"],
                          [GlueExample("A", None, "1", "2")], [0])
    assert (tmp_path / "sst2.tsv").read_text(encoding="utf-8") == (
        "index\ttext\tgold\tprediction\n2\tA\t1\t0\n")


def test_submission_files_name_and_format_per_task(tmp_path):
    assert SUBMISSION_FILES == {
        ("cola", "test"): "CoLA.tsv", ("sst2", "test"): "SST-2.tsv",
        ("mrpc", "test"): "MRPC.tsv", ("stsb", "test"): "STS-B.tsv", ("qqp", "test"): "QQP.tsv",
        ("mnli", "mnli_m"): "MNLI-m.tsv", ("mnli", "mnli_mm"): "MNLI-mm.tsv",
        ("qnli", "test"): "QNLI.tsv", ("rte", "test"): "RTE.tsv", ("wnli", "test"): "WNLI.tsv"}
    expected = {"cola": "0\n1\n0", "sst2": "0\n1\n0", "mrpc": "0\n1\n0", "qqp": "0\n1\n0",
                "wnli": "0\n1\n0", "qnli": "entailment\nnot_entailment\nentailment",
                "rte": "entailment\nnot_entailment\nentailment",
                "mnli": "entailment\nneutral\ncontradiction"}
    for key, predictions in expected.items():
        task = GLUE_TASKS[key]
        for eval_name in task.test:
            path = write_submission(tmp_path, task, eval_name, [0, 1, 2 if key == "mnli" else 0])
            assert path == tmp_path / SUBMISSION_FILES[(key, eval_name)]
            rows = [f"{i}\t{p}" for i, p in enumerate(predictions.split("\n"))]
            assert path.read_text(encoding="utf-8") == "index\tprediction\n" + "\n".join(
                rows) + "\n", path.name
    path = write_submission(tmp_path, GLUE_TASKS["stsb"], "test", [-0.2, 2.34567, 5.4],
                            indices=["10", "11", "12"])
    assert path.read_text(encoding="utf-8") == (
        "index\tprediction\n10\t0.000\n11\t2.346\n12\t5.000\n")


def test_a_submission_that_fails_leaves_the_previous_file(tmp_path):
    path = write_submission(tmp_path, GLUE_TASKS["rte"], "test", [0, 1])
    with pytest.raises(ValueError, match="class 2"):
        write_submission(tmp_path, GLUE_TASKS["rte"], "test", [0, 2])
    assert path.read_text(encoding="utf-8") == ("index\tprediction\n0\tentailment\n"
                                                "1\tnot_entailment\n")
    assert [p.name for p in tmp_path.iterdir()] == ["RTE.tsv"]


# ------------------------------------------------------------ rows that do not parse
def test_qqps_rows_broken_by_a_line_break_are_skipped_counted_and_said(tmp_path, caplog):
    folder = write_glue_folder(tmp_path, ["qqp"], rows=200)
    path = folder / "QQP" / "train.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    values = lines[11].split("\t")  # row 10, on line 12: a line break inside its question2
    lines[11] = "\t".join([*values[:4], values[4][:5]]) + "\n" + "\t".join(
        [values[4][5:], values[5]])
    _write(path, *lines)
    read = read_split(folder, GLUE_TASKS["qqp"], "train.tsv")
    expected = expected_examples("qqp", "train.tsv", 200)
    assert [(e.text, e.pair, e.label) for e in read.examples] == [
        (e.text, e.pair, e.label) for i, e in enumerate(expected) if i != 10]
    assert read.skipped == 2
    assert read.first_skipped.startswith(f"{path}:12 has 5 columns where GLUE's QQP needs 6")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "2 of 201 rows skipped that do not parse" in warnings[0]


def test_an_mrpc_row_whose_extra_tab_shifts_a_sentence_is_skipped_not_misread(tmp_path):
    folder = write_glue_folder(tmp_path, ["mrpc"], rows=200)
    path = folder / "MRPC" / "dev.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[6] = lines[6].replace(" text 5 ", " text\t5 ")  # a tab inside #1 String of row 5
    _write(path, *lines)
    read = read_split(folder, GLUE_TASKS["mrpc"], "dev.tsv")
    expected = expected_examples("mrpc", "dev.tsv", 200)
    assert read.examples == expected[:5] + expected[6:] and read.skipped == 1
    assert "has 6 columns where GLUE's MRPC needs 5" in read.first_skipped
    assert "a tab inside a text shifts its columns" in read.first_skipped


def test_more_rows_that_do_not_parse_than_glues_own_files_hold_is_one_line(tmp_path):
    folder = write_glue_folder(tmp_path, ["rte"], rows=200)
    path = folder / "RTE" / "train.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    for i in (3, 5, 7):  # 3 of 200: more than 1%
        lines[i] = lines[i].rsplit("\t", 1)[0] + "\tmaybe"
    _write(path, *lines)
    message = one_line_error(read_split, folder, GLUE_TASKS["rte"], "train.tsv")
    assert message.startswith(f"{path}:4: label 'maybe'")
    assert message.endswith("(3 of 200 rows do not parse)")


# ------------------------------------------------------------------ task folders by name
def test_a_task_folder_in_another_case_is_its_task_and_others_are_said(tmp_path, caplog):
    folder = write_glue_folder(tmp_path, ["sst2", "stsb", "rte"], rows=2)
    (folder / "SST-2").rename(folder / "sst2")
    (folder / "STS-B").rename(folder / "sts-b")
    (folder / "snli").mkdir()
    (folder / "diagnostic").mkdir()
    assert [t.key for t in tasks_in(folder, None)] == ["sst2", "stsb", "rte"]
    assert read_split(folder, GLUE_TASKS["sst2"], "dev.tsv").examples == expected_examples(
        "sst2", "dev.tsv", 2)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith(f"glue: snli/ in {folder} is no GLUE")
    (folder / "SST-2").mkdir()
    message = one_line_error(tasks_in, folder, None)
    assert "both SST-2/ and sst2/ for GLUE's SST-2: keep one" in message


def test_mnli_with_only_test_matched_predicts_it_and_names_what_is_missing(tmp_path, caplog):
    from bertcore.downstream.glue.config import GlueConfig
    from bertcore.downstream.glue.suite import read_task

    folder = write_glue_folder(tmp_path, ["mnli"], rows=2)
    (folder / "MNLI" / "test_mismatched.tsv").unlink()
    data = read_task(GLUE_TASKS["mnli"], GlueConfig(data=str(folder)))
    assert list(data.test) == ["mnli_m"] and list(data.dev) == ["mnli_m", "mnli_mm"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["glue: MNLI has test_matched.tsv but not test_mismatched.tsv: no "
                        "leaderboard file for the latter"]
    for name in ("test_matched.tsv", "test.tsv"):  # no test file at all: nothing to say
        (folder / "MNLI" / name).unlink(missing_ok=True)
    caplog.clear()
    assert read_task(GLUE_TASKS["mnli"], GlueConfig(data=str(folder))).test == {}
    assert not caplog.records


def test_a_test_file_with_a_row_that_does_not_parse_gets_no_leaderboard_file(tmp_path, caplog):
    """(issue 62, case 9) GLUE's server refuses a file short of a row: none is written, and
    the warning and the details say why."""
    import logging

    import numpy as np

    from bertcore.downstream.config import Recipe
    from bertcore.downstream.glue.config import GlueConfig
    from bertcore.downstream.glue.records import SeedRun
    from bertcore.downstream.glue.report import glue_report, write_predictions
    from bertcore.downstream.glue.suite import TaskResult, read_task

    folder = write_glue_folder(tmp_path / "glue", tasks=["rte"], rows=200)
    path = folder / "RTE" / "test.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[57] = "56\tonly one text"  # two columns where the header has three
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        data = read_task(GLUE_TASKS["rte"], GlueConfig(data=str(folder), tasks=["rte"]))
    assert data.test == {} and data.skipped == {"test.tsv": 1} and len(data.dev["dev"]) == 200
    why = data.unsubmitted["test"]
    assert why.startswith(f"1 of 200 rows do not parse (the first: {path}:58")
    assert why.endswith("GLUE's server takes only a prediction for every row: fix the file "
                        "and rerun")
    assert f"glue: rte: no leaderboard file for test: {why}" in caplog.messages

    recipe = Recipe(3e-5, 4, 1.0, None, 0.1, 0.01, 1.0, 42)
    run = SeedRun(recipe, {"dev": {"accuracy": 0.5}}, 0.5, 1, 0, {"dev": np.zeros(200, int)}, {})
    result = TaskResult(data, [run], [(recipe, 0.5)])
    write_predictions(tmp_path / "predictions", [result])
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == ["rte_dev.tsv"]
    assert glue_report([result], [result], "m", 1)[1]["tasks"]["rte"]["no_submission"] == {
        "test": why}
