"""Check-N-Run's rules without MPI: the intermittent baseline rule, bits from expected restores,
chain assembly from the manifests, the row encoding, a corrupted diff named, and the agents the
factory composes writing, committing and restoring a chain in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mpiec.errors import ConfigError
from mpiec.launch.resolve import load_config
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.storage.checkpoint import CheckpointError, CheckpointStore
from mpiec.strategies import STRATEGIES
from mpiec.strategies.api.base import RecoveryPlan, Scope, ServerShard
from mpiec.strategies.checkpointing import PartWriter
from mpiec.strategies.checkpointing.kit import RestorerPart, SchedulePart, WriterPart
from mpiec.strategies.cnr import (
    ChainBook,
    ChainPart,
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
    assert cnr_bits(cfg_with(), "none") == 32
    assert cnr_bits(cfg_with(), "adaptive", "auto") == 2
    plan = "server:0@step=5;server:1@step=9;trainer:0@step=12;spare:0@step=3"  # spares do not restore
    assert expected_restores(cfg_with(kill=plan)) == 3
    assert cnr_bits(cfg_with(kill=plan), "adaptive", "auto") == 3
    assert cnr_bits(cfg_with(kill=plan), "kmeans", 8) == 8
    cfg = cfg_with()
    cfg.failures.mtbf_s, cfg.failures.timeout_s = 10.0, 100.0
    assert expected_restores(cfg) == 10 and cnr_bits(cfg, "symmetric") == 4


@pytest.mark.parametrize("params,key", [
    ({"diff": "twice"}, "diff"), ({"quantization": "fp8"}, "quantization"), ({"bits": 5}, "bits"),
    ({"bits": True}, "bits"), ({"interval": 0}, "interval"), ({"mode": "lazy"}, "mode")])
def test_invalid_params_are_refused(params, key):
    with pytest.raises(ConfigError, match=f"strategy.{key} must be"):
        CheckNRun.validate(cfg_with(**params))


def test_valid_params_pass():
    CheckNRun.validate(cfg_with(diff="intermittent", quantization="kmeans", bits=3))
    assert {"diff", "quantization", "bits", "interval", "keep"} <= CheckNRun.param_keys()
    p = CheckNRun(cfg_with()).params  # ckpt's keys and defaults, but the decoupled (async) write
    assert (p.mode, p.diff, p.quantization, p.bits) == ("async", "one-shot", "none", "auto")
    assert (p.interval, p.keep, p.first) == ("auto", 2, 10)


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


# -- the agents, in process ------------------------------------------------------------------------
class Env:
    """A ``RankEnv`` stand-in: what the agents read, and what they log and send."""

    def __init__(self, cfg: Any, slot: Slot, tmp: Path, rank: int = 1) -> None:
        self.cfg, self.slot, self.rank = cfg, slot, rank
        self.n_trainers, self.n_servers = cfg.layout.trainers, cfg.layout.servers
        self.epoch, self.completed, self.resume_from = 0, -1, ""
        self.out_path = tmp / "run.h5"
        self.events: list[tuple[str, int, str]] = []
        self.sent: list[Any] = []

    def now(self) -> float:
        return 0.0

    def event(self, kind: str, step: int, detail: str = "", at: float | None = None) -> None:
        self.events.append((kind, step, detail))

    def tell_monitor(self, payload: Any) -> None:
        self.sent.append(payload)


class Dense:
    def __init__(self) -> None:
        self.arrays = {"params": np.ones(4, np.float32)}

    def state(self) -> dict[str, np.ndarray]:
        return self.arrays

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.arrays = {k: np.array(v) for k, v in state.items()}

    def reset(self) -> None:
        self.arrays = {"params": np.zeros(4, np.float32)}


class Shard:
    """Global rows ``ids`` (−1: padding) of a table of ``dim`` weights and one optimizer column."""

    def __init__(self, ids: list[int], dim: int = 2) -> None:
        ids_ = np.array(ids, np.int64)
        self.shard = ServerShard(0, np.zeros((len(ids_), dim + 1), np.float32), ids_, dim)

    def state(self) -> dict[str, np.ndarray]:
        return {"global_rows": self.shard.global_rows, "table": self.shard.table}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.shard.table[:] = state["table"]

    def reset(self) -> None:
        self.shard.table[:] = 0

    def load_rows(self, rows: np.ndarray, table: np.ndarray) -> int:
        where = {int(g): i for i, g in enumerate(self.shard.global_rows) if g >= 0}
        mine = [(where[int(g)], row) for g, row in zip(rows, table, strict=True) if int(g) in where]
        for i, row in mine:
            self.shard.table[i] = row
        return len(mine)

    def n_rows(self) -> int:
        return int((self.shard.global_rows >= 0).sum())


def cnr_cfg(tmp_path: Path, *sets: str):
    return load_config("tiny", strategy="cnr", sets=[f"strategy.dir='{tmp_path / 'ck'}'", *sets])


def test_the_factory_composes_each_role_with_what_it_needs(tmp_path):
    cfg = cnr_cfg(tmp_path)
    strategy = CheckNRun(cfg)
    coord = strategy.coordinator(Env(cfg, Slot("monitor", 0), tmp_path, rank=0))
    t0 = strategy.trainer(Env(cfg, Slot(TRAINER, 0), tmp_path), Dense())
    t1 = strategy.trainer(Env(cfg, Slot(TRAINER, 1), tmp_path), Dense())
    s1 = strategy.server(Env(cfg, Slot(SERVER, 1), tmp_path), Shard([1, 3]))
    assert isinstance(coord.parts[-1], ChainBook) and (tmp_path / "ck").is_dir()
    assert [type(p) for p in t0.parts] == [SchedulePart, WriterPart, RestorerPart]
    assert t0.parts[1].writer.part == "trainer"
    assert t0.parts[1].writer.writer is not None  # async by default: the decoupled write
    assert [type(p) for p in t1.parts] == [RestorerPart] and t1.header_word(3) == 0
    assert [type(p) for p in s1.parts] == [WriterPart, ChainPart, RestorerPart]
    writer, chain = s1.parts[0].writer, s1.parts[1]
    assert isinstance(writer, PartWriter) and writer.part == "server-1" and chain.writer is writer
    assert writer.on_written is not None  # the chain link goes to the coordinator before the part
    assert writer.writer is not None and chain.tracker.diff == "one-shot" and chain.tracker.base == -1
    for w in (t0.parts[1].writer, writer):
        w.finish()


def test_the_header_word_carries_the_schedule_part_time_and_changed_rows(tmp_path):
    HEADER = CheckNRun(cnr_cfg(tmp_path)).header()
    names = ("schedule.checkpoint", "writer.part_ms", "cnr.changed_rows")
    word = HEADER.pack(**dict(zip(names, (1, (1 << 24) - 1, (1 << 38) - 1), strict=True)))
    assert 0 < word < 2**63
    assert [HEADER.get(word, f) for f in names] == [1, (1 << 24) - 1, (1 << 38) - 1]


def test_the_agents_write_a_chain_the_coordinator_commits_and_a_new_server_restores(tmp_path):
    cfg = cnr_cfg(tmp_path, "strategy.interval=2", "strategy.mode='sync'", "strategy.diff='consecutive'",
                  "strategy.keep=1")
    strategy = CheckNRun(cfg)
    HEADER = strategy.header()
    coord = strategy.coordinator(Env(cfg, Slot("monitor", 0), tmp_path, rank=0))
    envs = [Env(cfg, Slot(TRAINER, i), tmp_path) for i in range(2)] + [
        Env(cfg, Slot(SERVER, i), tmp_path) for i in range(2)]
    shards = [Shard([0, 2, 4, -1]), Shard([1, 3, 5])]
    agents = [strategy.trainer(envs[0], Dense()), strategy.trainer(envs[1], Dense()),
              strategy.server(envs[2], shards[0]), strategy.server(envs[3], shards[1])]
    changed = []
    for step in range(6):
        words = np.array([a.header_word(step) for a in agents])
        changed.append(list(HEADER.column(words[2:], "cnr.changed_rows")))
        for shard, agent in zip(shards, agents[2:], strict=True):  # the apply: one row a step
            slots = np.array([step % 3])
            shard.shard.table[slots] += step + 1
            agent.after_apply(step, slots, None, None)
        for a in agents:
            a.after_step(step, words)
            a.background(step)
        for env in envs:
            for m in env.sent:
                coord.on_message(env.slot, m)
            env.sent.clear()
    # checkpoints after steps 1, 3, 5: a baseline of all 3 + 3 rows, then the rows changed since the last
    assert [r[:2] + (r[5],) for r in coord.checkpoint_rows()] == [(1, "baseline", 6), (3, "diff", 4),
                                                                   (5, "diff", 4)]
    assert changed == [[0, 0], [1, 1], [0, 0], [1, 1], [2, 2], [3, 3]]  # since the baseline, before the step
    assert [e[:2] for e in envs[0].events] == [("checkpoint_start", s) for s in (1, 3, 5)]
    store = CheckpointStore(tmp_path / "ck")
    assert store.complete_steps() == [5, 3, 1]  # keep = 1, and every member of its chain
    link = store.manifest(5)["meta"]["cnr"]["parts"]["server-0"]
    assert {k: link[k] for k in ("kind", "prev", "baseline", "rows")} == {"kind": "diff", "prev": 3,
                                                                       "baseline": 1, "rows": 2}
    assert chain_of(store, 5, "server-0") == [(1, "baseline"), (3, "diff"), (5, "diff")]
    summary = coord.summary()
    assert summary["baseline_checkpoints"] == 1 and summary["diff_checkpoints"] == 2
    assert summary["rows_saved"] == 14 and summary["cnr_diff"] == "consecutive" and summary["cnr_bits"] == 32

    # a replacement server restores the chain bit-exactly, its tracking as right after writing step 5
    fresh = Shard([0, 2, 4, -1])
    server = strategy.server(Env(cfg, Slot(SERVER, 0), tmp_path), fresh)
    plan = RecoveryPlan(Scope.ROLLBACK, candidates=[5, 3, 1, -1], step=6)
    assert server.restore(plan, 5, True)
    np.testing.assert_array_equal(fresh.shard.table, shards[0].shard.table)
    assert (server.parts[1].tracker.base, server.parts[1].tracker.prev) == (1, 5)
    assert HEADER.get(server.header_word(6), "cnr.changed_rows") == 3  # slots 0, 1, 2 are in the diffs
    assert server.summary()["restores"] == 1
    assert "restore_row_error_max" not in server.summary()  # the error estimate is the writer's own
    assert agents[2].restore(plan, 3, False)  # the server that wrote the chain knows its (zero) error
    figures = agents[2].summary()
    assert figures["restores"] == 1 and figures["restore_row_error_max"] == 0
    assert set(summary) | set(agents[0].summary()) | set(figures) == set(strategy.summary_rules)
