"""``replica``: every server's shard replicated in the memory of one peer; lossless recovery.

Server ``i`` holds a copy of the shard of its predecessor ``p = (i - 1) mod S`` (the rows in
``p``'s local-slot order). Every training step, right after its apply, each server sends the rows
it updated to its successor and receives its predecessor's: a ring on ``comms.servers``. A lost
server is rebuilt from its successor's replica at the committed step; a server lost together with
its successor (the holder of its replica) loses a shard, and the run.

Invariants: a replica holds its owner's rows at step ``self.at``, and ``self.undo`` the rows of
the last update received (a failure can leave the replica one step past the committed step: the
runtime undoes the servers' own tables, not this copy); every server calls the same exchanges in
the same order, so nobody waits for a peer that is elsewhere.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mpiec.comm import guard, waitall
from mpiec.errors import ConfigError
from mpiec.strategies.api.agents import Coordinator, ServerAgent
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope, Strategy
from mpiec.strategies.api.params import param

# the messages' tags: these of the strategy's range, RankEnv.tags (a plug-in never picks a tag)
COUNT, ROWS, DIGEST, OWN, COPY = range(5)


@dataclass(frozen=True)
class ReplicaParams:
    check_every: int = param(0, "every N steps each holder compares a digest of its replica with the "
                                "owner's shard (0: never)", ge=0)


class Replication(Strategy):
    name = "replica"
    description = "each server's shard replicated in its successor's memory; lossless rebuild"
    Params = ReplicaParams
    recovers = True
    lossless: ClassVar[bool] = True  # a recovery ends with the failure-free checksum (mpiec.contract)
    cost_reason: ClassVar[str] = ("not modelled: a replica rebuild copies one shard from its successor; "
                                  "the simulator's rebuild kind prices an erasure-code decode")
    summary_rules: ClassVar[dict[str, str]] = {
        "replica_bytes_sent": "sum", "rebuilds": "max", "replica_mismatches": "sum"}

    @classmethod
    def check(cls, params: Any, cfg: Any) -> None:
        if cfg.layout.parity_ranks:
            raise ConfigError("strategy replica keeps no parity: set layout.parity_ranks = 0")

    def coordinator(self, env: Any) -> Coordinator:
        return ReplicaCoordinator(env)

    def server(self, env: Any, role: Any) -> ServerAgent:
        return ReplicaServer(env, role, self.params)


class ReplicaCoordinator(Coordinator):
    def plan(self, failure: Failure) -> RecoveryPlan:
        S = self.env.cfg.layout.servers
        dead = {s.index for s in failure.dead if s.role == "server"}
        if dead and S < 2:
            return RecoveryPlan.abort("replica: with one server the replica lives on its owner")
        for i in sorted(dead):
            if (i + 1) % S in dead:
                return RecoveryPlan.abort(f"replica: server {i} died with server {(i + 1) % S}, "
                                          f"the holder of its replica: the shard of server {i} is lost")
        if not failure.alive("trainer"):
            return RecoveryPlan.abort("replica: every trainer died: the dense replica is lost")
        return RecoveryPlan(Scope.COMMITTED)  # survivors stay; replaced servers rebuilt at `committed`


class ReplicaServer(ServerAgent):
    def __init__(self, env: Any, role: Any, params: ReplicaParams) -> None:
        super().__init__(env)
        self.role, self.params = role, params
        self.S, me = env.cfg.layout.servers, env.slot.index
        self.succ, self.pred = (me + 1) % self.S, (me - 1) % self.S
        self.replica: np.ndarray | None = None  # the predecessor's shard at step self.at
        self.at = -1
        self.undo: tuple[int, np.ndarray, np.ndarray] | None = None  # (step, slots, rows before)
        self.sent = self.rebuilds = self.mismatches = 0

    def _table(self) -> np.ndarray:
        return self.role.state()["table"]  # the live shard

    def _empty_replica(self) -> np.ndarray:
        return np.empty((self.env.placement.n_local(self.pred), self._table().shape[1]), np.float32)

    def _ring(self, out: np.ndarray, into: np.ndarray, which: int, where: str) -> None:
        """Send ``out`` to the successor, receive ``into`` from the predecessor (every server)."""
        comm, tag = self.env.comms.servers, self.env.tags[which]
        with guard(where):
            reqs = [comm.Irecv(into, source=self.pred, tag=tag), comm.Isend(out, dest=self.succ, tag=tag)]
        waitall(reqs, where)
        self.sent += out.nbytes

    def overlap(self, step: int) -> None:
        if self.S > 1 and self.replica is None:  # the start: the rows are still at step - 1
            replica = self._empty_replica()
            self._ring(self._table(), replica, ROWS, "replica: initial copy")
            self.replica, self.at, self.undo = replica, step - 1, None

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        if self.S < 2 or replayed:
            return
        assert self.replica is not None and self.at == step - 1, (self.at, step)
        rows = self._table()[slots]
        n = np.empty(1, np.int64)
        self._ring(np.array([slots.size], np.int64), n, COUNT, f"replica: step {step}")
        width = rows.shape[1]
        into = np.empty(int(n[0]) * (8 + 4 * width), np.uint8)
        out = np.concatenate([slots.astype(np.int64).view(np.uint8), rows.reshape(-1).view(np.uint8)])
        self._ring(out, into, ROWS, f"replica: step {step}")
        got = into[: 8 * n[0]].view(np.int64)
        self.undo = (step, got, self.replica[got])  # fancy indexing copies
        self.replica[got] = into[8 * n[0]:].view(np.float32).reshape(-1, width)
        self.at = step
        if self.params.check_every and (step + 1) % self.params.check_every == 0:
            theirs = np.empty(32, np.uint8)
            mine = np.frombuffer(hashlib.sha256(self._table().tobytes()).digest(), np.uint8).copy()
            self._ring(mine, theirs, DIGEST, f"replica: digest of step {step}")
            if theirs.tobytes() != hashlib.sha256(self.replica.tobytes()).digest():
                self.mismatches += 1
                self.env.event("replica_mismatch", step, detail=f"replica of server {self.pred}")

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        return plan.scope is not Scope.ROLLBACK  # a replaced server's rows come in rebuild()

    def rebuild(self, plan: RecoveryPlan) -> bool:
        if self.S < 2:
            return True
        c, me, S = plan.committed, self.env.slot.index, self.S
        replaced = {s.index for s in plan.replaced if s.role == "server"}
        # 1. my replica back to the committed step (the owner's table was undone by the runtime)
        if self.replica is not None and self.undo is not None and self.at == c + 1 == self.undo[0]:
            _, slots, rows = self.undo
            self.replica[slots] = rows
            self.at, self.undo = c, None
            self.env.event("undo", plan.step, detail=f"replica of server {self.pred}: undid step {c + 1}")
        have = self.at if self.replica is not None and me not in replaced else None
        with guard("replica: rebuild plan"):
            held = self.env.comms.servers.allgather(have)  # by server index: the step of each replica
        # 2. replaced servers: their rows from their successor's replica (the initial rows at -1)
        problem = next((f"the replica of server {r} on server {(r + 1) % S} is at step "
                        f"{held[(r + 1) % S]}, not at the committed step {c}" for r in sorted(replaced)
                        if held[(r + 1) % S] != c and c >= 0), "")
        if problem:
            if me in replaced:
                self.env.event("rebuild_failed", plan.step, detail=problem)
            return False
        comm, table, own, reqs = self.env.comms.servers, self._table(), None, []
        with guard("replica: rebuild"):
            if self.pred in replaced and held[me] == c:
                reqs.append(comm.Isend(self.replica, dest=self.pred, tag=self.env.tags[OWN]))
                self.sent += self.replica.nbytes
            if me in replaced and held[self.succ] == c:
                own = np.empty_like(table)
                reqs.append(comm.Irecv(own, source=self.succ, tag=self.env.tags[OWN]))
        waitall(reqs, "replica: rebuild")
        if me in replaced:
            if own is None:
                self.role.reset()  # committed step -1: the initial rows
            else:
                self.role.load_state({"table": own, "global_rows": self.role.state()["global_rows"]})
        # 3. every replica that is not at the committed step: a fresh copy from its owner
        need = [i in replaced or held[i] != c for i in range(S)]
        fresh, reqs = (self._empty_replica() if need[me] else None), []
        with guard("replica: refresh"):
            if need[self.succ]:
                reqs.append(comm.Isend(self._table(), dest=self.succ, tag=self.env.tags[COPY]))
                self.sent += self._table().nbytes
            if fresh is not None:
                reqs.append(comm.Irecv(fresh, source=self.pred, tag=self.env.tags[COPY]))
        waitall(reqs, "replica: refresh")
        if fresh is not None:
            self.replica, self.at, self.undo = fresh, c, None
        if replaced or any(need):
            self.rebuilds += 1
            if me in replaced:
                source = f"server {self.succ}'s replica" if own is not None else "the seed (initial rows)"
                self.env.event("rebuild_end", plan.step, detail=f"rows of step {c} from {source}")
        return True

    def summary(self) -> dict[str, Any]:
        return {"replica_bytes_sent": self.sent, "rebuilds": self.rebuilds,
                "replica_mismatches": self.mismatches}
