"""The sections of params.yaml as validated dataclasses, checked by pydantic.

A section's class is decorated with `params_section`: a pydantic dataclass (so `dataclasses.fields`,
`asdict` and `replace` work as on any dataclass) with strict types, unknown keys refused and
every pydantic `ValidationError` turned into the project's one-line `ConfigError` naming the
key, the value and what is allowed (`config_error`, the one place that does it). Its fields use
the types below, which take the forms a value has in YAML: `Int`, `Float` and `Bool` also accept
what YAML 1.1 leaves a string (`1e-4`, `"true"`, `--set` values), as the stages always did.
A `Float` is finite: `.inf` and `.nan` are refused for every key (a learning rate of .inf
trained a model of NaN); a key that means to take them would say so with a type of its own.
Messages show values as YAML writes them (null, true, .inf: `yaml_text`). A field's
constraint carries its wording (`integer(ge=1)` says "an integer >= 1"); checks across fields
are the class's model validators, which raise `ConfigError` themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Annotated, Any

import pydantic
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from bertcore.common.errors import ConfigError, yaml_text

# strict: no silent conversions beyond the YAML forms below (true is no integer, 1 no bool)
SECTION_CONFIG = ConfigDict(strict=True, extra="forbid")

UNKNOWN_KEY = {"unexpected_keyword_argument", "extra_forbidden"}
EXPECTED_TYPE = {  # pydantic's error types -> what the value should have been
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "list_type": "a list", "dict_type": "a mapping",
    "finite_number": "a number", "none_required": "null",
}


@dataclasses.dataclass(frozen=True)
class Allowed:
    """Field metadata: what the field allows, in the words of an error message."""

    text: str


# --------------------------------------------------------------------- the YAML forms
def _yaml_int(value: Any) -> Any:
    """An integral float, or a string of one (`--set x=1e3`), as an int; the rest unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() else value
    return value


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
    """An `Int` field within bounds; `allowed` words them (default: from the bounds)."""
    if allowed is None:
        if gt == 0 and ge is None and le is None:
            allowed = "a positive integer"
        elif ge is not None and le is not None:
            allowed = f"{ge}..{le}"
        else:
            allowed = f"an integer {'>=' if ge is not None else '>'} {ge if gt is None else gt}"
    return Annotated[Int, Field(ge=ge, gt=gt, le=le), Allowed(allowed)]


def number(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, allowed: str | None = None) -> Any:
    """A `Float` field within bounds; `allowed` words them (default: from the bounds)."""
    if allowed is None:
        low, high = ge if gt is None else gt, le if lt is None else lt
        if low is None or high is None:
            sign = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
            name, bound = next((k, v) for k, v in (("ge", ge), ("gt", gt), ("le", le),
                                                   ("lt", lt)) if v is not None)
            allowed = f"a number {sign[name]} {bound:g}"
        elif gt is not None and lt is not None:
            allowed = f"a number between {low:g} and {high:g} (exclusive)"
        else:
            allowed = (f"a number in {'[' if gt is None else '('}{low:g}, "
                       f"{high:g}{']' if lt is None else ')'}")
    return Annotated[Float, Field(ge=ge, gt=gt, le=le, lt=lt), Allowed(allowed)]


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
def params_section(cls: type | None = None, *, frozen: bool = False) -> Any:
    """Make `cls` a params section: a strict pydantic dataclass refusing unknown keys, whose
    construction raises ConfigError (never pydantic's ValidationError)."""

    def wrap(cls: type) -> type:
        cls = pydantic_dataclass(cls, config=SECTION_CONFIG, frozen=frozen)
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
    `key: problem`, with the field's name as key (the stage prefixes the section's)."""
    errors = exc.errors(include_url=False)
    unknown = sorted(str(error["loc"][0]) for error in errors if error["type"] in UNKNOWN_KEY)
    if unknown:
        names = ", ".join(f.name for f in dataclasses.fields(cls) if f.init)
        allowed = f"allowed keys are {names}" if names else "the section takes no keys yet"
        return ConfigError(unknown[0], f"unknown key; {allowed}")
    key = errors[0]["loc"][0] if errors[0]["loc"] else "?"
    mine = [error for error in errors if error["loc"][:1] == (key,)]
    return ConfigError(str(key), _problem(cls, str(key), mine))


def _problem(cls: type, key: str, errors: list[dict]) -> str:
    """What is wrong with field `key`, from its errors (several: one per arm of a union)."""
    first = errors[0]
    value = _as_held(first["input"], cls.__pydantic_fields__[key].annotation)
    if any(error["type"] == "finite_number" for error in errors):
        return (f"{yaml_text(value)} is not allowed; expected {_allowed(cls, key, errors)}, "
                "finite (not .inf or .nan)")
    in_union = any(len(error["loc"]) > 1 and isinstance(error["loc"][1], str)
                   for error in errors)  # a union's errors are named by their arm
    if not in_union and first["type"] in EXPECTED_TYPE:
        return f"expected {EXPECTED_TYPE[first['type']]}, got {yaml_text(first['input'])}"
    return f"{yaml_text(value)} is not allowed; expected {_allowed(cls, key, errors)}"


def _as_held(value: Any, annotation: Any) -> Any:
    """`value` (as written: pydantic reports the input) in the YAML form the field takes it
    in, as the message shows it: 2 written for a number reads 2.0."""
    form = _yaml_float if _holds(float, annotation) else (
        _yaml_int if _holds(int, annotation) else None)
    if form is None:
        return value
    return [form(item) for item in value] if isinstance(value, list) else form(value)


def _holds(kind: type, annotation: Any) -> bool:
    """Whether `kind` is `annotation` or one of the types inside it."""
    return annotation is kind or any(_holds(kind, arg) for arg in typing.get_args(annotation))


def _allowed(cls: type, key: str, errors: list[dict]) -> str:
    """The field's own wording (`Allowed`), else one made from its Literal or union arms."""
    info = cls.__pydantic_fields__[key]
    allowed = _find_allowed([*info.metadata, info.annotation])
    if allowed is not None:
        return allowed
    if len(errors) == 1 and errors[0]["type"] == "literal_error":
        return f"one of {yaml_text(list(typing.get_args(info.annotation)))}"
    arms = []
    for error in errors:
        if error["type"] == "literal_error":
            arms.append(error["ctx"]["expected"].replace("'", ""))
        else:
            arms.append(EXPECTED_TYPE.get(error["type"], error["msg"]))
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
