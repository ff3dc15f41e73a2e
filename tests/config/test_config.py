"""Config: presets load, layers override in order, bad keys and values are one clear error."""

import re

import pytest

from mpiec.config import PRESETS, Config, check_memory, local_ranks, set_to_dict
from mpiec.errors import ConfigError, KillPlanError
from mpiec.launch.resolve import load_config

CLUSTER_PRESETS = ("mlperf-dlrmv2",)  # resolve anywhere, run only where the memory is


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_load_and_validate(preset):
    cfg = load_config(preset, memory=preset not in CLUSTER_PRESETS)
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


@pytest.mark.parametrize("assignment, needle", [
    ("training.lr=inf", "training.lr must be a finite number, got inf"),
    ("training.lr=nan", "training.lr must be a finite number, got nan"),
    ("training.dense_lr=-inf", "training.dense_lr must be a finite number"),
    ("data.zipf_exponent=nan", "data.zipf_exponent must be a finite number"),
    ("failures.mtbf_s=inf", "failures.mtbf_s must be a finite number"),
    ("strategy.foo=inf", "strategy.foo must be a finite number"),
    ("layout.trainers=100000", "at most 4096 ranks in all"),
    ("layout.spares=5000", "at most 4096 ranks in all"),
    ("training.steps=100000000000000000", "training.steps must be >= 1 and <= 1e+09"),
    ("failures.timeout_s=1e300", "failures.timeout_s must be >= 0 and <= 1e+09"),
    ('output.name="a\\u0000b"', "no control characters"),
    ('output.name="a\\nb"', "got 'a\\nb'"),
    ('output.name="a\\tb"', "no control characters"),
    ('output.name="\\u001b[31mred"', "no control characters"),
    ("output.name=' '", "no leading or trailing blanks"),
    ("output.name=' x'", "no leading or trailing blanks"),
    ("output.name='.hidden'", "no leading '.'"),
    (f"output.name='{'n' * 201}'", "at most 200 bytes"),
    (f"output.name='{'é' * 101}'", "at most 200 bytes"),
])
def test_bad_values_are_refused_in_one_line(assignment, needle):
    with pytest.raises(ConfigError) as info:
        load_config("tiny", sets=[assignment])
    assert needle in str(info.value)
    assert str(info.value).isprintable()


def test_plain_names_pass():
    assert load_config("tiny", sets=[f"output.name='{'n' * 200}'"]).output.name == "n" * 200
    assert load_config("tiny", sets=["output.name='tiny run é-1'"]).output.name == "tiny run é-1"


def test_json_configs_with_huge_numbers_are_refused(tmp_path):
    f = tmp_path / "big.json"
    f.write_text('{"model": {"dim": ' + "9" * 30 + "}}")
    with pytest.raises(ConfigError, match="model.dim must fit in 64 bits"):
        load_config(config_file=f)
    f.write_text('{"training": {"lr": ' + "9" * 400 + "}}")
    with pytest.raises(ConfigError, match="training.lr must be a finite number"):
        load_config(config_file=f)


@pytest.mark.parametrize("assignment, key", [
    ("training.batch_size=1000000000000", "training.batch_size = 1000000000000"),
    ("model.dim=1000000000", "model.dim = 1000000000"),
    ("data.eval_samples=1000000000000", "data.eval_samples = 1000000000000"),
    ("data.cardinalities=[100000000000000]", "data.cardinalities: 100,000,000,000,000 rows"),
])
def test_configs_that_cannot_fit_in_memory_name_the_key_and_the_estimate(assignment, key):
    with pytest.raises(ConfigError) as info:
        load_config("tiny", sets=[assignment])
    message = str(info.value)
    assert "not enough memory" in message and key in message and "MemTotal" in message
    assert re.search(r"about [0-9.]+ [KMGTPE]iB per (trainer|server)", message), message


def test_memory_is_shared_by_the_ranks_of_one_host(monkeypatch):
    cfg = load_config("criteo-kaggle")
    check_memory(cfg, total=8 << 30)  # 9 ranks with ~0.5 GiB shards
    with pytest.raises(ConfigError, match="the 9 ranks on this host would need about") as info:
        check_memory(cfg, total=3 << 30)
    assert "embedding shard (data.cardinalities: 33,762,577 rows" in str(info.value)
    check_memory(cfg, total=3 << 30, on_host=2)  # spread over nodes: two ranks here
    with pytest.raises(ConfigError, match="one rank would need"):
        check_memory(cfg, total=256 << 20, on_host=1)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    assert local_ranks(9) == 2
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_SIZE")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "3,2(x3)")
    assert local_ranks(9) == 3
    load_config("laptop")  # every preset fits this machine's own memory
    check_memory(load_config("laptop"), total=2 << 30)  # and a small CI machine


def test_a_directory_is_not_reported_as_missing(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, not a file"):
        load_config("tiny", config_file=tmp_path)
    with pytest.raises(ConfigError, match="is a directory, not a data file"):
        load_config("tiny", sets=["data.source='criteo-tsv'", f"data.path='{tmp_path}'"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("tiny", config_file=tmp_path / "nope.toml")


def test_replacement_is_spare_spawn_or_shrink():
    assert load_config(preset="tiny", sets=["layout.replacement='spawn'"]).layout.replacement == "spawn"
    assert load_config(preset="tiny", sets=["layout.replacement='shrink'"]).layout.replacement == "shrink"
    with pytest.raises(ConfigError, match="layout.replacement must be 'spare', 'spawn' or 'shrink'"):
        load_config(preset="tiny", sets=["layout.replacement='magic'"])
    with pytest.raises(ConfigError, match="layout.grow_back_steps = 5 needs layout.replacement = 'shrink'"):
        load_config(preset="tiny", sets=["layout.grow_back_steps=5"])
    assert load_config(preset="tiny", sets=["layout.spawn_grace_s=2.5"]).layout.spawn_grace_s == 2.5
    held = ["layout.replacement='shrink'", "layout.grow_back_steps=5", "layout.spares=1"]
    assert load_config(preset="tiny", sets=[*held, "layout.grow_from='spares'"]).layout.grow_from == "spares"
    for sets, got in ((["layout.spares=1"], "'spare', 0, 1"), (held[:1] + held[2:], "'shrink', 0, 1"),
                      ([*held[:2], "layout.spares=0"], "'shrink', 5, 0")):
        with pytest.raises(ConfigError, match=f"layout.grow_from = 'spares' needs .*\\(got {got}\\)"):
            load_config(preset="tiny", sets=[*sets, "layout.grow_from='spares'"])
    with pytest.raises(ConfigError, match="layout.grow_from must be 'spawn' or 'spares'"):
        load_config(preset="tiny", sets=["layout.grow_from='nodes'"])
    for bad in ("0", "-1", "inf", "nan", "1e9"):
        with pytest.raises(ConfigError, match="layout.spawn_grace_s must be (a finite number|> 0 and <= 36)"):
            load_config(preset="tiny", sets=[f"layout.spawn_grace_s={bad}"])


SHRINK = ["layout.spares=0", "layout.replacement='shrink'", "layout.servers=4"]


@pytest.mark.parametrize("strategy", ["ecsnap", "cpr", "cpr-mfu", "cpr-ssu"])
def test_a_strategy_that_cannot_shrink_is_refused_up_front_when_a_server_may_die(strategy):
    """Issue 36 item 5: from what the strategy declares (``Strategy.shrink_refusal``), before any rank
    starts; a trainer kill, or kills the spares cover, still run."""
    sets = [*SHRINK, f"strategy.name='{strategy}'"]
    for kill in ("server:1@step=15+2ms", "node:3@step=5", "random:mtbf=5s,targets=server"):
        with pytest.raises(ConfigError, match=f"kill plan '.*' may kill a server with no spare left: "
                                              f"strategy {strategy} cannot restore rows onto fewer"):
            load_config(preset="tiny", sets=sets, kill=[kill])
    load_config(preset="tiny", sets=sets, kill=["trainer:1@step=15"])
    load_config(preset="tiny", sets=[*sets, "layout.spares=1"], kill=["server:1@step=15"])
    with pytest.raises(ConfigError, match="may kill a server with no spare left"):
        load_config(preset="tiny", sets=[*sets, "layout.spares=1"],
                    kill=["trainer:1@step=5;server:1@step=15"])
    for ok in ("ckpt", "cnr", "log", "ecrm", "none"):  # (none: lost at the first kill anyway)
        load_config(preset="tiny", sets=[*SHRINK, f"strategy.name='{ok}'"], kill=["server:1@step=15"])
    with pytest.raises(ConfigError, match="dedicated parity ranks .* cannot shrink"):
        load_config(preset="tiny", sets=[*SHRINK, "strategy.name='ecrm'", "layout.parity_ranks=1"],
                    kill=["server:1@step=15"])


def test_virtual_trainers_are_a_power_of_two_covering_the_trainers():
    assert load_config(preset="tiny").virtual_trainers == 4
    eight = load_config(preset="tiny", sets=["layout.trainers=8", "training.batch_size=16"])
    assert eight.virtual_trainers == 8
    for sets, message in ((["layout.virtual_trainers=6"], "must be a power of two >= layout.trainers"),
                          (["layout.virtual_trainers=1"], "power of two >= layout.trainers \\(2\\)"),
                          (["layout.virtual_trainers=256"], "more than the global batch \\(128")):
        with pytest.raises(ConfigError, match=message):
            load_config(preset="tiny", sets=sets)


def test_multi_hot_is_one_bag_size_per_table():
    cfg = load_config("tiny")
    assert cfg.data.multi_hot == [] and cfg.data.bags == [1] * 26
    cfg = load_config("tiny", sets=[f"data.multi_hot={[2] * 26}"])
    assert cfg.data.bags == [2] * 26 and Config.from_json(cfg.to_json()) == cfg
    for value, needle in [("[1, 2]", "data.multi_hot must give one bag size per table (26 in "
                                     "data.cardinalities), got 2"),
                          (str([1] * 25 + [0]), "data.multi_hot[25] must be >= 1 and <= 4096, got 0"),
                          (str([1] * 25 + [5000]), "data.multi_hot[25] must be >= 1 and <= 4096, got 5000"),
                          ("3", "data.multi_hot must be a list"),
                          ("[1.5]", "data.multi_hot[0] must be an integer")]:
        with pytest.raises(ConfigError) as info:
            load_config("tiny", sets=[f"data.multi_hot={value}"])
        assert needle in str(info.value) and "\n" not in str(info.value)


def test_multi_hot_needs_the_synthetic_source(tmp_path):
    f = tmp_path / "day.tsv"
    f.write_text("")
    with pytest.raises(ConfigError, match="data.multi_hot > 1 needs data.source = 'synthetic'"):
        load_config("tiny", sets=["data.source='criteo-tsv'", f"data.path='{f}'",
                                  f"data.multi_hot={[2] * 26}"])


def test_mlperf_dlrmv2_preset_resolves_and_is_refused_here_only_at_run_time():
    cfg = load_config("mlperf-dlrmv2", memory=False)
    d, m = cfg.data, cfg.model
    assert len(d.cardinalities) == 26 and max(d.cardinalities) == 40_000_000
    assert sum(d.cardinalities) == 204_184_588 and d.cardinalities.count(40_000_000) == 5
    assert d.multi_hot == [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
    assert sum(d.bags) == 214
    # 13-512-256-128 bottom (the last width is model.dim), 1024-1024-512-256-1 top (the 1 implicit)
    assert (m.dim, m.bottom, m.top) == (128, [512, 256], [1024, 1024, 512, 256])
    assert cfg.global_batch == 65536
    # the memory estimate counts every id of a bag: a 2 GiB host cannot hold its step rows
    with pytest.raises(ConfigError, match=r"214 ids"):
        check_memory(cfg, total=2 << 30, on_host=1)


@pytest.mark.parametrize("strategy, assignment, key", [
    ("log", "strategy.log_memory_mb=1e300", "strategy.log_memory_mb"),
    ("ckpt", "strategy.interval_s=1e300", "strategy.interval_s"),
    ("ckpt", "strategy.bandwidth_mb_s=1e12", "strategy.bandwidth_mb_s"),
    ("cpr", "strategy.interval=100000000000", "strategy.interval"),
    ("ecrm", "strategy.verify_every=4000000000", "strategy.verify_every"),
    ("ecsnap", "strategy.disk_every=4000000000", "strategy.disk_every"),
])
def test_huge_strategy_values_are_refused_for_every_strategy(strategy, assignment, key):
    """Issue 12, item 15: log_memory_mb=1e300 or interval_s=1e300 passed their strategy's check, the
    run trained every step, then the result file could not hold what was derived from it (rc 3)."""
    with pytest.raises(ConfigError) as info:
        load_config("tiny", strategy=strategy, sets=[assignment])
    assert f"{key} must be at most 1e+09 in magnitude" in str(info.value)
    assert "\n" not in str(info.value)


def test_strategy_values_up_to_the_bound_pass():
    cfg = load_config("tiny", strategy="log", sets=["strategy.log_memory_mb=1e9", "strategy.interval_s=1e9"])
    assert cfg.strategy.params == {"log_memory_mb": 1e9, "interval_s": 1e9}


def test_a_base_config_takes_the_presets_place_under_the_file_and_the_sets(tmp_path):
    """``--resume``: the checkpoint's resolved config is the bottom layer, and names the preset."""
    saved = load_config("tiny", sets=["model.dim=4", "training.steps=30"]).to_dict()
    f = tmp_path / "more.toml"
    f.write_text("[training]\nsteps = 50\n")
    cfg = load_config(config_file=f, sets=["layout.servers=3"], base=saved)
    assert cfg.preset == "tiny" and cfg.model.dim == 4  # not the tiny preset's 8
    assert cfg.training.steps == 50 and cfg.layout.servers == 3
    assert saved["training"]["steps"] == 30  # the caller's dict is left alone


def test_state_changes_name_each_key_a_checkpoint_cannot_take():
    from mpiec.config import state_changes

    saved = load_config("tiny").to_dict()
    assert state_changes(saved, load_config("tiny", sets=["layout.servers=3", "training.steps=90"])) == []
    changed = state_changes(saved, load_config("tiny", sets=["model.dim=16", "training.optimizer='sgd'",
                                                             "data.cardinalities=[5, 5]"]))
    assert changed == ["model.dim: 8 in the checkpoint, 16 now",
                       "data.cardinalities: 26 values in the checkpoint, 2 now",
                       "training.optimizer: 'adagrad' in the checkpoint, 'sgd' now"]
    cards = list(saved["data"]["cardinalities"])
    cards[3] += 1
    (one,) = state_changes(saved, load_config("tiny", sets=[f"data.cardinalities={cards}"]))
    assert one == f"data.cardinalities[3]: {cards[3] - 1} in the checkpoint, {cards[3]} now"
