"""Quality per CPU minute: the pipeline with its default params vs a plain transformers
reference trained for the same wall clock, both scored by the same held-out metric, and what
the pretrained encoder buys on a task.

1. Runs corpus -> vocab -> samples -> pretrain -> evaluate -> finetune with `params.yaml` (plus
   any `--set` overrides) on `--source` (default: the built-in corpus), in a scratch folder,
   without MLflow. The pretrain stage's wall clock is the budget.
2. Trains the reference for that same wall clock: `transformers.BertForPreTraining` with our
   model's architecture and vocabulary, on the same NSP samples, masked by transformers'
   `DataCollatorForLanguageModeling` (15%, 80/10/10), AdamW with a linear warmup over the
   first 10% of the wall clock and a linear decay to zero at its end: the schedule follows the
   time elapsed, not a planned step count, so the reference uses the whole budget whatever
   the load of the machine does meanwhile (Cramming's budget-based schedule).
3. Scores both with `bert evaluate` on the same val samples and the same fixed masks.
4. Reads `bert evaluate`'s model-free NSP baseline on the same val pairs: the TF-IDF cosine of
   A's and B's bags of words, "random" below a threshold fitted on the train pairs. It says how
   much of NSP a corpus gives away through shared words (its topic cue), the cue NSP mostly
   learns; the NSP target is a third of the way from chance to it: 0.5 + (bag of words - 0.5) / 3.
5. The fine-tune stage's rows: the pretrained encoder, the same model from scratch, and a
   TF-IDF logistic regression, on `finetune.data` (default: the built-in task).

The last line is machine-readable:

    quality_vs_reference=<our val MLM accuracy / the reference's> nsp_vs_reference=<ours /
    theirs> nsp=<ours> nsp_target=<target> finetune_gain=<pretrained - scratch accuracy>

    python benchmarks/quality.py                                  # the built-in corpus
    python benchmarks/quality.py --source my_texts/ --set train.max_steps=300
    python benchmarks/quality.py --source texts/ --set finetune.data=$PWD/labelled.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertcore.common.cpu import CpuConfig, pin_cpu
from bertcore.data.samples.store import SampleStore
from bertstages.params import load_params, parse_section

REPO = Path(__file__).resolve().parents[1]


def run_stage(name: str, args: list[str], overrides: list[str], work: Path) -> float:
    """`bert NAME ARGS --set ...` in `work`; returns its wall clock in seconds."""
    cmd = [sys.executable, "-m", "bertstages", name, "--params", str(REPO / "params.yaml"), *args]
    for item in overrides:
        cmd += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "true"}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"bert {name} failed:\n{proc.stderr[-3000:]}")
    last = [line for line in proc.stderr.splitlines() if line.strip()]
    print(f"  bert {name:<9} {seconds:7.1f} s  {last[-1] if last else ''}", flush=True)
    return seconds


def run_pipeline(work: Path, overrides: list[str]) -> dict:
    """Our stages with their default params; returns timings and the eval metrics."""
    times = {}
    times["corpus"] = run_stage("corpus", ["--out", "data/corpus", "--metrics",
                                           "metrics/corpus.json"], overrides, work)
    times["vocab"] = run_stage("vocab", ["--corpus", "data/corpus", "--out", "data/vocab"],
                               overrides, work)
    times["samples"] = run_stage("samples", ["--corpus", "data/corpus", "--vocab", "data/vocab",
                                             "--out", "data/samples", "--metrics",
                                             "metrics/samples.json"], overrides, work)
    times["pretrain"] = run_stage("pretrain", [], overrides, work)
    times["evaluate"] = run_stage("evaluate", ["--out", "metrics/eval.json"], overrides, work)
    times["finetune"] = run_stage("finetune", [], overrides, work)
    pretrain = json.loads((work / "metrics/pretrain.json").read_text())
    return {"times": times, "eval": read_eval(work / "metrics/eval.json", "eval"),
            "finetune": read_eval(work / "metrics/finetune.json", "finetune"),
            "split_by": json.loads((work / "data/samples/meta.json").read_text())["val"].get(
                "split_by", "documents"),
            "steps": pretrain["pretrain"].get("steps")}


def read_eval(path: Path, group: str) -> dict:
    """A stage's scores (under `group` in its metrics file) and, from the details file beside
    them, the baselines and counts."""
    details = path.with_name(f"{path.stem}_details.json")
    return {**json.loads(path.read_text())[group], **json.loads(details.read_text())}


# --------------------------------------------------------------------------- the reference
def reference_example(store: SampleStore, i: int) -> dict:
    """Sample i as transformers' collator takes it (token types from B's start)."""
    ids, b_start, random_next = store[i]
    types = np.zeros(len(ids), dtype=np.int64)
    types[b_start:] = 1
    return {"input_ids": ids.astype(np.int64).tolist(), "token_type_ids": types.tolist(),
            "next_sentence_label": random_next}


def train_reference(work: Path, budget_s: float, batch_size: int, lr: float, seed: int) -> dict:
    """transformers' BertForPreTraining for `budget_s` seconds; saved to work/ref_model."""
    import transformers

    transformers.logging.set_verbosity_error()
    ours = json.loads((work / "models/pretrained/config.json").read_text())
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
            "max_position_embeddings", "type_vocab_size", "vocab_size", "pad_token_id")
    config = transformers.BertConfig(**{k: ours[k] for k in keys if k in ours})
    torch.manual_seed(seed)
    model = transformers.BertForPreTraining(config)
    model.train()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(work / "data/vocab")
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    samples = SampleStore(work / "data/samples/train")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=lr, betas=(0.9, 0.999), eps=1e-6)
    rng = np.random.default_rng(seed)
    order, cursor = rng.permutation(len(samples)), 0
    warmup = 0.1  # share of the budget
    started = time.perf_counter()
    step = 0
    while (progress := (time.perf_counter() - started) / budget_s) < 1:
        scale = progress / warmup if progress < warmup else (1 - progress) / (1 - warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr * scale
        if cursor + batch_size > len(order):
            order, cursor = rng.permutation(len(samples)), 0
        batch = collator([reference_example(samples, int(i))
                            for i in order[cursor : cursor + batch_size]])
        cursor += batch_size
        out = model(**batch)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
    seconds = time.perf_counter() - started
    model.save_pretrained(work / "ref_model")
    print(f"  reference  {seconds:7.1f} s  {step} steps of {batch_size} (lr {lr})", flush=True)
    return {"steps": step, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=None, help="corpus.source (default: params.yaml's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="override params.yaml (repeatable)")
    parser.add_argument("--ref-lr", type=float, default=2e-3, help="the reference's peak LR")
    parser.add_argument("--workdir", default=None, help="keep the run here (default: a temp dir)")
    args = parser.parse_args()

    overrides = ["tracking.enabled=false", *args.overrides]
    if args.source:
        source = args.source
        if not source.startswith(("builtin:", "hf:")):
            source = str(Path(source).resolve())
        overrides.append(f"corpus.source={source}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        print(f"ours ({' '.join(overrides)}):", flush=True)
        ours = run_pipeline(work, overrides)
        budget = ours["times"]["pretrain"]
        params = json.loads(subprocess.run(
            [sys.executable, "-c", "import json,sys,yaml;"
             "json.dump(yaml.safe_load(open(sys.argv[1])),sys.stdout)", str(REPO / "params.yaml")],
            capture_output=True, text=True, check=True).stdout)
        batch_size = int(next((o.split("=", 1)[1] for o in overrides
                               if o.startswith("train.batch_size=")),
                              params["train"]["batch_size"]))
        print(f"reference (same wall clock as our pretrain: {budget:.0f} s):", flush=True)
        # on the CPU kernels and threads our stages ran with
        cpu = parse_section(load_params(REPO / "params.yaml", overrides), "cpu", CpuConfig)
        pin_cpu(cpu)
        ref = train_reference(work, budget, batch_size, args.ref_lr, seed=42)
        run_stage("evaluate", ["--model", "ref_model", "--out", "metrics/ref_eval.json"],
                  overrides, work)
        ref_eval = read_eval(work / "metrics/ref_eval.json", "eval")
        bow_nsp = ours["eval"]["nsp_bag_of_words_accuracy"]  # bert evaluate's baseline

    mine = ours["eval"]
    base = mine["mlm_baseline_accuracy"]
    target = 0.5 + (bow_nsp - 0.5) / 3
    print()
    print("| model | val MLM accuracy | x most-frequent-token | NSP accuracy | val pairs "
          "| steps | pretrain s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, e, steps, secs in (("ours", mine, ours["steps"], budget),
                                 ("reference", ref_eval, ref["steps"], ref["seconds"])):
        print(f"| {name} | {e['mlm_accuracy']:.4f} | {e['mlm_accuracy'] / max(base, 1e-9):.2f} "
              f"| {e['nsp_accuracy']:.4f} | {e['sequences']} | {steps} | {secs:.0f} |")
    print(f"| bag of words (TF-IDF cosine of A and B, no model) | | | {bow_nsp:.4f} "
          f"| {mine['sequences']} | | |")
    ft = ours["finetune"]
    print()
    print(f"fine-tune {ft['task']} ({ft['data']['train_examples']} train / "
          f"{ft['data']['test_examples']} test examples): test accuracy pretrained "
          f"{ft['pretrained']['accuracy']:.4f}, scratch {ft['scratch']['accuracy']:.4f}, bag of "
          f"words {ft['bag_of_words']['accuracy']:.4f}, "
          f"majority {ft['majority_class']['accuracy']:.4f}")
    total = sum(ours["times"].values())
    print(f"pipeline (corpus..finetune) {total:.0f} s; most-frequent-token baseline {base:.4f}; "
          f"NSP majority {mine['nsp_baseline_accuracy']:.4f}; split by {ours['split_by']} (the "
          f"NSP target applies to corpora split by documents)")
    ratio = mine["mlm_accuracy"] / max(ref_eval["mlm_accuracy"], 1e-9)
    nsp_ratio = mine["nsp_accuracy"] / max(ref_eval["nsp_accuracy"], 1e-9)
    ratio, nsp_ratio = (r if math.isfinite(r) else float("nan") for r in (ratio, nsp_ratio))
    print(f"quality_vs_reference={ratio:.2f} nsp_vs_reference={nsp_ratio:.2f} "
          f"nsp={mine['nsp_accuracy']:.3f} nsp_target={target:.3f} "
          f"finetune_gain={ft['gain']['accuracy']:+.3f}")


if __name__ == "__main__":
    main()
