"""CPR's parts beside the checkpoint kit's (``cpr.partials``, ``cpr.recovery``, ``cpr.ledger``): one
decision per step on trainer 0, the plan of each failure, the partials' rows in step order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mpiec.launch.resolve import load_config
from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.storage.checkpoint import CheckpointStore
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope
from mpiec.strategies.checkpointing import Interval, Schedule
from mpiec.strategies.checkpointing.kit import MILLIS, CommitterPart, RollbackPlanner
from mpiec.strategies.cpr import PartialRecoveryMFU
from mpiec.strategies.cpr.partials import FullOrPartial, PartialBook
from mpiec.strategies.cpr.recovery import PartialRecoveryPlanner


class Env:
    def __init__(self, cfg: Any) -> None:
        self.cfg, self.slot, self.n_trainers, self.epoch = cfg, Slot(TRAINER, 0), cfg.layout.trainers, 0
        self.events: list[tuple[str, int]] = []

    def now(self) -> float:
        return 0.0

    def event(self, kind: str, step: int, detail: str = "", at: float | None = None) -> None:
        self.events.append((kind, step))


class Committer:
    """A ``ManifestCommitter`` stand-in: its rows, and whether the pending parts were dropped."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows, self.dropped = rows, 0

    def drop_pending(self) -> None:
        self.dropped += 1


def test_trainer_0_decides_full_or_partial_in_one_word_never_both():
    cfg = load_config("tiny", strategy="cpr-mfu", sets=["strategy.interval=4", "strategy.mfu_every=1"])
    strategy = PartialRecoveryMFU(cfg)
    env = Env(cfg)
    schedule = Schedule.from_config(cfg, strategy.kit.interval, strategy.params.first, env.now)
    part = FullOrPartial(env, schedule, MILLIS, "sync full checkpoint",  # type: ignore[arg-type]
                         every=strategy.partial_every)
    part.header = strategy.header().view("schedule")
    words = {s: part.header.pack(**part.header_word(s)) for s in range(8)}
    full = [s for s, w in words.items() if part.header.get(w, "checkpoint")]
    partial = [s for s, w in words.items() if part.header.get(w, "partial")]
    assert full == [3, 7] and partial == [0, 1, 2, 4, 5, 6]  # every step, the full ones excepted
    servers = np.zeros(cfg.layout.servers, dtype=np.int64)
    part.after_step(3, np.concatenate([[words[3]], np.zeros(cfg.layout.trainers - 1, np.int64), servers]))
    assert env.events == [("checkpoint_start", 3)] and schedule.taken == [3]


def test_the_partials_rows_are_merged_in_step_order_after_the_full_one_of_the_same_step(tmp_path: Path):
    committer = Committer([(4, "full", 100, 0.1, 32, 10, 0.1), (9, "full", 100, 0.1, 32, 10, 0.1),
                           (4, "full", 100, 0.1, 32, 10, 0.1)])  # re-committed after a rollback
    book = PartialBook(committer, "mfu")  # type: ignore[arg-type]
    for step, nbytes in ((6, 7), (4, 5), (6, 3)):  # two servers' partials of step 6
        book.on_message(Slot(SERVER, 0), ("partial", step, 0, {"bytes": nbytes}, 2, 0.01))
    book.on_message(Slot(SERVER, 0), ("part", 9, 0, {}, {}))  # the committer's, not the book's
    part = CommitterPart(None, None, committer, Interval("given", 5), "sync", book.rows)  # type: ignore[arg-type]
    rows = part.checkpoint_rows()
    assert [(r[0], r[1]) for r in rows] == [(4, "full"), (4, "full"), (4, "mfu"), (6, "mfu"), (9, "full")]
    assert rows[3][2] == 10 and rows[3][5] == 4  # both servers' bytes and rows
    figures = book.summary()
    assert figures["partial_checkpoints"] == figures["checkpoints"] == 2  # + the committer's, by "sum"
    assert figures["checkpoint_bytes"] == 7 + 5 + 3
    assert figures["full_checkpoint_bytes"] == 100.0 and figures["partial_rows_saved"] == 6
    plain = CommitterPart(None, None, committer, Interval("given", 5), "sync")  # type: ignore[arg-type]
    assert plain.checkpoint_rows() == committer.rows  # no beside: commit order, as ckpt's


def test_a_server_failure_is_replaced_a_trainer_one_loses_nothing_and_no_trainer_left_rolls_back(tmp_path):
    cfg = load_config("tiny", strategy="cpr")
    store = CheckpointStore(tmp_path)
    committer = Committer([])
    planner = PartialRecoveryPlanner(Env(cfg), store, committer, Interval("given", 5), 0.05)  # type: ignore[arg-type]
    trainers = [Slot(TRAINER, i) for i in range(cfg.layout.trainers)]
    servers = [Slot(SERVER, i) for i in range(cfg.layout.servers)]
    trainer_only = Failure(step=8, committed=7, dead=[trainers[0]], survivors=trainers[1:] + servers)
    assert planner.plan(trainer_only).scope is Scope.COMMITTED and committer.dropped == 0
    server = Failure(step=8, committed=7, dead=[servers[1]], survivors=trainers + servers[:1])
    plan = planner.plan(server)
    assert plan is not None and plan.scope is Scope.REPLACED and committer.dropped == 1
    assert "8 steps of their updates lost" in plan.reason  # no full checkpoint yet: since step -1
    planner.on_recovered(plan)
    assert planner.summary()["pls_failures"] == 1
    everyone = Failure(step=8, committed=7, dead=[*trainers, servers[1]], survivors=servers[:1])
    assert planner.plan(everyone) is None  # left to the kit's planner after it:
    rollback = RollbackPlanner(store, committer, "peer").plan(everyone)  # type: ignore[arg-type]
    assert rollback.scope is Scope.ROLLBACK and rollback.candidates == [-1]
    assert not planner.on_grow(RecoveryPlan(Scope.COMMITTED))  # the servers are not grown back
