"""One schema for every key: types, ranges, choices with a "did you mean", and --explain's lines."""

from dataclasses import dataclass
from typing import Literal

import pytest

from mpiec.config import Config, core_keys, load_layers, schema
from mpiec.config.schema import key
from mpiec.errors import ConfigError
from mpiec.launch.resolve import explain, load_config, resolve


@dataclass
class Section:
    count: int = key(2, "how many", ge=1, le=8)
    rate: float = key(0.5, "a fraction", gt=0, lt=1)
    kind: str = key("fast", "which", choices=("fast", "slow", "careful"))
    widths: list[int] = key(help="each >= 1", default_factory=lambda: [4], ge=1)
    cap: float = key(-1.0, "MB/s", ge=0, le=100, unset=(-1.0, "the profile's"))
    mode: Literal["a", "b"] | int = key("a", "a choice or a number")


def parse(raw):
    return schema.parse(Section, raw, "sec.", lambda name, known: f"unknown 'sec.{name}'")


def test_values_come_out_typed_and_defaults_fill_in():
    s = parse({"count": 3, "rate": 1 - 1e-9, "widths": [1, 2], "mode": 7})
    assert (s.count, s.kind, s.widths, s.cap, s.mode) == (3, "fast", [1, 2], -1.0, 7)
    assert isinstance(parse({"rate": 0.25}).rate, float)


@pytest.mark.parametrize("raw, message", [
    ({"count": 0}, "sec.count must be >= 1 and <= 8, got 0"),
    ({"count": 2.0}, "sec.count must be an integer, got 2.0"),
    ({"count": True}, "sec.count must be an integer, got True"),
    ({"rate": 1}, "sec.rate must be > 0 and < 1, got 1"),
    ({"rate": float("inf")}, "sec.rate must be a finite number, got inf"),
    ({"rate": 10**400}, "sec.rate must be a finite number, got a 1329-bit integer"),
    ({"kind": "carefull"}, "sec.kind must be 'fast', 'slow' or 'careful', got 'carefull' "
                           "(did you mean 'careful'?)"),
    ({"widths": [3, 0]}, "sec.widths[1] must be >= 1, got 0"),
    ({"widths": [3, "x"]}, "sec.widths[1] must be an integer, got 'x'"),
    ({"widths": 3}, "sec.widths must be a list, got 3"),
    ({"cap": -2}, "sec.cap must be -1 (the profile's) or in [0, 100], got -2"),
    ({"mode": "c"}, "sec.mode must be 'a' or 'b' or an integer, got 'c'"),
    ({"nope": 1}, "unknown 'sec.nope'"),
])
def test_bad_values_are_one_line_naming_the_key(raw, message):
    with pytest.raises(ConfigError) as info:
        parse(raw)
    assert str(info.value) == message


def test_a_misspelt_core_choice_gets_a_did_you_mean():
    with pytest.raises(ConfigError, match=r"layout.replacement must be 'spare', 'spawn' or 'shrink', "
                                          r"got 'shrnk' \(did you mean 'shrink'\?\)"):
        load_layers("tiny", sets=["layout.replacement='shrnk'"])
    with pytest.raises(ConfigError, match=r"did you mean 'pfs-node'"):
        load_layers("tiny", sets=["storage.profile='pfs-nod'"])


def test_every_core_key_is_declared_with_help_and_a_valid_default():
    declared = core_keys()
    assert len({k.name for k in declared}) == len(declared)
    for k in declared:
        assert k.help, f"{k.name} has no help"
    Config()  # the defaults themselves
    from mpiec.config import check_keys

    check_keys(Config())  # every default in its own range and choices


def test_the_config_knows_no_strategy_and_resolve_adds_the_checks_across_sections():
    cfg = load_layers("tiny", sets=["strategy.name='nope'"])  # the config alone cannot tell
    with pytest.raises(ConfigError, match="unknown strategy 'nope'"):
        resolve(cfg, memory=False)
    run = resolve(load_layers("tiny", strategy="ckpt", sets=["strategy.interval=7"]), memory=False)
    assert run.params.interval == 7 and run.strategy().params == run.params
    with pytest.raises(ConfigError, match="layout.parity_ranks must be 0 or the strategy's parity count"):
        load_config("tiny", sets=["layout.parity_ranks=1"], memory=False)


def test_explain_prints_type_default_range_and_help():
    (line,) = explain("training.steps")
    assert line.startswith("training.steps  int = 1000  (>= 1 and <= 1e+09)  training steps")
    (line,) = explain("layout.replacement")
    assert "str = spare  (one of spare, spawn, shrink)" in line
    (line,) = explain("layout.grow_from")
    assert "str = spawn  (one of spawn, spares)" in line and "held waiting for the growth" in line
    assert [k.name for k in core_keys() if k.name.startswith("storage.")] == \
        [line.split()[0] for line in explain("storage")]
    assert len(explain()) == len(core_keys()) + 1  # every core key, then where strategy keys are


def test_explain_covers_strategy_keys_and_misspellings():
    lines = explain("strategy.interval")
    assert any(line.startswith("strategy.interval (ckpt)  ") for line in lines)
    (ckpt,) = explain("ckpt.interval")
    assert [ckpt.split()] == [line.split() for line in lines if "(ckpt)" in line]
    with pytest.raises(ConfigError, match=r"'training.stesp' \(did you mean 'training.steps'\?\)"):
        explain("training.stesp")


def test_explain_from_the_command_line(capsys):
    from mpiec.cli import main

    assert main(["config", "--explain", "data.source"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("data.source  str = synthetic  (one of synthetic, criteo-tsv, criteo-npz)")
