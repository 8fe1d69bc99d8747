"""params.yaml at the edge: load it, apply `--set key=value` overrides, and turn one section
into a typed, validated config object. Everything the user can get wrong is a ConfigError
naming the dotted key as written in params.yaml."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml

from bertcore.errors import BertError, ConfigError

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


def from_mapping(cls: type[T], data: Mapping[str, Any]) -> T:
    """Build dataclass `cls` from a mapping; unknown keys and wrong types are ConfigErrors."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(unknown[0], f"unknown key; allowed keys are {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {name: coerce(name, value, hints[name]) for name, value in data.items()}
    return cls(**kwargs)  # __post_init__ checks the ranges


def coerce(key: str, value: Any, annotation: Any) -> Any:
    """Return `value` as `annotation`: bool, int, float, str, Literal, Optional, list, dataclass."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(key, value, arg)
            except ConfigError as exc:
                errors.append(exc.problem)
        raise ConfigError(key, errors[0] if len(errors) == 1 else f"{value!r} fits none of {args}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"{value!r} is not allowed; expected one of {list(args)}")
        return value
    if origin in (list, tuple, Sequence):
        if not isinstance(value, list | tuple):
            raise ConfigError(key, f"expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [coerce(key, item, inner) for item in value]
        return tuple(items) if origin is tuple else items
    if annotation is Any:
        return value
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {value!r}")
        try:
            return from_mapping(annotation, value)
        except ConfigError as exc:
            raise exc.in_section(key) from None
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(key, f"expected true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(float(value)) if float(value).is_integer() else int(value)
            except ValueError:
                pass
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, bool):
            raise ConfigError(key, f"expected a number, got {value!r}")
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(key, f"expected a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(key, f"expected a string, got {value!r}")
    return value
