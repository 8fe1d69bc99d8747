"""Errors that are the user's to fix: the CLI shows them as one line, never a traceback."""

from __future__ import annotations


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
        raise ConfigError(key, f"{value!r} is not allowed; expected {allowed}")
