"""The sections of params.yaml as validated dataclasses, checked by pydantic.

A section's class is decorated with `params_section`: a pydantic dataclass (so `dataclasses.fields`,
`asdict` and `replace` work as on any dataclass) with strict types, unknown keys refused and
every pydantic `ValidationError` turned into the project's one-line `ConfigError` naming the
key, the value as given and what is allowed, in pydantic's words (`Field(gt=0)`: "greater
than 0") unless the field carries its own (`Allowed`, e.g. "null or an integer >= 1"). Its
fields use the types below, which take the forms a value has in YAML: `Int`, `Float` and
`Bool` also accept what YAML 1.1 leaves a string (`1e-4`, `"true"`, `--set` values), as the
stages always did; pydantic's lax mode would also take true for 1. A `Float` is finite:
`.inf` and `.nan` are refused for every key (a learning rate of .inf trained a model of NaN).
Checks across fields are the class's model validators, which raise `ConfigError` themselves."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Annotated, Any

import pydantic
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from bertcore.common.errors import ConfigError, yaml_text

# strict: no silent conversions beyond the YAML forms below (true is no integer, 1 no bool)
SECTION_CONFIG = ConfigDict(strict=True, extra="forbid")

UNKNOWN_KEY = {"unexpected_keyword_argument", "extra_forbidden"}


@dataclasses.dataclass(frozen=True)
class Allowed:
    """Field metadata: what the field allows, in the words of an error message."""

    text: str


# --------------------------------------------------------------------- the YAML forms
def _yaml_float(value: Any) -> Any:
    """An int, or a string YAML 1.1 did not read as a number (`1e-4`), as a float."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _yaml_int(value: Any) -> Any:
    """An integral float, or a string of one (`--set x=1e3`), as an int; the rest unchanged."""
    number = _yaml_float(value) if isinstance(value, str) else value
    return int(number) if isinstance(number, float) and number.is_integer() else value


def _yaml_bool(value: Any) -> Any:
    """The strings true and false (any case) as bools."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


Int = Annotated[int, BeforeValidator(_yaml_int)]
Float = Annotated[float, BeforeValidator(_yaml_float), Field(allow_inf_nan=False)]
Bool = Annotated[bool, BeforeValidator(_yaml_bool)]


# ---------------------------------------------------------------- constrained fields
def integer(*, ge: int | None = None, gt: int | None = None, le: int | None = None,
            allowed: str | None = None) -> Any:
    """An `Int` field within bounds (pydantic words them); `allowed`: words of our own."""
    return Annotated[(Int, Field(ge=ge, gt=gt, le=le), *_words(allowed))]


def number(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, allowed: str | None = None) -> Any:
    """A `Float` field within bounds (pydantic words them); `allowed`: words of our own."""
    return Annotated[(Float, Field(ge=ge, gt=gt, le=le, lt=lt), *_words(allowed))]


def _words(allowed: str | None) -> list[Allowed]:
    return [] if allowed is None else [Allowed(allowed)]


def text(*, allowed: str, min_length: int | None = None, pattern: str | None = None) -> Any:
    """A string field: at least `min_length` long, or matching `pattern` (searched)."""
    return Annotated[str, Field(min_length=min_length, pattern=pattern), Allowed(allowed)]


# A device (train.device, glue.device, `--device`): auto, or one torch knows by that name
DEVICE_PATTERN = r"^(auto|(cpu|cuda|mps)(:\d+)?)$"
DEVICES = "auto, cpu, cuda, cuda:N or mps"


def checked(kind: Any, check: typing.Callable[[Any], bool], allowed: str) -> Any:
    """A field of type `kind` whose value must also pass `check` (after its type is checked)."""

    def validate(value: Any) -> Any:
        if not check(value):
            raise ValueError(allowed)
        return value

    return Annotated[kind, AfterValidator(validate), Allowed(allowed)]


# ------------------------------------------------------------------- the decorator
def params_section(cls: type | None = None, *, frozen: bool = False,
                   renamed: Mapping[str, str] | None = None) -> Any:
    """Make `cls` a params section: a strict pydantic dataclass refusing unknown keys, whose
    construction raises ConfigError (never pydantic's ValidationError). `renamed`: keys the
    section took once, each with what to write now, said instead of "unknown key"."""

    def wrap(cls: type) -> type:
        cls = pydantic_dataclass(cls, config=SECTION_CONFIG, frozen=frozen)
        cls.renamed_keys = dict(renamed or {})
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            try:
                init(self, *args, **kwargs)
            except pydantic.ValidationError as exc:
                raise config_error(type(self), exc) from None

        cls.__init__ = __init__
        return cls

    return wrap if cls is None else wrap(cls)


def config_error(cls: type, exc: pydantic.ValidationError) -> ConfigError:
    """The first problem of `exc` (an unknown key first, then in field order) as a ConfigError:
    `key: value is not allowed; expected what is`, with the field's name as key (the stage
    prefixes the section's) and the value as given, as YAML writes it."""
    errors = exc.errors(include_url=False)
    unknown = sorted(str(error["loc"][0]) for error in errors if error["type"] in UNKNOWN_KEY)
    renamed = [key for key in unknown if key in getattr(cls, "renamed_keys", {})]
    if renamed:
        return ConfigError(renamed[0], cls.renamed_keys[renamed[0]])
    if unknown:  # pydantic's words name no key the section takes
        names = ", ".join(f.name for f in dataclasses.fields(cls) if f.init)
        allowed = f"allowed keys are {names}" if names else "the section takes no keys yet"
        return ConfigError(unknown[0], f"unknown key; {allowed}")
    key = str(errors[0]["loc"][0]) if errors[0]["loc"] else "?"
    mine = [error for error in errors if error["loc"][:1] == (key,)]
    return ConfigError(key, f"{yaml_text(mine[0]['input'])} is not allowed; expected "
                            f"{_expected(cls, key, mine)}")


def _expected(cls: type, key: str, errors: list[dict]) -> str:
    """What field `key` takes: pydantic's words for a number that is not finite, else the
    field's own (`Allowed`), else pydantic's, one per arm of a union."""
    finite = [error for error in errors if error["type"] == "finite_number"]
    info = cls.__pydantic_fields__[key]
    allowed = None if finite else _find_allowed([*info.metadata, info.annotation])
    if allowed is not None:
        return allowed
    arms = dict.fromkeys(error["msg"].removeprefix("Input should be ")
                         for error in finite or errors)
    return " or ".join(arms)


def _find_allowed(items: list[Any]) -> str | None:
    """The text of the first `Allowed` in `items`, or inside the types among them."""
    for item in items:
        if isinstance(item, Allowed):
            return item.text
        found = _find_allowed([*getattr(item, "__metadata__", ()), *typing.get_args(item)])
        if found is not None:
            return found
    return None
