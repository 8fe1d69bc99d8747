"""params.yaml at the edge: load it, apply `--set key=value` overrides, merge the recipe it
names under them (`model.recipe`: a params file of its own, params/recipes/NAME.yaml), and turn
one section into its config class (validated by pydantic: `bertcore.common.validation`), which
then holds plain values. Everything the user can get wrong is a ConfigError naming the dotted
key as written in params.yaml.

Kept of our own rather than OmegaConf's `from_dotlist` + `merge`: those read `--set x=1e-4` as
YAML 1.2 (a float, where params.yaml's own 1e-4 is YAML 1.1's string, logged and carded as
written) and let `--set corpus.seed=1` silently replace `corpus: builtin:...` by a mapping;
OmegaConf's loader refuses a duplicate key without naming its dotted path or first line."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from bertcore.common.errors import BertError, ConfigError, yaml_text

T = TypeVar("T")

SECTIONS = ("corpus", "vocab", "samples", "model", "masking", "train", "phase2", "eval", "export",
            "card", "finetune", "glue", "prune", "probe", "cpu", "tracking")
# A recipe is a params file, params/recipes/NAME.yaml beside params.yaml (docs/recipe.md),
# chosen by `model.recipe: NAME`; `none`: no recipe, the values of params.yaml and the code.
RECIPES = Path("params") / "recipes"
NO_RECIPE = "none"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a recipe's name: a file's, no path
# The sections a recipe may set: the model and its optimisation (pretrain, export and prune
# read them); dvc.yaml lists the recipe file under each stage that reads one of them
# (tests/test_stage_params.py)
RECIPE_SECTIONS = ("model", "train")


def load_params(path: str | Path = "params.yaml", overrides: Sequence[str] = (),
                reads: Sequence[str] = SECTIONS) -> dict:
    """Read params.yaml, apply `section.key=value` overrides (values parsed as YAML), and, for
    a stage that `reads` a section a recipe sets, merge the recipe that `model.recipe` names
    under them (`with_recipe`): the other stages never open it."""
    path = Path(path)
    if not path.is_file():
        raise BertError(f"params file not found: {path} (run from the repo root or pass --params)")
    params = _load_yaml(path)
    if params is None:  # empty or comments only: most likely the wrong file, or a lost one
        raise BertError(f"{path} holds no settings: write the sections to set, or {{}} to run "
                        "with every built-in default")
    if not isinstance(params, dict):
        raise BertError(f"{path} must be a mapping of sections ({', '.join(SECTIONS)})")
    unknown = sorted(set(params) - set(SECTIONS))
    if unknown:
        raise ConfigError(unknown[0], f"unknown section; expected one of {', '.join(SECTIONS)}")
    for item in overrides:
        _override(params, item)
    if not set(reads) & set(RECIPE_SECTIONS):
        return params
    return with_recipe(params, path.parent)


def _override(params: dict, item: str) -> None:
    """Set the value of one `section.key=value` (`--set`) in `params`."""
    key, sep, raw = item.partition("=")
    if not sep or "." not in key:
        raise ConfigError(item, "overrides are written section.key=value")
    section, _, field = key.partition(".")
    if section not in SECTIONS:
        raise ConfigError(section, f"unknown section; expected one of {', '.join(SECTIONS)}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    target = params.setdefault(section, {}) or {}
    if not isinstance(target, dict):
        raise ConfigError(section, f"must be a mapping of keys, got {yaml_text(target)}: fix "
                                   f"params.yaml before overriding {key}")
    params[section] = target
    *parents, leaf = field.split(".")
    for depth, part in enumerate(parents, start=1):
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            where = ".".join([section, *parents[:depth]])
            raise ConfigError(key, f"{where} is {yaml_text(target)}, not a mapping: write "
                                   f"--set {where}=VALUE")
    target[leaf] = value


def with_recipe(params: dict, root: Path) -> dict:
    """`params` with the recipe that `model.recipe` names (`root`/params/recipes/NAME.yaml)
    merged under them: a key the recipe sets takes its value unless params (params.yaml with
    `--set`) set it themselves; `none` (the default): no recipe. The recipe was measured for
    one preset (its `model.preset`), from random init: with another preset, or with
    `model.init_from`, it is a ConfigError."""
    model = params.get("model")
    name = model.get("recipe", NO_RECIPE) if isinstance(model, dict) else NO_RECIPE
    if name == NO_RECIPE:
        return params
    path, recipe = read_recipe(root, name)
    merged = dict(params)
    for section, values in recipe.items():
        mine = params.get(section) or {}
        if not isinstance(mine, dict):
            continue  # parse_section refuses it, in one line
        nulled = next((key for key in values if key in mine and mine[key] is None), None)
        if nulled is not None:  # null meant "the recipe's" before recipe files
            raise ConfigError(f"{section}.{nulled}", f"null would replace the recipe's "
                                                     f"{yaml_text(values[nulled])} ({path}): "
                                                     "remove the key to train with it, or "
                                                     "write a value")
        merged[section] = {**mine, **{k: v for k, v in values.items() if k not in mine}}
    _refuse_another_model(merged["model"], name, recipe["model"]["preset"], path)
    return merged


def read_recipe(root: Path, name: Any) -> tuple[Path, dict]:
    """The recipe file `name` names in `root`/params/recipes, with what it sets: sections of
    RECIPE_SECTIONS, `model.preset` among them."""
    files = sorted(found.stem for found in (root / RECIPES).glob("*.yaml"))
    if isinstance(name, bool):  # model.recipe: true/false, the params before recipe files
        raise ConfigError("model.recipe", f"{yaml_text(name)} is the old spelling: name the "
                                          f"recipe ({', '.join(files)}: {RECIPES}/NAME.yaml); none "
                                          "is what false gave, and true on a preset without one")
    path = root / RECIPES / f"{name}.yaml"
    if not (isinstance(name, str) and NAME.fullmatch(name) and path.is_file()):
        raise ConfigError("model.recipe", f"{yaml_text(name)} is no recipe in {root / RECIPES} "
                                          f"(one of: {', '.join([*files, NO_RECIPE])})")
    recipe = _load_yaml(path)
    if not (isinstance(recipe, dict) and set(recipe) <= set(RECIPE_SECTIONS)
            and all(isinstance(values, dict) for values in recipe.values())):
        raise BertError(f"{path}: a recipe is a mapping of sections of "
                        f"{', '.join(RECIPE_SECTIONS)}, each a mapping of keys")
    if not isinstance(recipe.get("model", {}).get("preset"), str):
        raise BertError(f"{path}: a recipe names the preset it was measured for (model.preset)")
    return path, recipe


def _refuse_another_model(model: dict, name: str, preset: str, path: Path) -> None:
    """ConfigError unless `model` (the section, recipe merged) is the recipe's preset from
    random init."""
    if model.get("init_from"):
        raise ConfigError("model.recipe", f"{name} ({path}) trains a {preset} from random init; "
                                          "with model.init_from the model is the folder's: set "
                                          "model.recipe: none")
    if model.get("preset") != preset:
        raise ConfigError("model.recipe", f"{name} ({path}) was measured for model.preset "
                                          f"{preset}, not {model.get('preset')}: set "
                                          "model.recipe: none, or a recipe for that preset")


def _load_yaml(path: Path) -> Any:
    """`_read_yaml`, a BertError naming the line where the YAML is not valid."""
    try:
        return _read_yaml(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise BertError(f"{path} is not valid YAML{where}: fix the file") from None


def _read_yaml(path: Path) -> Any:
    """The YAML document of `path` (None when it is empty), refusing a key written twice in
    one mapping: YAML loaders keep the last value, and the user meant one of the two."""
    loader = yaml.SafeLoader(_read_utf8(path))
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, path, "", set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _read_utf8(path: Path) -> str:
    """The text of `path`; BertError naming the line of the first byte that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise BertError(f"{path}:{line} is not UTF-8 (byte 0x{data[exc.start]:02x}): save the "
                        "file as UTF-8") from None


def _refuse_duplicate_keys(node: yaml.Node, path: Path, where: str, seen: set[int]) -> None:
    """ConfigError naming the first key written twice under `node` (its dotted name, as in
    params.yaml) and the lines of both. `seen`: the nodes looked at (an alias repeats one)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, path, where, seen)
    if not isinstance(node, yaml.MappingNode):
        return
    lines: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        dotted = f"{where}.{key}" if where else str(key)
        if key is not None and key_node.tag != "tag:yaml.org,2002:merge":  # `<<:` merges
            line = key_node.start_mark.line + 1
            if key in lines:
                raise ConfigError(dotted, f"written twice in {path} (lines {lines[key]} and "
                                          f"{line}): keep the one you mean")
            lines[key] = line
        _refuse_duplicate_keys(value_node, path, dotted, seen)


def parse_section(params: Mapping[str, Any], section: str, cls: type[T],
                  only_fields: bool = False) -> T:
    """Build the section class `cls` from `params[section]`, checking keys, types and ranges.
    `only_fields`: for a stage that reads only some keys of a section (the fields of `cls`),
    the other keys left to the stage that reads the whole section and checks them."""
    data = params.get(section) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(section, f"must be a mapping of keys, got {yaml_text(data)}")
    fields = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{str(key): value for key, value in data.items()
                      if not only_fields or key in fields})
    except ConfigError as exc:
        raise exc.in_section(section) from None


@dataclass(frozen=True)
class Keys:
    """Some keys of a section, the fields of `cls`: for a stage that reads only those."""

    cls: type


# What a stage reads of params.yaml: section -> its config class, or Keys(class) for some keys.
# A stage module's PARAMS; read_params reads exactly it, and its dvc.yaml `params:` list it
# (tests/test_stage_params.py compares the two).
StageParams = Mapping[str, "type | Keys"]


def read_params(params: Mapping[str, Any], wanted: StageParams) -> dict[str, Any]:
    """The sections of `wanted` (a stage's PARAMS) parsed from `params`, by section."""
    return {section: parse_section(params, section, kind.cls, only_fields=True)
            if isinstance(kind, Keys) else parse_section(params, section, kind)
            for section, kind in wanted.items()}
