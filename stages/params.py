"""params.yaml at the edge: load it, apply `--set key=value` overrides, and turn one section
into a typed, validated config object. Everything the user can get wrong is a ConfigError
naming the dotted key as written in params.yaml."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from bertcore.common.errors import BertError, ConfigError
from stages.coerce import from_mapping

T = TypeVar("T")

SECTIONS = (
    "corpus",
    "vocab",
    "samples",
    "model",
    "masking",
    "train",
    "eval",
    "export",
    "finetune",
    "prune",
    "tracking",
)


def load_params(path: str | Path = "params.yaml", overrides: Sequence[str] = ()) -> dict:
    """Read params.yaml and apply `section.key=value` overrides (values parsed as YAML)."""
    path = Path(path)
    if not path.is_file():
        raise BertError(f"params file not found: {path} (run from the repo root or pass --params)")
    try:
        params = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise BertError(f"{path} is not valid YAML{where}: fix the file") from None
    if not isinstance(params, dict):
        raise BertError(f"{path} must be a mapping of sections ({', '.join(SECTIONS)})")
    unknown = sorted(set(params) - set(SECTIONS))
    if unknown:
        raise ConfigError(unknown[0], f"unknown section; expected one of {', '.join(SECTIONS)}")
    for item in overrides:
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
            raise ConfigError(section, f"must be a mapping of keys, got {target!r}: fix "
                                       f"params.yaml before overriding {key}")
        params[section] = target
        *parents, leaf = field.split(".")
        for depth, part in enumerate(parents, start=1):
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                where = ".".join([section, *parents[:depth]])
                raise ConfigError(key, f"{where} is {target!r}, not a mapping: write "
                                       f"--set {where}=VALUE")
        target[leaf] = value
    return params


def parse_section(params: Mapping[str, Any], section: str, cls: type[T]) -> T:
    """Build the dataclass `cls` from `params[section]`, checking keys, types and ranges."""
    data = params.get(section) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(section, f"must be a mapping of keys, got {data!r}")
    try:
        return from_mapping(cls, data)
    except ConfigError as exc:
        raise exc.in_section(section) from None
