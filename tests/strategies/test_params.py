"""Typed strategy parameters: unknown keys, types, choices, unions and ranges, one line each."""

from dataclasses import dataclass
from typing import Literal

import pytest

from mpiec.errors import ConfigError
from mpiec.strategies.api.params import NoParams, keys, param, parse_params


@dataclass(frozen=True)
class P:
    interval: int | Literal["auto"] = param("auto", "steps between checkpoints, or auto", ge=1)
    mode: Literal["sync", "async"] = param("sync", "how parts are written")
    rate: float = param(0.5, "a fraction", gt=0, le=1)
    verify: bool = param(False, "check on restore")
    dir: str = param("", "where")


def test_defaults_and_values_come_out_typed():
    assert parse_params(P, {}, "s") == P()
    p = parse_params(P, {"interval": 7, "mode": "async", "rate": 1, "verify": True}, "s")
    assert (p.interval, p.mode, p.rate, p.verify) == (7, "async", 1.0, True) and isinstance(p.rate, float)


@pytest.mark.parametrize("raw,message", [
    ({"intervall": 3}, r"unknown config key 'strategy.intervall' for strategy 's' "
                       r"\(did you mean 'interval'\?\)"),
    ({"interval": 0}, r"strategy.interval must be >= 1, got 0"),
    ({"interval": "often"}, r"strategy.interval must be an integer or 'auto', got 'often'"),
    ({"interval": True}, r"strategy.interval must be an integer or 'auto', got True"),
    ({"mode": "lazy"}, r"strategy.mode must be 'sync' or 'async', got 'lazy'"),
    ({"rate": 0}, r"strategy.rate must be > 0 and <= 1, got 0"),
    ({"rate": float("nan")}, r"strategy.rate must be a finite number"),
    ({"verify": 1}, r"strategy.verify must be true or false, got 1"),
    ({"dir": 3}, r"strategy.dir must be a string, got 3"),
])
def test_bad_values_get_one_line_naming_the_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_params(P, raw, "s")


def test_a_strategy_without_keys_says_so():
    with pytest.raises(ConfigError, match="'strategy.k' for strategy 'none'; it has no keys of its own"):
        parse_params(NoParams, {"k": 1}, "none")


def test_keys_list_names_types_defaults_and_help_in_order():
    listed = keys(P)
    assert [k.name for k in listed] == ["interval", "mode", "rate", "verify", "dir"]
    assert (listed[0].type, listed[0].default, listed[0].help) == ("int|auto", "auto",
                                                                    "steps between checkpoints, or auto")
    assert listed[1].type == "sync|async"
