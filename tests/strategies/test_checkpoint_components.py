"""The checkpoint components (``strategies.checkpointing``) and ``ckpt``'s agents, in process (no MPI):
schedule, part writer, manifest committer, restorer, and the factory that composes them."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mpiec.errors import ConfigError
from mpiec.launch.resolve import load_config
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.storage.checkpoint import CheckpointError, CheckpointStore
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.api.compose import ComposedCoordinator, ComposedServer, ComposedTrainer
from mpiec.strategies.checkpointing import (
    Interval,
    ManifestCommitter,
    PartWriter,
    Restorer,
    Schedule,
    full_parts,
    load_shard,
    rollback_plan,
)
from mpiec.strategies.checkpointing.kit import RestorerPart, SchedulePart, WriterPart
from mpiec.strategies.ckpt import FullCheckpoint


class Env:
    """A ``RankEnv`` stand-in: what the components read, and what they log and send."""

    def __init__(self, cfg: Any, slot: Slot, tmp: Path, rank: int = 1) -> None:
        self.cfg, self.slot, self.rank = cfg, slot, rank
        self.n_trainers, self.n_servers = cfg.layout.trainers, cfg.layout.servers  # the live layout
        self.epoch, self.completed, self.resume_from = 0, -1, ""
        self.out_path = tmp / "run.h5"
        self.t = 0.0
        self.events: list[tuple[str, int, str]] = []
        self.sent: list[Any] = []

    def now(self) -> float:
        return self.t

    def event(self, kind: str, step: int, detail: str = "", at: float | None = None) -> None:
        self.events.append((kind, step, detail))

    def tell_monitor(self, payload: Any) -> None:
        self.sent.append(payload)


class Dense:
    def __init__(self, value: float = 1.0) -> None:
        self.arrays = {"params": np.full(8, value, np.float32)}

    def state(self) -> dict[str, np.ndarray]:
        return self.arrays

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.arrays = {k: np.array(v) for k, v in state.items()}

    def reset(self) -> None:
        self.arrays = {"params": np.zeros(8, np.float32)}


class Shard(Dense):
    """Rows ``ids`` (global ids) of a 2-column table whose row g holds (g, g)."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = np.array(ids, np.int64)
        self.table = np.repeat(self.ids[:, None], 2, axis=1).astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        return {"global_rows": self.ids, "table": self.table}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.ids, self.table = np.array(state["global_rows"]), np.array(state["table"])

    def load_rows(self, rows: np.ndarray, table: np.ndarray) -> int:
        mine = np.isin(rows, self.ids)
        for g, row in zip(rows[mine], table[mine], strict=True):
            self.table[np.searchsorted(self.ids, g)] = row
        return int(mine.sum())

    def n_rows(self) -> int:
        return len(self.ids)


@pytest.fixture
def cfg():
    return load_config("tiny", strategy="ckpt")


def schedule(interval: Interval, env: Env, first: int = 10, total: int = 40,
             mtbf: tuple[float | None, float | None] = (None, 24.0)) -> Schedule:
    return Schedule(interval, first=first, total_steps=total, mtbf=mtbf, now=env.now)


# -- schedule ----------------------------------------------------------------------------------------

def test_interval_rules_and_their_description():
    assert Interval.given(7, 0.0) == Interval("given", 7, None)
    assert Interval.given("auto", 2.5) == Interval("given-seconds", None, 2.5)
    assert Interval.given("auto", 0.0) == Interval("young")
    assert Interval.given(7, 2.5).rule == "given"  # steps decide when both are given
    assert [Interval.given(*a).describe() for a in ((7, 0.0), ("auto", 2.5), ("auto", 0.0))] == [
        "7 steps", "2.5 s", "auto (Young)"]


def test_given_steps_checkpoint_after_every_multiple_but_never_after_the_last_step(cfg, tmp_path):
    s = schedule(Interval("given", 10), Env(cfg, Slot(TRAINER, 0), tmp_path))
    assert [step for step in range(40) if s.due(step)] == [9, 19, 29]  # not 39: the run ends there


def test_given_seconds_follow_the_clock_from_the_last_checkpoint_or_recovery(cfg, tmp_path):
    env = Env(cfg, Slot(TRAINER, 0), tmp_path)
    s = schedule(Interval("given-seconds", seconds=2.0), env)
    env.t = 1.9
    assert not s.due(3)
    env.t = 2.0
    assert s.due(3)
    s.started(3)
    assert s.last_step == 3 and s.taken == [3] and not s.due(4)
    env.t = 3.0
    s.restarted()  # a recovery: the interval counts from now
    env.t = 4.5
    assert not s.due(5)


def test_young_takes_its_first_checkpoint_to_measure_the_save_time(cfg, tmp_path):
    env = Env(cfg, Slot(TRAINER, 0), tmp_path)
    assert [st for st in range(40) if schedule(Interval("young"), env).due(st)][0] == 3  # a tenth of 40
    assert [st for st in range(400) if schedule(Interval("young"), env, total=400).due(st)][0] == 9


def test_observe_keeps_step_times_and_the_slowest_part(cfg, tmp_path):
    env = Env(cfg, Slot(TRAINER, 0), tmp_path)
    s = schedule(Interval("young"), env)
    for i, us in enumerate(([0, 0], [1500, 20000], [3000, 100])):
        env.t = 0.5 * i
        s.observe(np.array(us))
    assert list(s.step_times) == [0.5, 0.5] and s.t_save == pytest.approx(0.02)
    s.observe(np.array([], dtype=np.int64))  # no server word: nothing to learn
    assert s.t_save == pytest.approx(0.02)


def test_figures_name_the_rule_and_the_interval_in_steps(cfg, tmp_path):
    """(Young's figures: ``test_cpr_pls.test_interval_rule_and_resolved_steps_in_the_summary_keys``.)"""
    env = Env(cfg, Slot(TRAINER, 0), tmp_path)
    given = schedule(Interval("given", 7), env).figures()
    assert given["checkpoint_interval_steps"] == 7 and math.isnan(given["checkpoint_interval_s"])
    secs = schedule(Interval("given-seconds", seconds=2.0), env)
    secs.step_times.extend([0.5] * 3)  # no checkpoint taken yet: seconds over the step time
    assert secs.figures() == {"checkpoint_interval_steps": 4, "checkpoint_interval_rule": "given-seconds",
                              "checkpoint_interval_s": 2.0}


def test_header_fields_round_trip_and_part_us_saturates(cfg, tmp_path):
    HEADER = FullCheckpoint(cfg).header()
    sched, writer = HEADER.view("schedule"), HEADER.view("writer")
    words = np.array([sched.pack(checkpoint=1), 0, writer.pack(part_us=1234), writer.pack(part_us=7)])
    assert writer.get(words[0], "schedule.checkpoint") == 1
    assert list(sched.column(words[2:], "writer.part_us")) == [1234, 7]
    assert not HEADER.column(words[2:], "schedule.checkpoint").any()
    w = PartWriter(Env(cfg, Slot(SERVER, 0), tmp_path), CheckpointStore(tmp_path / "ck"), "server-0", dict)
    w.max_part_s = 1e9  # a part taking 30 years still fits the field
    assert writer.pack(part_us=w.part_us()) > 0


# -- part writer -------------------------------------------------------------------------------------

def test_sync_writer_reports_the_part_with_its_rows_and_stall(cfg, tmp_path):
    env = Env(cfg, Slot(SERVER, 1), tmp_path)
    shard = Shard([1, 4, 9])
    w = PartWriter(env, CheckpointStore(tmp_path / "ck"), "server-1", shard.state, rows=shard.n_rows)
    w.save(9)
    [(kind, step, epoch, info, figs)] = env.sent
    assert (kind, step, epoch, info["part"]) == ("part", 9, 0, "server-1") and info["bytes"] > 0
    assert figs["rows"] == 3 and figs["stall_s"] == figs["total_s"] > 0
    f = w.figures()
    assert f["checkpoint_parts_sent"] == 1 and f["checkpoint_max_part_s"] == pytest.approx(info["seconds"])
    assert f["checkpoint_critical_s"] >= f["checkpoint_write_s"] > 0 and w.part_us() > 0


class FullDisk(CheckpointStore):
    def write_part(self, step: int, part: str, arrays: Any) -> Any:
        raise CheckpointError(f"{part}: no space left on device")


def test_a_failed_write_is_an_event_and_a_word_to_the_coordinator(cfg, tmp_path):
    env = Env(cfg, Slot(TRAINER, 0), tmp_path)
    w = PartWriter(env, FullDisk(tmp_path / "ck", warn=False), "trainer", Dense().state)
    w.save(4)
    assert env.sent == [("failed", 4, 0, {"part": "trainer"}, {})]
    assert env.events == [("checkpoint_fail", 4, "trainer: no space left on device")]
    assert w.figures()["checkpoint_parts_sent"] == 0


def test_background_writes_report_their_snapshot_stall_and_drop_an_ended_epoch(cfg, tmp_path):
    env = Env(cfg, Slot(TRAINER, 0), tmp_path)
    dense = Dense(2.0)
    w = PartWriter(env, CheckpointStore(tmp_path / "ck"), "trainer", dense.state, background=True)
    w.save(9)
    dense.arrays["params"][:] = 5.0  # training goes on: the snapshot is what gets written
    while w.writer.busy:  # finished, not yet polled
        time.sleep(0.001)
    w.save(19)
    env.epoch = 1  # a failure ended epoch 0: checkpoint 19 can never complete
    w.finish()
    assert [m[1] for m in env.sent] == []  # neither belongs to the current epoch
    assert not w.stalls and not w.submitted and w.figures()["checkpoint_write_s"] > 0
    assert float(np.load(tmp_path / "ck" / "step-000000009" / "trainer.params.npy")[0]) == 2.0
    env.epoch, env.sent = 1, []
    w2 = PartWriter(env, CheckpointStore(tmp_path / "ck2"), "trainer", dense.state, background=True)
    w2.save(29)
    w2.finish()
    [(kind, step, epoch, info, figs)] = env.sent
    assert (kind, step, epoch) == ("part", 29, 1) and figs["total_s"] == pytest.approx(
        figs["stall_s"] + info["seconds"])


# -- manifest committer ------------------------------------------------------------------------------

def written(store: CheckpointStore, step: int, servers: int = 2, epoch: int = 0) -> list[tuple]:
    """The writers' messages of a checkpoint of ``step`` whose parts are on disk."""
    msgs = []
    for part in sorted(full_parts(servers)):
        info = store.write_part(step, part, {"x": np.arange(4, dtype=np.float32)})
        msgs.append(("part", step, epoch, info.to_dict(), {"rows": 10, "stall_s": 0.1, "total_s": 0.2}))
    return msgs


def test_the_manifest_is_committed_once_every_part_is_there(cfg, tmp_path):
    env = Env(cfg, Slot("monitor", 0), tmp_path, rank=0)
    store = CheckpointStore(tmp_path / "ck")
    c = ManifestCommitter(env, store, full_parts(2), keep=2)
    msgs = written(store, 9)
    for m in msgs[:-1]:
        assert c.on_message(m)
    assert store.complete_steps() == [] and not c.rows
    c.on_message(msgs[-1])
    assert store.complete_steps() == [9] and store.manifest(9)["meta"]["servers"] == 2
    assert c.rows == [(9, "full", 3 * 144, 0.2, 32, 30, 0.1)] and c.committed_bytes == 3 * 144
    assert env.events[-1][0] == "checkpoint_end" and not c.pending and not c.part_figures
    assert c.figures() == {"checkpoint_critical_s": pytest.approx(0.1), "checkpoints": 1,
                           "checkpoint_bytes": 3 * 144}
    assert not c.on_message(("cnr", 9, 0, {}))  # not a writer's: left to the strategy


def test_parts_of_an_ended_epoch_or_of_a_dropped_recovery_never_commit(cfg, tmp_path):
    env = Env(cfg, Slot("monitor", 0), tmp_path, rank=0)
    store = CheckpointStore(tmp_path / "ck")
    c = ManifestCommitter(env, store, full_parts(2), keep=2)
    for m in written(store, 9, epoch=0):
        env.epoch = 1
        c.on_message(m)
    assert not c.pending and store.complete_steps() == []
    env.epoch = 0
    msgs = written(store, 19)
    c.on_message(msgs[0])
    c.drop_pending()
    for m in msgs[1:]:
        c.on_message(m)
    assert store.complete_steps() == [] and c.pending  # the dropped part never arrives again


def test_a_failed_part_abandons_the_step(cfg, tmp_path):
    env = Env(cfg, Slot("monitor", 0), tmp_path, rank=0)
    store = CheckpointStore(tmp_path / "ck")
    c = ManifestCommitter(env, store, full_parts(2), keep=2)
    msgs = written(store, 9)
    for m in msgs[:-1]:
        c.on_message(m)
    c.on_message(("failed", 9, 0, {"part": msgs[-1][3]["part"]}, {}))
    assert not store.step_dir(9).exists() and not c.rows and not c.pending and not c.failed_parts


def test_prune_keeps_what_the_hooks_need_and_a_rollback_drops_newer_checkpoints(cfg, tmp_path):
    env = Env(cfg, Slot("monitor", 0), tmp_path, rank=0)
    store = CheckpointStore(tmp_path / "ck")
    c = ManifestCommitter(env, store, full_parts(2), keep=1, meta=lambda step: {"extra": step},
                          classify=lambda step, parts: ("diff", 8), needs=lambda kept: {9})
    for step in (9, 19, 29):
        for m in written(store, step):
            c.on_message(m)
    assert store.complete_steps() == [29, 9]  # 19 pruned, 9 needed by the kept one
    assert store.manifest(29)["meta"]["extra"] == 29 and [r[1] for r in c.rows] == ["diff"] * 3
    assert [r[4] for r in c.rows] == [8, 8, 8]
    c.drop_newer(9)
    assert store.complete_steps() == [9]


# -- restorer ---------------------------------------------------------------------------------------

def test_trainer_restores_its_dense_part_or_the_initial_state(cfg, tmp_path):
    env = Env(cfg, Slot(TRAINER, 1), tmp_path)
    store = CheckpointStore(tmp_path / "ck")
    store.commit(9, [store.write_part(9, "trainer", Dense(3.0).state())])
    dense = Dense(7.0)
    r = Restorer.for_trainer(env, store, dense)
    plan = RecoveryPlan(Scope.ROLLBACK, step=25)
    assert r.restore(plan, 9) and float(dense.arrays["params"][0]) == 3.0
    assert r.restore(plan, -1) and float(dense.arrays["params"][0]) == 0.0
    assert not r.restore(plan, 19)  # no such checkpoint
    assert env.events[-1][:2] == ("restore_failed", 25)
    f = r.figures()
    assert f["restores"] == 2 and f["restore_s"] >= f["restore_read_s"] > 0


def test_server_restores_its_shard_also_from_another_number_of_servers(cfg, tmp_path):
    store = CheckpointStore(tmp_path / "ck")
    ids = {0: [0, 2, 4], 1: [1, 3, 5]}  # written by 2 servers
    infos = [store.write_part(9, f"server-{i}", Shard(rows).state()) for i, rows in ids.items()]
    store.commit(9, infos, {"servers": 2})
    two = Shard(ids[1])
    two.table[:] = -1
    load_shard(store, 9, two, 1, servers=2)
    assert two.table[:, 0].tolist() == [1, 3, 5]
    three = Shard([2, 3])  # as server 1 of 3: its rows from every part
    three.table[:] = -1
    load_shard(store, 9, three, 1, servers=3)
    assert three.table[:, 0].tolist() == [2, 3]
    env = Env(cfg, Slot(SERVER, 0), tmp_path)
    assert Restorer.for_server(env, store, Shard([0, 2, 4])).restore(RecoveryPlan(Scope.ROLLBACK), 9)
    stranger = Shard([2, 99])  # a row no part holds: the restore is refused
    with pytest.raises(CheckpointError, match="holds 1 of this server's 2 rows"):
        load_shard(store, 9, stranger, 0, servers=3)


def test_rollback_candidates_are_the_checkpoints_up_to_the_committed_step_then_the_start(tmp_path):
    store = CheckpointStore(tmp_path / "ck")
    for step in (9, 19, 29):
        store.commit(step, [store.write_part(step, "trainer", {"x": np.zeros(2)})])
    plan = rollback_plan(store, 25)
    assert plan.scope is Scope.ROLLBACK and plan.candidates == [19, 9, -1]
    assert rollback_plan(store, -5).candidates == [-1]


# -- the strategy: params and agents ------------------------------------------------------------------

@pytest.mark.parametrize("assignment,message", [
    ("strategy.interval=0", "strategy.interval must be >= 1"),
    ("strategy.interval='often'", "strategy.interval must be an integer or 'auto'"),
    ("strategy.keep=0", "strategy.keep must be >= 1"),
    ("strategy.mode='lazy'", "strategy.mode must be 'sync' or 'async'"),
    ("strategy.bandwidth_mb_s=-1", "strategy.bandwidth_mb_s must be >= 0"),
    ("strategy.on_trainer_failure='ignore'", "strategy.on_trainer_failure must be 'peer' or 'rollback'"),
    ("strategy.intervall=3", "unknown config key 'strategy.intervall'"),
])
def test_bad_params_name_their_key(assignment, message):
    with pytest.raises(ConfigError, match=message):
        FullCheckpoint.validate(load_config("tiny", strategy="ckpt", sets=[assignment]))


def test_the_factory_gives_trainer_0_the_schedule_and_every_writer_its_part(tmp_path):
    cfg = load_config("tiny", strategy="ckpt", sets=[f"strategy.dir='{tmp_path / 'ck'}'",
                                                     "strategy.mode='async'"])
    strategy = FullCheckpoint(cfg)
    coord = strategy.coordinator(Env(cfg, Slot("monitor", 0), tmp_path, rank=0))
    t0 = strategy.trainer(Env(cfg, Slot(TRAINER, 0), tmp_path), Dense())
    t1 = strategy.trainer(Env(cfg, Slot(TRAINER, 1), tmp_path), Dense())
    s1 = strategy.server(Env(cfg, Slot(SERVER, 1), tmp_path), Shard([1, 3]))
    HEADER = strategy.header()
    assert isinstance(coord, ComposedCoordinator) and (tmp_path / "ck").is_dir()
    assert isinstance(t0, ComposedTrainer)
    assert [type(p) for p in t0.parts] == [SchedulePart, WriterPart, RestorerPart]
    t0_writer = t0.parts[1].writer
    assert t0_writer.part == "trainer" and t0_writer.writer is not None  # async
    assert [type(p) for p in t1.parts] == [RestorerPart] and t1.header_word(3) == 0
    assert isinstance(s1, ComposedServer) and s1.parts[0].writer.part == "server-1"
    assert HEADER.get(t0.header_word(1), "schedule.checkpoint") == 0
    assert coord.parts[0].committer.expected == full_parts(2)
    for writer in (t0_writer, s1.parts[0].writer):
        writer.finish()


def test_the_agents_take_a_checkpoint_together_and_commit_it(tmp_path):
    cfg = load_config("tiny", strategy="ckpt", sets=[f"strategy.dir='{tmp_path / 'ck'}'",
                                                     "strategy.interval=5"])
    strategy = FullCheckpoint(cfg)
    menv = Env(cfg, Slot("monitor", 0), tmp_path, rank=0)
    coord = strategy.coordinator(menv)
    envs = [Env(cfg, Slot(TRAINER, i), tmp_path) for i in range(2)] + [
        Env(cfg, Slot(SERVER, i), tmp_path) for i in range(2)]
    agents = [strategy.trainer(envs[0], Dense()), strategy.trainer(envs[1], Dense()),
              strategy.server(envs[2], Shard([0, 2])), strategy.server(envs[3], Shard([1, 3]))]
    for step in range(6):
        words = np.array([a.header_word(step) for a in agents])
        assert bool(strategy.header().get(words[0], "schedule.checkpoint")) == (step == 4)
        for a in agents:
            a.after_step(step, words)
            a.background(step)
    for env in envs:
        for m in env.sent:
            coord.on_message(env.slot, m)
    assert coord.checkpoint_rows()[0][:2] == (4, "full") and coord.resume_steps() == [4]
    assert [e[:2] for e in envs[0].events] == [("checkpoint_start", 4)] and not envs[1].events
    assert envs[0].events[0][2] == "sync full checkpoint"
    summary = coord.summary()
    assert summary["checkpoints"] == 1 and summary["checkpoint_interval"] == "5 steps"
    assert set(summary) | set(agents[0].summary()) | set(agents[2].summary()) == set(strategy.summary_rules)


def test_only_lost_embedding_state_rolls_back(tmp_path):
    cfg = load_config("tiny", strategy="ckpt", sets=[f"strategy.dir='{tmp_path / 'ck'}'"])
    coord = FullCheckpoint(cfg).coordinator(Env(cfg, Slot("monitor", 0), tmp_path, rank=0))
    everyone = [Slot(TRAINER, 0), Slot(TRAINER, 1), Slot(SERVER, 0), Slot(SERVER, 1)]

    def failure(*dead: Slot) -> Failure:
        alive = [s for s in everyone if s not in dead]
        return Failure(step=10, committed=9, dead=list(dead), survivors=alive)

    assert coord.plan(failure(Slot(TRAINER, 1))).scope is Scope.COMMITTED
    assert coord.plan(failure(Slot(SERVER, 0))).candidates == [-1]
    assert coord.plan(failure(Slot(TRAINER, 0), Slot(TRAINER, 1))).scope is Scope.ROLLBACK
    forced = load_config("tiny", strategy="ckpt", sets=[f"strategy.dir='{tmp_path / 'ck2'}'",
                                                        "strategy.on_trainer_failure='rollback'"])
    coord = FullCheckpoint(forced).coordinator(Env(forced, Slot("monitor", 0), tmp_path, rank=0))
    assert coord.plan(failure(Slot(TRAINER, 1))).scope is Scope.ROLLBACK


def test_the_background_writer_counts_its_own_cpu(cfg, tmp_path):
    env = Env(cfg, Slot(TRAINER, 0), tmp_path)
    big = {"params": np.ones(1 << 20, np.float32)}  # 4 MiB: crc32 and the write take CPU
    w = PartWriter(env, CheckpointStore(tmp_path / "ck"), "trainer", lambda: big, background=True)
    assert w.figures()["checkpoint_writer_cpu_s"] == 0.0
    w.save(3)
    w.finish()
    assert 0.0 < w.figures()["checkpoint_writer_cpu_s"] <= w.figures()["checkpoint_write_s"] + 0.05
    sync = PartWriter(env, CheckpointStore(tmp_path / "ck2"), "trainer", lambda: big)
    sync.save(3)  # on the training thread: in the step's CPU, not the writer's
    assert sync.figures()["checkpoint_writer_cpu_s"] == 0.0
