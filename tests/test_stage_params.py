"""Each stage's `params:` in dvc.yaml list exactly what the stage reads of params.yaml, and the
recipe file params.yaml names (`model.recipe`) where the stage reads a section a recipe sets.

DVC reruns a stage when a value it lists changes, and only then: a section the stage reads but
dvc.yaml does not list leaves a stale output after a change; one listed but not read reruns the
stage for nothing. A stage reads params.yaml only through its module's PARAMS
(`bertstages.params.read_params`), so comparing PARAMS with dvc.yaml is comparing what is read:
the second test holds every stage to that.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest
import yaml
from helpers.bert import REPO

from bertstages.cli import COMMANDS
from bertstages.params import NO_RECIPE, RECIPE_SECTIONS, RECIPES, Keys, StageParams

DVC_YAML = REPO / "dvc.yaml"


def recipe_file(params_file: Path = REPO / "params.yaml") -> str | None:
    """The recipe file params.yaml names (`model.recipe`), as dvc.yaml lists it (a path from
    the repo's root); None for none."""
    model = yaml.safe_load(params_file.read_text(encoding="utf-8")).get("model") or {}
    name = model.get("recipe", NO_RECIPE)
    return None if name == NO_RECIPE else str(RECIPES / f"{name}.yaml")


def dvc_params(wanted: StageParams, recipe: str | None = None) -> list[str]:
    """The entries of a stage's `params:` in dvc.yaml for what it reads: a whole section by
    its name, some keys by theirs (section.key), and the whole `recipe` file when it reads a
    section a recipe may set (the edge merges the recipe into it)."""
    names = []
    for section, kind in wanted.items():
        if isinstance(kind, Keys):
            names += [f"{section}.{field.name}" for field in dataclasses.fields(kind.cls)]
        else:
            names.append(section)
    if recipe and set(wanted) & set(RECIPE_SECTIONS):
        names.append(recipe)
    return names


def listed(entry: str | dict) -> str:
    """A `params:` entry of dvc.yaml by name: a section (or section.key) of params.yaml, or
    `FILE` for a whole other params file (`- FILE:`; `FILE: [keys]` for some of its keys)."""
    if isinstance(entry, str):
        return entry
    return ", ".join(file if keys is None else f"{file}: {keys}" for file, keys in entry.items())


def stage_modules(dvc_file: Path = DVC_YAML) -> dict[str, tuple[str, list[str]]]:
    """stage -> (its `bert` command's module, its `params:` entries) for every stage there."""
    stages = yaml.safe_load(dvc_file.read_text(encoding="utf-8"))["stages"]
    found = {}
    for name, stage in stages.items():
        words = stage["cmd"].split()
        assert words[0] == "bert", f"{name}: a stage runs a bert command"
        module = COMMANDS[words[1]].partition(":")[0]
        found[name] = (module, [listed(entry) for entry in stage.get("params", [])])
    return found


def mismatches(dvc_file: Path = DVC_YAML) -> dict[str, dict[str, list[str]]]:
    """Per stage, what it reads but dvc.yaml does not list, and what is listed but not read."""
    wrong = {}
    for name, (module, entries) in stage_modules(dvc_file).items():
        read = dvc_params(importlib.import_module(module).PARAMS, recipe_file())
        unlisted = [entry for entry in read if entry not in entries]
        unread = [entry for entry in entries if entry not in read]
        if unlisted or unread:
            wrong[name] = {"read, not listed": unlisted, "listed, not read": unread}
    return wrong


def test_each_stage_lists_exactly_the_params_it_reads():
    assert not mismatches(), mismatches()


def test_the_stages_that_read_the_model_list_the_recipe_params_yaml_names():
    """So that `dvc params diff` shows a recipe change and `dvc repro` reruns them for it."""
    recipe = recipe_file()
    assert recipe == "params/recipes/tiny.yaml" and (REPO / recipe).is_file()
    assert [name for name, (_, entries) in stage_modules().items()
            if recipe in entries] == ["pretrain", "export", "prune"]


def test_a_section_left_out_of_dvc_yaml_or_listed_too_many_is_found(tmp_path):
    """The check itself: a dvc.yaml that forgets a section or the recipe, lists one the stage
    never reads, or only some keys of the recipe, fails it."""
    stages = yaml.safe_load(DVC_YAML.read_text(encoding="utf-8"))
    stages["stages"]["evaluate"]["params"].remove("tracking")
    stages["stages"]["export"]["params"].append("glue")
    stages["stages"]["samples"]["params"].remove("phase2.enabled")
    stages["stages"]["pretrain"]["params"].remove({"params/recipes/tiny.yaml": None})
    stages["stages"]["evaluate"]["params"].append({"params/recipes/tiny.yaml": None})
    stages["stages"]["export"]["params"].remove({"params/recipes/tiny.yaml": None})
    stages["stages"]["export"]["params"].append({"params/recipes/tiny.yaml": ["model"]})
    planted = tmp_path / "dvc.yaml"
    planted.write_text(yaml.safe_dump(stages), encoding="utf-8")
    assert mismatches(planted) == {
        "evaluate": {"read, not listed": ["tracking"],
                     "listed, not read": ["params/recipes/tiny.yaml"]},
        "export": {"read, not listed": ["params/recipes/tiny.yaml"],
                   "listed, not read": ["glue", "params/recipes/tiny.yaml: ['model']"]},
        "pretrain": {"read, not listed": ["params/recipes/tiny.yaml"], "listed, not read": []},
        "samples": {"read, not listed": ["phase2.enabled"], "listed, not read": []},
    }


@pytest.mark.parametrize("module", sorted({m for m, _ in stage_modules().values()}))
def test_a_stage_reads_params_only_through_its_PARAMS(module):
    """What makes PARAMS the truth: the stage's module parses sections only with
    `read_params(..., PARAMS)`, never `parse_section`/`parse_keys` of a section of its own
    choosing, and declares PARAMS once."""
    path = REPO / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
              for alias in node.names}
    assert not names & {"parse_section", "parse_keys"}, f"{module} parses a section itself"
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == "read_params"]
    assert calls, f"{module} does not read its params through read_params"
    for call in calls:
        assert len(call.args) == 2 and isinstance(call.args[1], ast.Name) \
            and call.args[1].id == "PARAMS", f"{module}: read_params(params, PARAMS) only"
    assigned = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "PARAMS" for t in node.targets)]
    assert len(assigned) == 1, f"{module} declares PARAMS once, at module level"


PATH_PARAMS = {  # stage -> params naming a file or folder it reads
    "finetune": ("finetune.data", "finetune.test_data"),
    "glue": ("glue.data", "glue.model"),
    "probe": ("probe.model", "probe.minimal_pairs", "probe.cloze"),
}


@pytest.mark.parametrize("stage", sorted(PATH_PARAMS))
def test_under_dvc_a_data_path_missing_from_the_deps_is_a_warning(stage, tmp_path):
    """DVC reruns a stage when such a param changes, not when the files behind it do, unless
    dvc.yaml lists them: each one not listed is said before the stage reads it (DVC_STAGE and
    DVC_ROOT are what `dvc repro` sets); the stage here then stops, having no model."""
    from helpers.bert import run_bert

    params: dict = {}
    for name in PATH_PARAMS[stage]:
        section, key = name.split(".")
        (tmp_path / key).mkdir()
        params.setdefault(section, {})[key] = key
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    env = {"DVC_STAGE": stage, "DVC_ROOT": str(tmp_path)}
    first, *others = PATH_PARAMS[stage]
    listed = f"{first.split('.')[1]}/"  # a dep of the folder itself, as dvc.yaml writes it
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(
        {"stages": {stage: {"cmd": f"bert {stage}", "deps": [listed, "models/pretrained"]}}}))
    proc = run_bert(stage, cwd=tmp_path, env=env)
    assert proc.returncode != 0  # no model here
    for name in others:
        key = name.split(".")[1]
        assert (f"{name} {key} is not among the deps of the {stage} stage in dvc.yaml"
                in proc.stderr), proc.stderr
    assert f"{first} {first.split('.')[1]} is not among" not in proc.stderr
    proc = run_bert(stage, cwd=tmp_path)  # not under dvc repro: nothing to say
    assert "not among the deps" not in proc.stderr
