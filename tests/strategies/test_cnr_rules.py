"""Check-N-Run's rules without MPI: the intermittent baseline rule, bits from expected restores,
chain assembly from the manifests, the row encoding, and a corrupted diff named."""

from __future__ import annotations

import numpy as np
import pytest

from mpiec.checkpoint import CheckpointError, CheckpointStore
from mpiec.config import load_config
from mpiec.errors import ConfigError
from mpiec.strategies import STRATEGIES
from mpiec.strategies.cnr import (
    CheckNRun,
    bits_for_restores,
    chain_of,
    cnr_bits,
    decode_rows,
    encode_rows,
    expected_restores,
    intermittent_rebaseline,
)


def test_registered():
    assert STRATEGIES["cnr"] is CheckNRun


def test_intermittent_rule_is_the_papers_inequality():
    # one-shot diffs growing 0.2, 0.3, 0.4, 0.5: 1 + S_1..S_i <= (i + 1) S_i first holds at i = 4
    grow = [0.2, 0.3, 0.4, 0.5]
    got = [intermittent_rebaseline(grow[:i]) for i in range(1, 5)]
    assert got == [False, False, False, True]  # 1.2 > 0.4, 1.5 > 0.9, 1.9 > 1.6, 2.4 <= 2.5
    assert not intermittent_rebaseline([])
    assert intermittent_rebaseline([1.0])  # a diff as large as a full checkpoint: a baseline
    assert not intermittent_rebaseline([0.01] * 50)  # small, flat diffs never re-baseline


@pytest.mark.parametrize("restores,bits", [(0, 2), (1, 2), (1.5, 3), (3, 3), (4, 4), (20, 4), (21, 8),
                                           (500, 8)])
def test_bits_from_expected_restores(restores, bits):
    assert bits_for_restores(restores) == bits


def cfg_with(**params):
    kill = params.pop("kill", None)
    cfg = load_config(preset="tiny", strategy="cnr", sets=["layout.spares=2"], kill=[kill] if kill else None)
    cfg.strategy.params.update(params)
    return cfg


def test_bits_auto_uses_the_kill_plan():
    assert expected_restores(cfg_with()) == 0
    assert cnr_bits(cfg_with(), {"quantization": "none"}) == 32
    assert cnr_bits(cfg_with(), {"quantization": "adaptive", "bits": "auto"}) == 2
    plan = "server:0@step=5;server:1@step=9;trainer:0@step=12;spare:0@step=3"  # spares do not restore
    assert expected_restores(cfg_with(kill=plan)) == 3
    assert cnr_bits(cfg_with(kill=plan), {"quantization": "adaptive", "bits": "auto"}) == 3
    assert cnr_bits(cfg_with(kill=plan), {"quantization": "kmeans", "bits": 8}) == 8
    cfg = cfg_with()
    cfg.failures.mtbf_s, cfg.failures.timeout_s = 10.0, 100.0
    assert expected_restores(cfg) == 10 and cnr_bits(cfg, {"quantization": "symmetric"}) == 4


@pytest.mark.parametrize("params", [{"diff": "twice"}, {"quantization": "fp8"}, {"bits": 5}, {"bits": True}])
def test_invalid_params_are_refused(params):
    with pytest.raises(ConfigError):
        CheckNRun.validate_params(cfg_with(**params))


def test_valid_params_pass():
    CheckNRun.validate_params(cfg_with(diff="intermittent", quantization="kmeans", bits=3))
    assert {"diff", "quantization", "bits", "interval", "keep"} <= CheckNRun.param_keys()


def write(store, step, kind, prev, rows, table, method="none", bits=32):
    arrays, _ = encode_rows(table, 4, method, bits)
    info = store.write_part(step, "server-0", {"global_rows": rows, **arrays})
    meta = {"cnr": {"diff": "consecutive", "quantization": method, "bits": bits, "dim": 4,
                    "parts": {"server-0": {"kind": kind, "prev": prev, "baseline": 0, "rows": len(rows),
                                           "sizes": []}}}}
    store.commit(step, [info], meta)


def apply_chain(store, step):
    out = np.zeros((6, 5), dtype=np.float32)
    for m, _kind in chain_of(store, step, "server-0"):
        part = store.read_part(m, "server-0")
        cnr = store.manifest(m)["meta"]["cnr"]
        out[part["global_rows"]] = decode_rows(part, 4, cnr["quantization"], cnr["bits"])
    return out


def test_chain_assembly_and_lossless_restore(tmp_path):
    rng = np.random.default_rng(0)
    store = CheckpointStore(tmp_path)
    truth = rng.standard_normal((6, 5)).astype(np.float32)
    write(store, 4, "baseline", 4, np.arange(6), truth.copy())
    for step, rows in ((9, [1, 3]), (14, [3, 5]), (19, [0])):  # consecutive diffs
        truth[rows] = rng.standard_normal((len(rows), 5)).astype(np.float32)
        write(store, step, "diff", {9: 4, 14: 9, 19: 14}[step], np.array(rows), truth[rows])
    assert chain_of(store, 19, "server-0") == [(4, "baseline"), (9, "diff"), (14, "diff"), (19, "diff")]
    assert chain_of(store, 4, "server-0") == [(4, "baseline")]
    np.testing.assert_array_equal(apply_chain(store, 19), truth)  # bit-exact without quantization


def test_missing_member_and_foreign_checkpoint_are_named(tmp_path):
    store = CheckpointStore(tmp_path)
    table = np.ones((2, 5), dtype=np.float32)
    write(store, 9, "diff", 4, np.arange(2), table)  # its baseline 4 was never committed
    with pytest.raises(CheckpointError, match="chain of step 9 .* needs checkpoint 4"):
        chain_of(store, 9, "server-0")
    info = store.write_part(20, "server-0", {"table": table})
    store.commit(20, [info], {})
    with pytest.raises(CheckpointError, match="no Check-N-Run chain"):
        chain_of(store, 20, "server-0")


def test_corrupted_diff_is_detected_and_named(tmp_path):
    store = CheckpointStore(tmp_path)
    write(store, 4, "baseline", 4, np.arange(6), np.ones((6, 5), dtype=np.float32))
    write(store, 9, "diff", 4, np.array([2]), np.full((1, 5), 2, dtype=np.float32))
    f = store.step_dir(9) / "server-0.table.npy"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"step-000000009/server-0\.table\.npy: corrupted"):
        apply_chain(store, 9)


@pytest.mark.parametrize("method", ["symmetric", "asymmetric", "adaptive", "kmeans"])
def test_quantized_rows_keep_the_optimizer_state_exact(method):
    rng = np.random.default_rng(1)
    rows = np.hstack([rng.standard_normal((50, 4)) * 0.1, rng.random((50, 1))]).astype(np.float32)
    arrays, err = encode_rows(rows, 4, method, 4)
    assert "table" not in arrays and arrays["state"].dtype == np.float32
    back = decode_rows(arrays, 4, method, 4)
    np.testing.assert_array_equal(back[:, 4], rows[:, 4])  # optimizer state: fp32, unquantized
    np.testing.assert_allclose(np.linalg.norm(back[:, :4] - rows[:, :4], axis=1), err, rtol=1e-5, atol=1e-7)
    assert 0 < err.max() < 0.1


def test_empty_diff_encodes(tmp_path):
    for method in ("none", "adaptive"):
        arrays, err = encode_rows(np.zeros((0, 5), dtype=np.float32), 4, method, 4)
        assert decode_rows(arrays, 4, method, 4).shape == (0, 5) and err.size == 0
