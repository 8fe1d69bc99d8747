"""What the model cards of the downstream stages' folders say (`saved/card.py` writes them):
the fine-tuned classifier (models/finetuned), the pruned model (models/pruned) and each GLUE
task's median-seed model (models/glue/<Task>), each with its own figures beside their
baselines (with their 95% intervals where the report has them, `<name>_ci95`), built from the
report the stage writes beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertcore.saved.card import CardFacts, figure_at, figure_of, interval_text
from bertcore.saved.card_meta import CardMeta

CLASSIFIER_LOAD = """\
from transformers import pipeline

classify = pipeline("text-classification", model="{folder}")
classify({example})
"""
PAIR_EXAMPLE = '{"text": "the first sentence.", "text_pair": "the second one."}'
ONE_EXAMPLE = '"a sentence to classify."'
PRUNED_LOAD = """\
from bertcore.saved.hf import load_model

model = load_model("{folder}")   # the pruned heads removed: the smaller, faster model
# transformers.BertForPreTraining.from_pretrained("{folder}") loads every head, full size
"""
# measured (docs/prune.md): what transformers 5 makes of `pruned_heads`, and the way around it
PRUNED_NOTE = (
    "`config.json` lists the removed heads as `pruned_heads`, and their weights are zeros. "
    "transformers 5 has no head pruning: it ignores `pruned_heads` and loads every head at "
    "full size, so in transformers this model is as large and as slow as the unpruned one "
    "(the same function: a zeroed head adds nothing). The saving needs a loader that drops "
    "the heads: this project's (`bertcore.saved.hf.load_model`), which builds the smaller "
    "shapes, as the parameters above count them.")


def finetuned_facts(folder: str, metrics: Mapping[str, Any], details: Mapping[str, Any],
                    reproduce: Mapping[str, Any], meta: CardMeta | None = None) -> CardFacts:
    """The card of the finetune stage's classifier (the pretrained encoder fine-tuned);
    `meta`: the pretrained model's name (its base_model), licence, language and corpus."""
    data = details.get("data") or {}
    majority = details.get("majority_class") or {}
    words = details.get("bag_of_words") or {}
    pretrained, scratch = metrics.get("pretrained") or {}, metrics.get("scratch") or {}
    task = metrics.get("task", "")
    figures = [*figure_at("test accuracy", pretrained, "accuracy", majority.get("accuracy"),
                          "majority class", dataset=task),
               *figure_at("test macro-F1", pretrained, "macro_f1", majority.get("macro_f1"),
                          "majority class", metric_type="f1", dataset=task),
               *figure_at("test accuracy, same model from random init", scratch, "accuracy",
                          words.get("accuracy"), "TF-IDF bag of words", dataset=task)]
    for key in ("pearson", "spearman"):  # a regression task (finetune.task)
        figures += [*figure_at(f"test {key}", pretrained, key, words.get(key),
                               "bag-of-words regression", metric_type=key, dataset=task),
                    *figure_at(f"test {key}, same model from random init", scratch, key,
                               metric_type=key, dataset=task)]
    labels = (f"scores from {data['label_range'][0]:g} to {data['label_range'][1]:g}"
              if "label_range" in data else
              ", ".join(f"`{label}`" for label in data.get("labels", [])))
    sections = {"Task": f"{data.get('description', task)}. Labels: {labels}; "
                        f"{data.get('train_examples')} training and "
                        f"{data.get('test_examples')} test examples.",
                **_finetuned_seeds(details, "pearson" if "pearson" in pretrained else "accuracy")}
    pair = "same-document" in task or bool((reproduce.get("finetune") or {}).get("text_pair_field"))
    data_name = task_data_name((reproduce.get("finetune") or {}).get("data", task), meta)
    return CardFacts(
        name=_named(meta, "finetuned"), title=f"BERT fine-tuned on {task}",
        **_derived(meta, data_name, reproduce.get("finetune"), FINETUNE_KEYS),
        uses=("Classifying texts of its task (the labels above), in the language and domain "
              "of its corpus; the figures say how well, beside the majority class."),
        limitations=("Fine-tuned on the few examples above, with the spread over seeds "
                     "below: its test figures have the intervals shown, and say nothing of "
                     "text unlike its task's."),
        summary=("The pipeline's pretrained BERT fine-tuned on the task below (the finetune "
                 "stage): its test figures beside the majority class, and the same model "
                 "trained from random init with the same steps beside a bag of words."),
        pipeline_tag="text-classification", figures=figures, sections=sections,
        load=CLASSIFIER_LOAD.format(folder=folder, example=PAIR_EXAMPLE if pair else ONE_EXAMPLE),
        reproduce=reproduce)


# the hyper-parameters each downstream card lists, of its params section
FINETUNE_KEYS = ("max_seq_length", "learning_rate", "batch_size", "epochs", "max_steps",
                 "warmup_fraction", "weight_decay", "max_grad_norm", "seed", "seeds")
PRUNE_KEYS = ("fraction", "iterative", "batches", "batch_size", "recovery_steps",
              "recovery_learning_rate", "seed")
GLUE_KEYS = ("max_seq_length", "learning_rate", "batch_size", "epochs", "max_steps", "grid",
             "warmup_fraction", "weight_decay", "max_grad_norm", "seed", "seeds")


def _named(meta: CardMeta | None, what: str) -> str:
    """A downstream model's name: the pretrained model's with what was done to it."""
    return f"{meta.model_name.rsplit('/', 1)[-1]}-{what}" if meta else what


def task_data_name(data: str, meta: CardMeta | None) -> str:
    """A task's data by name: a built-in task as made from the corpus's val split
    (`python-docs-same-document`), a file by its name."""
    if data.startswith("builtin:"):
        task = data.partition(":")[2]
        return f"{meta.dataset.rsplit('/', 1)[-1]}-{task}" if meta else task
    return data.replace("\\", "/").rsplit("/", 1)[-1] or data


def _derived(meta: CardMeta | None, data_name: str, params: Mapping[str, Any] | None,
             keys: tuple[str, ...], base_model: str | None = None) -> dict[str, Any]:
    """The card's fields of a model made from the pretrained one: its base_model, licence
    and language (`meta`), what it was trained on and with which hyper-parameters."""
    lines = [f"- {key}: {value}" for key in keys
             if (value := (params or {}).get(key)) is not None]
    base = base_model or (meta.model_name if meta else None)
    return {"meta": meta, "base_model": base, "datasets": [data_name],
            "model_type": "BERT encoder with a task head",
            "training_data": f"`{data_name}`, on top of the pretrained model `{base}`"
                             + (f" (pretrained on `{meta.corpus_source}`)." if meta else "."),
            "training_procedure": ("#### Training Hyperparameters\n\n" + "\n".join(lines)
                                   if lines else "")}


def _finetuned_seeds(details: Mapping[str, Any], key: str) -> dict[str, str]:
    """The card's word on the seeds: which one's model this is, and how far the gain ran."""
    seeds = (details.get("training") or {}).get("seeds") or []
    gain = ((details.get("spread") or {}).get("gain") or {}).get(key) or {}
    if not seeds or not gain:
        return {}
    return {"Seeds": f"Fine-tuned with seeds {seeds}, every one scored on the same test split; "
                     f"this folder holds seed {details.get('median_seed')}'s fine-tune, the "
                     f"median by test {key}. The figures are the medians over the seeds; the "
                     f"gain in test {key} over pretraining's absence ran from "
                     f"{gain['min']:+.3f} to {gain['max']:+.3f} over the seeds."}


def pruned_facts(folder: str, metrics: Mapping[str, Any], details: Mapping[str, Any],
                 reproduce: Mapping[str, Any], meta: CardMeta | None = None) -> CardFacts:
    """The card of the prune stage's model: its val figures (with their intervals, where the
    report has them) beside the unpruned model's, what pruning changed (the paired interval
    of the difference, where the details have it), and how to get its saving."""
    val, heads = metrics.get("val") or {}, metrics.get("heads") or {}
    parameters = metrics.get("parameters") or {}
    figures = []
    for key, name in (("mlm_accuracy", "val MLM accuracy"), ("nsp_accuracy", "val NSP accuracy")):
        scores = val.get(key) or {}
        final = "recovered" if "recovered" in scores else "pruned"
        figures += figure_at(name, scores, final, scores.get("before"), "before pruning",
                             **({"dataset": f"{meta.dataset} (held-out val split)",
                                 "dataset_type": meta.dataset, "dataset_split": "validation"}
                                if meta else {}))
    saving = (f"{heads.get('removed')} of {heads.get('before')} attention heads removed "
              f"(Michel et al. 2019: the least important by their gate's gradient); "
              f"parameters {parameters.get('before'):,} before, {parameters.get('after'):,} "
              "after" if isinstance(parameters.get("after"), int) else "")
    changes = _pruning_changes(details.get("differences"))
    derived = _derived(meta, meta.dataset if meta else "the pretraining samples",
                       reproduce.get("prune"), PRUNE_KEYS)
    return CardFacts(
        name=_named(meta, "pruned"), title="BERT with attention heads pruned",
        **{**derived, "model_type": "BERT encoder with attention heads removed, MLM and NSP "
                                    "heads"},
        uses=("As the pretrained model (fill-mask, NSP, a base to fine-tune), smaller and "
              "faster where the loader drops the pruned heads (below)."),
        limitations=("Those of the pretrained model, and what pruning cost on the val split "
                     "(below)."),
        summary=("The pipeline's pretrained BERT with its least important attention heads "
                 "removed, then trained a few steps to recover (the prune stage)."),
        pipeline_tag="fill-mask", figures=figures,
        sections={"Pruning": saving + (f"\n\n{changes}" if changes else ""),
                  "Getting the saving (transformers 5)": PRUNED_NOTE},
        load=PRUNED_LOAD.format(folder=folder), reproduce=reproduce)


def _pruning_changes(differences: Any) -> str:
    """What pruning changed on the val split, each difference with its paired 95% interval
    (prune_details.json's `differences`); "" without them."""
    if not isinstance(differences, Mapping):
        return ""
    lines = []
    for key, name in (("mlm_accuracy", "MLM accuracy"), ("nsp_accuracy", "NSP accuracy")):
        for phase, change in (differences.get(key) or {}).items():
            found = change if isinstance(change, Mapping) else {}
            figure = figure_of(name, found.get("difference"), interval=found.get("ci95"))
            if figure and figure[0].interval is not None:
                lines.append(f"- val {name}, {phase} minus before: "
                             f"{interval_text(figure[0].value, *figure[0].interval, signed=True)}"
                             f" ({found.get('verdict')})")
    if not lines:
        return ""
    return ("What pruning changed, each difference with its 95% interval over the same val "
            "pairs resampled together (paired):\n\n" + "\n".join(lines))


def glue_task_facts(folder: str, task: str, metrics: Mapping[str, Any],
                    details: Mapping[str, Any], reproduce: Mapping[str, Any],
                    meta: CardMeta | None = None) -> CardFacts:
    """The card of a GLUE task's median-seed model: the task's medians over the seeds; its
    base_model is `glue.model`'s folder where that names one, else the pipeline's model."""
    scores = metrics.get(task) or {}
    about = details.get("tasks", {}).get(task) or {}
    seeds = about.get("seeds", [])
    figures = [figure for column in scores if not column.endswith("_ci95")
               for figure in figure_at(f"{task} {column} (dev, median of {len(seeds)} seeds, "
                                       "x100)", scores, column, metric_type=column,
                                       dataset=f"GLUE {task} dev", dataset_type="glue",
                                       dataset_config=task.lower(),
                                       dataset_split="validation")]
    spread = about.get("score") or {}
    sections = {"Seeds": f"Seeds {seeds}: score min {spread.get('min')}, median "
                         f"{spread.get('median')}, max {spread.get('max')} (x100); this "
                         "folder holds the median seed's model. Recipe: "
                         f"{about.get('recipe')}."}
    params = reproduce.get("glue") or {}
    other = params.get("model")
    return CardFacts(
        name=_named(meta, f"glue-{task.lower()}"), title=f"BERT fine-tuned on GLUE {task}",
        **_derived(meta, "glue", params, GLUE_KEYS,
                   base_model=str(other).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
                   if other else None),
        uses=f"GLUE's {task}: its test set (the leaderboard's files) and text like it.",
        limitations=("Scored on GLUE's dev set only, the median of the seeds below; a "
                     "small model's scores, to compare with the same recipe's."),
        summary=(f"The median seed of the glue stage's fine-tunes on GLUE's {task} (dev "
                 "scores; the other tasks' models are beside this folder)."),
        pipeline_tag="text-classification", figures=figures, sections=sections,
        load=CLASSIFIER_LOAD.format(folder=folder, example=ONE_EXAMPLE),
        reproduce=reproduce)
