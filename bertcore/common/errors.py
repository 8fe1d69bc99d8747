"""Errors that are the user's to fix: the CLI shows them as one line, never a traceback."""

from __future__ import annotations

import math


class BertError(Exception):
    """A problem with the user's input or environment: the message says what and what to do."""

    exit_code = 1


class ConfigError(BertError):
    """A parameter that is unknown, of the wrong type or out of range.

    `key` is the field's name; the stage that parsed the section prefixes it with the
    section's name, so the user reads `train.batch_size` as written in params.yaml.
    """

    exit_code = 2

    def __init__(self, key: str, problem: str):
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")

    def in_section(self, section: str) -> ConfigError:
        return ConfigError(f"{section}.{self.key}", self.problem)


def require(condition: bool, key: str, value: object, allowed: str) -> None:
    """Raise ConfigError for `key` unless `condition` holds; `allowed` says what would."""
    if not condition:
        raise ConfigError(key, f"{yaml_text(value)} is not allowed; expected {allowed}")


def yaml_text(value: object) -> str:
    """`value` as params.yaml writes it, for a message: null, true, .inf, [1, null], {a: 1}
    (Python's None, True, inf); a string keeps its quotes ('c'), as YAML may write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(yaml_text(item) for item in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_text(k)}: {yaml_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def first_line(exc: BaseException, limit: int = 1000) -> str:
    """The first line of an error, whole (MLflow's advice comes at its end) up to a limit."""
    text = str(exc).strip().splitlines()
    return text[0][:limit] if text else type(exc).__name__
