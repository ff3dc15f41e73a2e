"""``log`` without MPI: the update log (memory bound, spill files, trim, checksummed records), the
typed keys, and the agents the factory composes (ckpt's agents, the log, the plan, the restore)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mpiec.errors import ConfigError
from mpiec.launch.resolve import load_config
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing.kit import CheckpointParams, RestorerPart, SchedulePart, WriterPart
from mpiec.strategies.ckpt import FullCheckpoint
from mpiec.strategies.log import UpdateLog
from mpiec.strategies.log.spill import HEADER, SpillCorrupt, encode_record, read_record
from mpiec.strategies.log.store import LogStore, record_bytes
from mpiec.strategies.log.strategy import CORRUPT_ENV, LogCoordinator, LogServer, LogTrainer

DIM, RANKS = 4, 5


def push(step: int, rows: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A push of ``step``: distinct contents per step, so a wrong record is noticed."""
    rng = np.random.default_rng(step)
    slots = rng.integers(0, 1000, rows).astype(np.int64)
    counts = np.array([0, 0, rows // 2, rows - rows // 2, 0], dtype=np.int64)
    grads = rng.standard_normal((rows, DIM)).astype(np.float32)
    return slots, counts, grads


def same(a, b) -> bool:
    return all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(a, b, strict=True))


def test_records_stay_in_memory_under_the_bound(tmp_path):
    log = LogStore(10 * record_bytes(push(0)), tmp_path / "spill")
    for s in range(5):
        log.append(s, *push(s))
    assert log.steps() == [0, 1, 2, 3, 4] and log.spilled_records == 0
    assert not (tmp_path / "spill").exists()  # nothing spilled: no directory either
    assert same(log[3], push(3))


def test_the_oldest_records_spill_and_read_back_exactly(tmp_path):
    one = record_bytes(push(0))
    log = LogStore(3 * one, tmp_path / "spill")
    for s in range(10):
        log.append(s, *push(s))
        assert log.memory_bytes <= 3 * one
    assert sorted(log.memory) == [7, 8, 9]  # memory holds the newest steps
    assert log.spilled_records == 7 and log.peak_memory_bytes == 3 * one
    assert log.spilled_bytes == sum(len(encode_record(s, *push(s))) for s in range(7))
    for s in range(10):
        assert s in log and same(log[s], push(s))
    assert log.read_bytes == 7 * one
    assert 10 not in log
    with pytest.raises(KeyError):
        log[10]


def test_a_zero_bound_spills_every_record(tmp_path):
    log = LogStore(0, tmp_path / "spill")
    for s in range(3):
        log.append(s, *push(s))
    assert log.memory_bytes == 0 and log.peak_memory_bytes == 0 and log.spilled_records == 3
    assert same(log[1], push(1))


def test_trim_drops_the_covered_steps_and_deletes_their_files(tmp_path):
    spill = tmp_path / "spill"
    log = LogStore(0, spill)
    for s in range(5):  # steps 0-4 in the first file
        log.append(s, *push(s))
    log.trim(4)  # checkpoint after step 4 committed
    assert len(log) == 0 and list(spill.iterdir()) == []
    for s in range(5, 12):
        log.append(s, *push(s))
    log.trim(7)  # the file holding 5..11 keeps 8..11: it stays
    assert log.steps() == [8, 9, 10, 11]
    (first,) = spill.iterdir()
    log.append(12, *push(12))  # what spills after a trim goes to a new file
    assert len(list(spill.iterdir())) == 2
    log.trim(11)  # the first file has no live record left: deleted
    assert [p.name for p in spill.iterdir()] != [first.name] and len(list(spill.iterdir())) == 1
    assert log.steps() == [12] and same(log[12], push(12))
    assert log.disk_bytes() == len(encode_record(12, *push(12)))
    log.close()
    assert not spill.exists()


def test_drop_after_forgets_the_steps_to_re_execute_and_a_re_append_replaces(tmp_path):
    log = LogStore(2 * record_bytes(push(0)), tmp_path / "spill")
    for s in range(6):
        log.append(s, *push(s))
    log.drop_after(3)
    assert log.steps() == [0, 1, 2, 3]
    other = push(100)
    log.append(3, *other)  # step 3 executed again (after an undo) with these gradients
    assert same(log[3], other) and log.steps() == [0, 1, 2, 3]
    log.append(4, *push(4))
    assert all(same(log[s], push(s)) for s in (0, 1, 2, 4))


def test_verify_names_a_missing_step(tmp_path):
    log = LogStore(0, tmp_path / "spill")
    log.append(5, *push(5))
    assert log.verify([5]) == ""
    assert "no record of step 6" in log.verify([5, 6])


@pytest.mark.parametrize("where", ["header", "payload", "crc"])
def test_a_corrupted_spill_record_is_detected_and_named(where, tmp_path):
    log = LogStore(0, tmp_path / "spill")
    for s in range(3):
        log.append(s, *push(s))
    seg, offset = log.spilled[1]
    at = {"header": offset + 8, "payload": offset + HEADER.size + 30, "crc": offset + HEADER.size - 2}[where]
    raw = bytearray(seg.path.read_bytes())
    raw[at] ^= 0x40
    seg.path.write_bytes(bytes(raw))
    problem = log.verify([0, 1, 2])
    assert str(seg.path) in problem and f"record at byte {offset} (step 1)" in problem
    with pytest.raises(SpillCorrupt, match="step 1"):
        log[1]
    assert same(log[0], push(0)) and same(log[2], push(2))  # the neighbours are intact


def test_a_truncated_spill_file_is_detected(tmp_path):
    log = LogStore(0, tmp_path / "spill")
    log.append(0, *push(0))
    seg, _ = log.spilled[0]
    raw = seg.path.read_bytes()
    seg.path.write_bytes(raw[:-7])
    with pytest.raises(SpillCorrupt, match="truncated payload"):
        log[0]


def test_record_format_round_trip_and_layout(tmp_path):
    slots, counts, grads = push(42, rows=3)
    data = encode_record(42, slots, counts, grads)
    assert data[:4] == b"MLOG" and len(data) == HEADER.size + 8 * RANKS + 8 * 3 + 4 * 3 * DIM
    f = tmp_path / "one.spill"
    f.write_bytes(b"x" * 11 + data)
    assert same(read_record(f, 11, 42), (slots, counts, grads))
    with pytest.raises(SpillCorrupt, match="holds step 42"):
        read_record(f, 11, 41)  # the index pointed at another step's record
    with pytest.raises(SpillCorrupt, match="not a log record"):
        read_record(f, 0, 42)


# -- the strategy: keys and agents (in process) --------------------------------------------------------

class Env:
    """A ``RankEnv`` stand-in: what the agents read, and what they log and send."""

    def __init__(self, cfg: Any, slot: Slot, tmp: Path, rank: int = 1) -> None:
        self.cfg, self.slot, self.rank, self.first_rank = cfg, slot, rank, rank
        self.n_trainers, self.n_servers = cfg.layout.trainers, cfg.layout.servers  # the live layout
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
        self.arrays = {"params": np.ones(8, np.float32)}

    def state(self) -> dict[str, np.ndarray]:
        return self.arrays

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.arrays = {k: np.array(v) for k, v in state.items()}

    def reset(self) -> None:
        self.arrays = {"params": np.zeros(8, np.float32)}


class Shard(Dense):
    def __init__(self, ids: list[int]) -> None:
        self.ids = np.array(ids, np.int64)
        self.table = np.repeat(self.ids[:, None], 2, axis=1).astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        return {"global_rows": self.ids, "table": self.table}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.ids, self.table = np.array(state["global_rows"]), np.array(state["table"])

    def reset(self) -> None:
        self.table = np.zeros_like(self.table)

    def n_rows(self) -> int:
        return len(self.ids)


def part_of(agent: Any, cls: type) -> Any:
    """The part of class ``cls`` of a composed agent."""
    (found,) = [p for p in agent.parts if isinstance(p, cls)]
    return found


def log_cfg(tmp_path: Path, *sets: str) -> Any:
    return load_config("tiny", strategy="log", sets=[f"strategy.dir='{tmp_path / 'ck'}'", *sets])


def test_the_keys_are_ckpts_and_the_logs_with_the_same_defaults():
    p = UpdateLog(load_config("tiny", strategy="log")).params
    assert isinstance(p, CheckpointParams) and UpdateLog.param_keys() == FullCheckpoint.param_keys() | {
        "log_memory_mb", "log_dir"}
    assert (p.log_memory_mb, p.log_dir, p.interval, p.keep, p.mode) == (256.0, "", "auto", 2, "sync")
    assert set(FullCheckpoint.summary_rules) < set(UpdateLog.summary_rules)


@pytest.mark.parametrize("assignment, message", [
    ("strategy.log_memory_mb=-1", "strategy.log_memory_mb must be >= 0"),
    ("strategy.log_memory_mb='lots'", "strategy.log_memory_mb must be a finite number"),
    ("strategy.log_dir=3", "strategy.log_dir must be a string"),
    ("strategy.log_memory=3", "unknown config key 'strategy.log_memory'.*did you mean 'log_memory_mb'"),
    ("strategy.interval=0", "strategy.interval must be >= 1"),
])
def test_bad_params_name_their_key(assignment, message):
    with pytest.raises(ConfigError, match=message):
        UpdateLog.validate(load_config("tiny", strategy="log", sets=[assignment]))


def test_the_factory_composes_ckpts_agents_and_gives_each_trainer_a_log(tmp_path, monkeypatch):
    monkeypatch.setenv(CORRUPT_ENV, "1")
    cfg = log_cfg(tmp_path, f"strategy.log_dir='{tmp_path / 'lg'}'", "strategy.log_memory_mb=0.5")
    strategy = UpdateLog(cfg)
    coord = strategy.coordinator(Env(cfg, Slot("monitor", 0), tmp_path, rank=0))
    t0 = strategy.trainer(Env(cfg, Slot(TRAINER, 0), tmp_path, rank=1), Dense())
    t1 = strategy.trainer(Env(cfg, Slot(TRAINER, 1), tmp_path, rank=2), Dense())
    s1 = strategy.server(Env(cfg, Slot(SERVER, 1), tmp_path, rank=4), Shard([1, 3]))
    assert isinstance(part_of(coord, LogCoordinator), LogCoordinator) and (tmp_path / "ck").is_dir()
    assert [type(p) for p in t0.parts] == [SchedulePart, WriterPart, RestorerPart, LogTrainer]
    assert [type(p) for p in t1.parts] == [RestorerPart, LogTrainer]
    log0, log1 = part_of(t0, LogTrainer), part_of(t1, LogTrainer)
    assert log0.corrupt and not log1.corrupt  # the test hook is trainer 0's
    assert log1.log.dir.parent == tmp_path / "lg" / "run.log"
    assert log1.log.dir.name.startswith("trainer-1-rank2-")
    assert log0.log.limit == int(0.5 * 2**20)
    assert coord.summary()["log_memory_limit_bytes"] == int(0.5 * 2**20)
    assert [type(p) for p in s1.parts] == [WriterPart, LogServer] and s1.parts[0].writer.part == "server-1"
    # the log's part restores through the one restorer (partial restores count in its figures)
    assert set(t0.summary()) | set(s1.summary()) | set(coord.summary()) <= set(UpdateLog.summary_rules)


def run_steps(agents: list[Any], envs: list[Env], coord: LogCoordinator, steps: range) -> None:
    """Every agent through ``steps`` (each trainer logs a push), then the writers' messages committed."""
    for step in steps:
        for a in agents:
            if any(isinstance(p, LogTrainer) for p in a.parts):
                a.after_push(step, *push(step))
        words = np.array([a.header_word(step) for a in agents])
        for a in agents:
            a.after_step(step, words)
        for env in envs:
            for m in env.sent:
                coord.on_message(env.slot, m)
            env.sent.clear()


def cluster(tmp_path: Path) -> tuple[UpdateLog, LogCoordinator, list[Any], list[Env]]:
    cfg = log_cfg(tmp_path, "strategy.interval=5")
    strategy = UpdateLog(cfg)
    coord = strategy.coordinator(Env(cfg, Slot("monitor", 0), tmp_path, rank=0))
    envs = [Env(cfg, Slot(TRAINER, i), tmp_path, rank=1 + i) for i in range(2)] + [
        Env(cfg, Slot(SERVER, i), tmp_path, rank=3 + i) for i in range(2)]
    agents = [strategy.trainer(envs[0], Dense()), strategy.trainer(envs[1], Dense()),
              strategy.server(envs[2], Shard([0, 2])), strategy.server(envs[3], Shard([1, 3]))]
    return strategy, coord, agents, envs


def test_a_trainer_trims_its_log_once_the_checkpoint_is_committed_and_the_next_step_done(tmp_path):
    _, coord, agents, envs = cluster(tmp_path)
    run_steps(agents, envs, coord, range(5))  # checkpoint after step 4, committed
    header = UpdateLog(log_cfg(tmp_path)).header()
    assert bool(header.get(agents[0].header_word(9), "schedule.checkpoint"))
    assert coord.resume_steps() == [4] and part_of(agents[1], LogTrainer).awaiting == [4]
    assert part_of(agents[1], LogTrainer).log.steps() == [0, 1, 2, 3, 4]  # step 5 not completed yet
    run_steps(agents, envs, coord, range(5, 6))
    logs = [part_of(a, LogTrainer) for a in agents[:2]]
    assert logs[0].log.steps() == logs[1].log.steps() == [5] and logs[1].awaiting == []


def test_a_server_failure_replays_and_a_lost_log_rolls_back(tmp_path):
    _, coord, agents, envs = cluster(tmp_path)
    run_steps(agents, envs, coord, range(8))
    everyone = [Slot(TRAINER, 0), Slot(TRAINER, 1), Slot(SERVER, 0), Slot(SERVER, 1)]

    def failure(*dead: Slot) -> Failure:
        return Failure(step=8, committed=7, dead=list(dead), survivors=[s for s in everyone if s not in dead])

    plan = coord.plan(failure(Slot(SERVER, 1)))
    assert plan.scope is Scope.REPLACED and plan.candidates == [4] and "replay steps 5..7" in plan.reason
    assert coord.plan(failure(Slot(TRAINER, 1))).scope is Scope.COMMITTED
    plan = coord.plan(failure(Slot(SERVER, 1), Slot(TRAINER, 0)))
    log = part_of(coord, LogCoordinator)
    assert plan.scope is Scope.ROLLBACK and plan.candidates == [4, -1] and log.fallbacks == 1
    assert plan.reason == "full rollback: trainer:0 died with its update log"
    assert coord.env.events[-1][:2] == ("log_fallback", 8)
    # a trainer replaced after step 6: its log misses 5..6, so the next server failure rolls back
    coord.on_recovered(RecoveryPlan(Scope.COMMITTED, restored=6, replaced=[Slot(TRAINER, 1)]))
    plan = coord.plan(failure(Slot(SERVER, 0)))
    assert plan.scope is Scope.ROLLBACK and "replaced after step 6" in plan.reason and log.fallbacks == 2
    coord.on_recovered(RecoveryPlan(Scope.ROLLBACK, restored=4))
    assert coord.plan(failure(Slot(SERVER, 0))).scope is Scope.REPLACED


def test_a_replaced_server_restores_its_shard_alone_and_an_older_one_when_corrupted(tmp_path):
    strategy, coord, agents, envs = cluster(tmp_path)
    run_steps(agents, envs, coord, range(10))  # checkpoints 4 and 9
    assert coord.resume_steps() == [9, 4]
    env = Env(strategy.cfg, Slot(SERVER, 1), tmp_path, rank=5)
    shard = Shard([1, 3])
    shard.table[:] = -7  # whatever the replacement held
    server = strategy.server(env, shard)
    plan = RecoveryPlan(Scope.REPLACED, candidates=[9], step=12, committed=11, replaced=[Slot(SERVER, 1)])
    assert server.restore(plan, 11, True) and part_of(server, LogServer).base == 9
    assert np.array_equal(shard.table, [[1, 1], [3, 3]])
    assert env.events == [("restore", 12, "replacement server:1 restored checkpoint 9; replays steps 10..11 "
                                          "from the trainers' logs")]
    part = tmp_path / "ck" / "step-000000009" / "server-1.table.npy"
    part.write_bytes(part.read_bytes()[:-3])  # checkpoint 9's part truncated
    env.events.clear()
    assert server.restore(plan, 11, True) and part_of(server, LogServer).base == 4
    assert [e[0] for e in env.events] == ["restore_failed", "restore"] and "checkpoint 4" in env.events[1][2]
    assert server.summary()["restores"] == 2
