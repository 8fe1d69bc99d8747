"""A mapping read from YAML (a params.yaml section, `--set` values) into a typed dataclass:
unknown keys and values of the wrong type are ConfigErrors naming the key; ranges are the
dataclass's own `__post_init__` checks."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, Union

from bertcore.common.errors import ConfigError

T = TypeVar("T")


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
        if len(errors) == 1:
            raise ConfigError(key, errors[0])
        forms = [describe(arg) for arg in args if arg is not type(None)]
        forms += ["null"] if type(None) in args else []
        raise ConfigError(key, f"{value!r} is not allowed; expected {' or '.join(forms)}")
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


def describe(annotation: Any) -> str:
    """What a value of `annotation` looks like in params.yaml, for a message."""
    if typing.get_origin(annotation) is Literal:
        return " or ".join(str(arg) for arg in typing.get_args(annotation))
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))
