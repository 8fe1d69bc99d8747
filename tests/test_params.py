"""params.yaml parsing: overrides, types, ranges and unknown keys are one-line errors."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from bertcore.errors import ConfigError, require
from stages.params import flatten, load_params, parse_section


@dataclasses.dataclass(frozen=True)
class Example:
    size: int = 8
    rate: float = 0.1
    name: str = "x"
    flag: bool = False
    mode: Literal["a", "b"] = "a"
    limit: int | None = None

    def __post_init__(self):
        require(self.size > 0, "size", self.size, "a positive integer")
        require(0 < self.rate < 1, "rate", self.rate, "a number between 0 and 1")


def write(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_section_types_and_overrides(tmp_path):
    path = write(tmp_path, "train:\n  size: 4\n  rate: 1e-2\n")
    params = load_params(path, ["train.flag=true", "train.mode=b", "train.limit=7"])
    cfg = parse_section(params, "train", Example)
    assert cfg == Example(size=4, rate=0.01, flag=True, mode="b", limit=7)
    assert flatten(params)["train.rate"] == "1e-2"  # YAML 1.1 keeps 1e-2 a string; parsing fixes it


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.sise=3", "train.sise: unknown key; allowed keys are size"),
        ("train.size=abc", "train.size: expected an integer"),
        ("train.size=-1", "train.size: -1 is not allowed; expected a positive integer"),
        ("train.rate=2", "train.rate: 2.0 is not allowed"),
        ("train.mode=c", "train.mode: 'c' is not allowed; expected one of ['a', 'b']"),
        ("train.flag=maybe", "train.flag: expected true or false"),
    ],
)
def test_bad_values_name_the_key(tmp_path, override, fragment):
    params = load_params(write(tmp_path, "train: {}\n"), [override])
    with pytest.raises(ConfigError) as info:
        parse_section(params, "train", Example)
    assert fragment in str(info.value)
    assert info.value.exit_code == 2


def test_unknown_section_and_malformed_override(tmp_path):
    path = write(tmp_path, "train: {}\n")
    with pytest.raises(ConfigError, match="trian: unknown section"):
        load_params(path, ["trian.size=3"])
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        load_params(path, ["size=3"])
