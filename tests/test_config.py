"""Config: presets load, layers override in order, bad keys and values are one clear error."""

import pytest

from mpiec.config import PRESETS, Config, load_config, set_to_dict
from mpiec.errors import ConfigError, KillPlanError


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_load_and_validate(preset):
    cfg = load_config(preset)
    assert cfg.preset == preset
    assert cfg.n_ranks == 1 + cfg.layout.trainers + cfg.layout.servers + cfg.layout.spares
    assert len(cfg.data.cardinalities) == 26


def test_criteo_kaggle_has_the_real_cardinalities():
    cfg = load_config("criteo-kaggle")
    assert cfg.data.cardinalities[2] == 10131227 and sum(cfg.data.cardinalities) == 33762577


def test_precedence_file_then_shortcuts_then_set(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[training]\nsteps = 7\nbatch_size = 32\n[layout]\nservers = 3\n")
    cfg = load_config("tiny", config_file=f, steps=9, sets=["training.steps=11", "model.dim=4"])
    assert (cfg.training.steps, cfg.training.batch_size, cfg.layout.servers, cfg.model.dim) == (11, 32, 3, 4)
    cfg = load_config("tiny", config_file=f, steps=9)
    assert cfg.training.steps == 9


def test_json_round_trip():
    cfg = load_config("tiny", sets=["training.seed=5"], kill=["server:1@step=3"])
    again = Config.from_json(cfg.to_json())
    assert again == cfg


@pytest.mark.parametrize("assignment, needle", [
    ("training.stesp=3", "unknown config key 'training.stesp' (did you mean 'steps'?)"),
    ("foo=1", "unknown config key 'foo'"),
    ("training.steps=0", "training.steps must be >= 1"),
    ("training.steps=abc", "training.steps must be an integer"),
    ("training.lr=-1", "training.lr must be > 0"),
    ("layout.servers=0", "layout.servers must be >= 1"),
    ("data.source=parquet", "data.source must be"),
    ("training", "--set expects key=value"),
    ("model=3", "'model' is a section"),
    ("strategy.name=nope", "unknown strategy 'nope'"),
    ("strategy.k=4", "unknown config key 'strategy.k' for strategy 'none'"),
    ("layout.parity_ranks=1", "layout.parity_ranks must be 0 or the strategy's parity count r = 0"),
])
def test_bad_values_name_the_key(assignment, needle):
    with pytest.raises(ConfigError) as info:
        load_config("tiny", sets=[assignment])
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_data_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("tiny", sets=["data.source='criteo-tsv'", f"data.path='{tmp_path}/x.tsv'"])


def test_bad_toml_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("[training\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config("tiny", config_file=f)


def test_set_values_are_toml_literals():
    assert set_to_dict("model.bottom=[8, 4]") == {"model": {"bottom": [8, 4]}}
    assert set_to_dict("output.dir=out/x") == {"output": {"dir": "out/x"}}
    assert set_to_dict("strategy.k=4") == {"strategy": {"params": {"k": 4}}}


def test_kill_plan_checked_at_load():
    with pytest.raises(KillPlanError, match="server:9 does not exist"):
        load_config("tiny", kill=["server:9@step=3"])


def test_written_json_is_accepted_as_config_file(tmp_path):
    cfg = load_config("tiny", sets=["training.seed=9", "layout.servers=3"])
    f = tmp_path / "run.json"
    f.write_text(cfg.to_json())
    assert load_config(config_file=f) == cfg
