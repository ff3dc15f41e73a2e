"""The resolve step: typed strategy keys for code outside the strategy, the directories a strategy
writes, the storage model under a strategy's own write cap."""

from pathlib import Path

import pytest

from mpiec.config import load_layers
from mpiec.errors import ConfigError
from mpiec.launch.resolve import config_from_json, resolve, storage_model, typed_params
from mpiec.strategies import get_strategy_class
from mpiec.strategies.api.base import Strategy


def test_typed_params_fill_in_the_defaults_and_refuse_what_the_strategy_does():
    cfg = load_layers("tiny", strategy="cnr", sets=["strategy.quantization='kmeans'"])
    p = typed_params(cfg)
    assert (p.quantization, p.bits, p.dir) == ("kmeans", "auto", "")
    with pytest.raises(ConfigError, match=r"'strategy.intervl' for strategy 'ckpt' \(did you mean 'interv"):
        typed_params(load_layers("tiny", strategy="ckpt", sets=["strategy.intervl=3"]))


def test_every_rank_resolves_its_json_config_as_the_launcher_did():
    cfg = load_layers("tiny", strategy="ckpt", kill=["server:1@step=3"])
    run = config_from_json(cfg.to_json(), memory=False)
    assert run.cfg == cfg and run.strategy_cls is get_strategy_class("ckpt") and len(run.kills) == 1
    cfg.layout.parity_ranks = 1  # a layout the strategy refuses: the rank refuses it too
    with pytest.raises(ConfigError, match="layout.parity_ranks must be 0"):
        config_from_json(cfg.to_json(), memory=False)


def test_directories_follow_the_typed_dir_of_the_strategy_and_of_its_fallback(tmp_path):
    out = tmp_path / "run.h5"
    assert Strategy(load_layers("tiny")).directories(out) == []
    sets = ["strategy.disk_every=4", "strategy.dir='/x/snap'"]
    ecsnap = resolve(load_layers("tiny", strategy="ecsnap", sets=sets), False).strategy()
    assert ecsnap.directories(out) == [("checkpoint directory (strategy.dir)", Path("/x/snap"))]
    assert ecsnap.fallback is not None and ecsnap.fallback.params.dir == "/x/snap"
    sets = ["strategy.fallback='ckpt'", "strategy.fallback_interval=5"]
    ecrm = resolve(load_layers("tiny", strategy="ecrm", sets=sets), False).strategy()
    assert ecrm.directories(out) == [("checkpoint directory", tmp_path / "run.ckpt")]


def test_the_storage_model_takes_the_strategy_write_cap_only_where_it_has_one():
    capped = load_layers("tiny", strategy="ckpt", sets=["strategy.bandwidth_mb_s=4"])
    assert storage_model(capped).write_mb_s == 4
    assert not storage_model(load_layers("tiny", strategy="ecrm")).emulated
