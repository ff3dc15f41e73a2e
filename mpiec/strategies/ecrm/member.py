"""One rank's place in the code as a member of ``servers``: ``Member`` and its ``Source``.

Owns, on every member of ``servers`` (a data server, or a dedicated parity rank): its parity rows
(a ``ParityStore``, on a holder), the per-step delta exchange (``DeltaPipeline``), the rebuild in
progress (``Rebuilder``) and its pacing, the online verification, and the figures of all of it;
on a data server also its ``Source`` (its shard's rows as the code sees them, and its open commit
window). The server's and the parity rank's agents (``agents``) each hold one ``Member`` and call
it from their hooks; the recovery (``rebuild``, ``rebuilder``, ``transfer``) works on it.

Invariants:

* every member decides alike which steps commit their parity deltas (``commit_now``: every
  ``parity_every``-th step, the last one, a verification's, and every step while a rebuild runs)
  and which drain at their end (``drain_now``), so the collectives on ``servers`` match;
* the rebuild's end is agreed collectively (``Rebuilder.step``), before the step's apply, so
  ``commit_now`` of a step is the same on every member;
* a member's figures only grow (peaks, sums, counts), except the per-step averages.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from mpi4py import MPI

from mpiec.comm import PeerFailure
from mpiec.data.rng import init_embedding_rows
from mpiec.kernels.codes import GFCode, SumCode
from mpiec.kernels.gf256 import gf_mat_inv, gf_matmul
from mpiec.kernels.rebuild import combine_into, pending_rows, take_rows
from mpiec.layout import RowPlacement, table_offsets
from mpiec.strategies.api.plan import RecoveryPlan, Scope
from mpiec.strategies.ecrm.holders import HolderComm
from mpiec.strategies.ecrm.parity import ParityStore
from mpiec.strategies.ecrm.pipeline import DeltaPipeline, Outgoing, build_outgoing
from mpiec.strategies.ecrm.rebuilder import Rebuilder, encode_jobs
from mpiec.strategies.ecrm.scrub import Found, repair
from mpiec.strategies.ecrm.transfer import RebuildError, merge_jobs, run_jobs
from mpiec.strategies.ecrm.window import CommitWindow
from mpiec.strategies.replay import collective

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.kernels.codes import Code
    from mpiec.strategies.api.env import RankEnv, ShardState
    from mpiec.strategies.ecrm.strategy import EcrmParams

#: rows per paced background round (``strategy.rebuild_rows = "auto"``)
ROUND_ROWS = 1 << 15
#: the most steps between two paced rounds: a rebuild of R rounds ends within ``MAX_GAP * R`` steps
#: of its recovery, whatever its rounds measured
MAX_GAP = 4


def round_gap(cost: float, previous: float, step_s: float, budget: float) -> int:
    """Steps until the next paced round: the round's CPU (``cost``, every member's summed), spread
    over them, stays within ``budget`` of a step's time ``step_s``; between 1 and ``MAX_GAP``.

    The rate is the lower of this round's cost and the one before (``previous``, 0: none): one
    round preempted on a loaded machine measured hundreds of times its CPU, spaced the next rounds
    hundreds of steps apart and left the lost rows to degraded reads for as long, each pull paying
    a collective (issue 40: 716 steps and 23 times the CPU against 55 steps). The cap bounds what a
    sustained slowdown can do."""
    rate = min(cost, previous) if previous > 0 else cost
    if rate <= 0:
        return 1
    return min(MAX_GAP, max(1, math.ceil(rate / (budget * max(step_s, 1e-4)))))

#: figures counted in whole numbers (the others are seconds or drifts)
_COUNTS = ("verify_checks", "verify_mismatches", "scrub_repaired", "scrub_unlocated", "scrub_rows_checked",
           "rebuilds", "rebuild_rows", "rebuild_bytes", "reencoded_rows", "replayed_steps",
           "rebuild_rounds", "degraded_rows", "sum_drift_checks", "rebuild_steps", "rebuild_shard_steps")


class Source:
    """A data server's side of the code: its shard's rows (raw bytes ``[weights | optimizer
    state]``) and the rows it updated since its last parity commit (``window``)."""

    def __init__(self, shard: ShardState, code: Code, row_bytes: int) -> None:
        self.shard = shard
        self.code = code
        self.row_bytes = row_bytes
        self.window = CommitWindow(self.table().shape[0])

    def table(self) -> np.ndarray:
        return self.shard.state()["table"]

    def global_rows(self) -> np.ndarray:
        return self.shard.state()["global_rows"]

    def table_bytes(self) -> np.ndarray:
        table = self.table()
        return table.view(np.uint8).reshape(table.shape[0], self.row_bytes)

    def delta(self, slots: np.ndarray, old: np.ndarray, width: int) -> np.ndarray:
        """The change of local rows ``slots`` since ``old`` (their rows at the window's base), as
        parity deltas: uint8 ``[n, width]`` (GF: old XOR new; ``sum``: new - old)."""
        if not slots.size:
            return np.empty((0, width), np.uint8)
        new = self.table()[slots]
        if self.code.name == "sum":
            return np.ascontiguousarray(self.code.delta(old, new)).view(np.uint8).reshape(slots.size, -1)
        return np.bitwise_xor(old.view(np.uint8), new.view(np.uint8)).reshape(slots.size, self.row_bytes)


class Member:
    """This rank in the code: parity rows (``store``, None unless a holder), its ``source`` (None
    on a parity rank), the delta exchange and the rebuild in progress (``rebuilder``)."""

    def __init__(self, env: RankEnv, params: EcrmParams, code: Code, row_bytes: int, width: int,
                 store: ParityStore | None, source: Source | None, keep: int) -> None:
        self.env = env
        self.pl: RowPlacement = env.placement
        self.code = code
        self.row_bytes, self.width = row_bytes, width
        self.store, self.source = store, source
        self.pipeline = DeltaPipeline(lambda: self.comm, self.pl, store, width, keep=keep)
        self.every = int(params.parity_every)
        self.verify_every = int(params.verify_every)
        self.scrub_stripes = int(params.scrub_stripes)
        self.scrub_at = 0  # the stripe the rolling scrub checks next (the same on every member)
        self.immediate = params.exchange == "immediate"
        self.rebuild_mode = params.rebuild
        self.budget = float(params.rebuild_budget)
        self.paced = params.rebuild_rows == "auto"
        # rows per background round: fixed, so a round's fixed cost (its collectives, ~0.3 ms of
        # CPU) stays small beside the rows' (~50-60 ns each, every member summed, 2 servers)
        self.chunk = ROUND_ROWS if self.paced else int(params.rebuild_rows)
        self.rebuilder: Rebuilder | None = None  # the rebuild in progress, None when complete
        self.found: Found = []  # the syndromes this holder's last verification found (``scrub``)
        # the steps the latest verifications ran after (the same on every member; ``clean_at``)
        self.verified: list[int] = []
        # strategy.fallback = "ckpt": a corrupted stripe the code cannot locate (r = 1) rolls the run
        # back to a fallback checkpoint from before it (``unlocated``)
        self.roll_back_unlocated = params.fallback == "ckpt"
        self.replaced_self = False  # this member is being rebuilt (its parity rows are not usable)
        self.holder_comm: HolderComm | None = None  # set by a shrink's ``handover`` only
        # paced rebuild: rounds of ``chunk`` rows, ``gap`` steps apart so that a round's CPU, every
        # member's summed (asking, the peers' answers, the transfer, forming and installing rows),
        # spread over the steps to the next one, stays within ``rebuild_budget`` of a step's time
        self.next_round = 0
        self.others_cpu = 0.0
        self.previous_cost = 0.0  # the round before the last one's (``round_gap``)
        self.shard_back = False
        self.last_overlap = 0.0
        self.last_round = 0.0
        self.rebuild_t0 = 0.0
        self.rebuild_step0 = 0
        self.commits = 0
        self.steps_run = 0
        self.stats: dict[str, float] = {k: 0.0 for k in (
            "verify_checks", "verify_mismatches", "scrub_repaired", "scrub_unlocated", "scrub_rows_checked",
            "rebuilds", "rebuild_rows", "rebuild_bytes", "reencoded_rows", "replayed_steps", "rebuild_s",
            "rebuild_sync_s", "rebuild_decode_s", "rebuild_replay_s", "sum_drift_max_abs",
            "sum_drift_max_rel", "rebuild_total_s", "rebuild_rounds", "degraded_rows", "sum_drift_checks",
            "rebuild_encode_s", "rebuild_steps", "rebuild_cpu_s", "rebuild_decode_cpu_s",
            "rebuild_reencode_cpu_s", "rebuild_fetch_cpu_s", "rebuild_install_cpu_s", "rebuild_gb_s_cpu",
            "rebuild_provide_cpu_s", "rebuild_round_wall_s", "rebuild_degraded_cpu_s", "rebuild_shard_steps")}

    @property
    def comm(self) -> MPI.Intracomm:
        """The current ``servers`` communicator (rebuilt by every recovery); during a shrink's
        ``handover``, that communicator in this member's old holder numbering."""
        if self.holder_comm is not None:
            return cast(MPI.Intracomm, self.holder_comm)
        comm = self.env.comms.servers
        assert comm is not None, "a member of servers"
        return comm

    # -- which steps commit and drain --------------------------------------------------------------
    def commit_now(self, step: int) -> bool:
        """``step`` commits its parity deltas: every ``parity_every``-th step, and at every step that
        drains (the last, a verification, a rebuild in progress). Every member of ``servers``
        decides alike (the rebuild's end is agreed collectively, before the step's apply)."""
        last = step + 1 == self.env.cfg.training.steps
        return (self.every == 1 or (step + 1) % self.every == 0 or last or self.rebuilder is not None
                or self.verify_due(step))

    def drain_now(self, step: int) -> bool:
        """Apply the deltas of ``step`` at its end (not during the next step): after the last step,
        before a verification, and while a rebuild needs parity and data at the same step."""
        last = step + 1 == self.env.cfg.training.steps
        return self.commit_now(step) and (last or self.immediate or self.rebuilder is not None
                                          or self.verify_due(step))

    def verify_due(self, step: int) -> bool:
        """A verification at the end of ``step`` (every ``verify_every`` steps, every step with a rolling
        scrub; never while a rebuild runs): the same on every member."""
        every = self.verify_every > 0 and (step + 1) % self.verify_every == 0
        return (every or self.scrub_stripes > 0) and self.rebuilder is None

    def scrub_window(self, step: int) -> np.ndarray | None:
        """This holder's parity slots the verification checks (None: all, ``verify_every``'s full
        pass): with a rolling scrub, those of the next ``scrub_stripes`` stripes, wrapping around.
        A window of stripes, not of slots, so that every parity row of a stripe is checked in the
        same verification (locating needs them all, ``scrub.locate``)."""
        full = self.verify_every > 0 and (step + 1) % self.verify_every == 0
        n = self.pl.n_stripes
        start, self.scrub_at = self.scrub_at, (self.scrub_at + self.scrub_stripes) % max(n, 1)
        if full or self.store is None:
            return None
        offset = (self.store.stripes - start) % max(n, 1)
        return (self.store.stripes >= 0) & (offset < self.scrub_stripes)

    def scrub_pass_steps(self) -> int:
        """Steps of a rolling scrub's full pass over every stripe (0: no rolling scrub)."""
        return -(-self.pl.n_stripes // self.scrub_stripes) if self.scrub_stripes else 0

    # -- the step ------------------------------------------------------------------------------------
    def overlap(self, step: int) -> None:
        """Post the previous step's deltas; one rebuild round if one runs (collective)."""
        self.pipeline.poll(upto=step - 2)
        self.pipeline.advance(upto=step - 1)
        now = time.perf_counter()
        step_s, self.last_overlap = now - self.last_overlap, now
        if self.rebuilder is None:
            return
        if step < self.next_round:  # agreed in the last round: every member skips alike
            self.last_round = 0.0
            return
        rb = self.rebuilder
        rows, gap = self.chunk, 1
        if self.paced and rb.round_cpu:  # the steps between rounds keep their CPU within the budget
            cost = rb.round_cpu + self.others_cpu  # last round: mine now, the others' as last gathered
            gap = round_gap(cost, self.previous_cost, step_s - self.last_round, self.budget)
            self.previous_cost = cost
        mine_before = rb.round_cpu
        more = rb.step(rows, gap)
        self.slow_round_for_test(rb)
        self.last_round = time.perf_counter() - now
        self.others_cpu = max(rb.round_cpu_all - mine_before, 0.0)
        self.next_round = step + rb.gap
        if rb.decoding and rb.phase != "decode" and not self.shard_back:  # every data row decoded
            self.shard_back = True
            self.stats["rebuild_shard_steps"] = max(self.stats["rebuild_shard_steps"],
                                                    step + 1 - self.rebuild_step0)
        self.stats["rebuild_round_wall_s"] += self.last_round
        if not more:
            if rb.encoding and self.store is not None:
                # the re-encoded parity rows encode the data as the round read it: every step
                # before this one (a rebuild drains each step's deltas at its end), and no history
                # before that (a failure right after must not find this holder at its spare's -1)
                self.store.reset_versions(step - 1)
            self.rebuild_done(step)

    def drain(self, step: int) -> None:
        """At the end of ``step`` on every member: apply its deltas now if it drains (collective)."""
        if self.drain_now(step):
            self.pipeline.drain()

    def end_step(self, step: int) -> None:
        """``step`` is complete: the rebuild completed after the last step, a verification when due."""
        if step + 1 == self.env.cfg.training.steps and self.rebuilder is not None:
            self.rebuilder.finish()  # the final state must be complete
            self.rebuild_done(step)
        if self.verify_due(step):
            self.corrupt_for_test(step)
            self.verify(step)

    def rebuild_done(self, step: int) -> None:
        rb = self.rebuilder
        assert rb is not None
        self.rebuilder = None
        seconds = time.perf_counter() - self.rebuild_t0
        self.stats["rebuild_total_s"] = max(self.stats["rebuild_total_s"], seconds)
        self.stats["rebuild_rounds"] += rb.rounds
        self.stats["rebuild_steps"] = max(self.stats["rebuild_steps"], step + 1 - self.rebuild_step0)
        cpu = sum(rb.cpu.values())
        if rb.decoding or rb.encoding:  # the rebuilding member's CPU (the others': answering)
            self.stats["rebuild_cpu_s"] += cpu
            self.stats["rebuild_decode_cpu_s"] += rb.cpu_phase["decode"]
            self.stats["rebuild_reencode_cpu_s"] += rb.cpu_phase["encode"]
            self.stats["rebuild_fetch_cpu_s"] += rb.cpu["fetch"]
            self.stats["rebuild_install_cpu_s"] += rb.cpu["install"]
            self.stats["rebuild_degraded_cpu_s"] += rb.cpu_degraded
            if rb.decoding and rb.cpu_phase["decode"] > 0:
                self.stats["rebuild_gb_s_cpu"] = rb.rows * self.row_bytes / rb.cpu_phase["decode"] / 1e9
        else:
            self.stats["rebuild_provide_cpu_s"] += cpu
        for key, value in (("rebuild_rows", rb.rows), ("rebuild_bytes", rb.bytes),
                           ("reencoded_rows", rb.reencoded), ("degraded_rows", rb.degraded_rows)):
            self.stats[key] += value
        if rb.decoding or rb.encoding:
            self.env.event("rebuild_end", step, detail=(
                f"{rb.rows} rows decoded ({rb.degraded_rows} by degraded reads), {rb.reencoded} parity rows "
                f"re-encoded, {rb.bytes} bytes fetched, {rb.rounds} rounds, {seconds:.3f} s since the "
                f"rebuild started, {sum(rb.cpu.values()):.3f} s of CPU"))

    def slow_round_for_test(self, rb: Rebuilder) -> None:
        """Test hook: ``MPIEC_ECRM_SLOW_ROUND_S=x`` adds ``x`` seconds to the measured CPU of the
        first background round of every rebuild on the rebuilding member, as a round preempted on
        a loaded machine measures (how the tests prove that one slow round does not stretch the
        rebuild, issue 40)."""
        extra = os.environ.get("MPIEC_ECRM_SLOW_ROUND_S")
        if extra and rb.rounds == 1 and (rb.decoding or rb.encoding):
            rb.round_cpu += float(extra)

    def corrupt_for_test(self, step: int) -> None:
        """Test hook: ``MPIEC_ECRM_CORRUPT_PARITY_AT_STEP=s`` flips one parity byte of the first
        holder after step ``s`` (how the tests prove that ``verify_every`` sees a bad byte)."""
        at = os.environ.get("MPIEC_ECRM_CORRUPT_PARITY_AT_STEP")
        first = self.env.n_servers if self.env.cfg.layout.parity_ranks else 0
        if at and int(at) == step and self.store is not None and self.store.array.size \
                and self.comm.Get_rank() == first:
            self.store.array.view(np.uint8).reshape(-1)[0] ^= 0x01

    def verify(self, step: int) -> None:
        """Collective over ``servers``: re-encode every stripe (a rolling scrub: the window of
        ``scrub_window``), compare with the parity held; a GF code then locates and repairs what
        differs (``scrub.repair``)."""
        before = self.stats["verify_mismatches"]
        self.found = []
        within = self.scrub_window(step)
        jobs = encode_jobs(self, "verify", within=within) if self.store is not None else []
        run_jobs(self, merge_jobs(jobs) if within is not None else jobs)  # a window: one round
        self.stats["verify_checks"] += 1
        self.stats["scrub_rows_checked"] += int(within.sum()) if within is not None else \
            int((self.store.stripes >= 0).sum()) if self.store is not None else 0
        bad = self.stats["verify_mismatches"] - before
        if bad:
            self.env.event("parity_mismatch", step, detail=f"{int(bad)} parity rows differ from a re-encode")
        unlocated = repair(self, step, self.found) if isinstance(self.code, GFCode) else []
        self.verified = [*self.verified[-self.passes():], step]  # what ``clean_at`` reads, no more
        if unlocated and self.roll_back_unlocated:  # the same on every member: the collective matches
            self.unlocated(step, unlocated)

    def passes(self) -> int:
        """Verifications between two checks of one stripe: a rolling scrub's pass, else 1."""
        return self.scrub_pass_steps() if self.scrub_stripes else 1

    def clean_at(self) -> int:
        """The last step after which every stripe passed a check, before the verification just
        made (-1: none; the initial state is clean): a rolling scrub's stripe was checked a pass
        (``scrub_pass_steps`` verifications) before."""
        earlier = self.verified[:-1]
        return earlier[-self.passes()] if len(earlier) >= self.passes() else -1

    def unlocated(self, step: int, stripes: list[int]) -> None:
        """Collective over ``servers``: corrupted stripes the code cannot locate (one parity row per
        stripe: a flipped data row and a flipped parity row look alike). Member 0 tells the
        coordinator from which step on the state is suspect (it waits until the monitor has the
        message), then every member raises the failure whose recovery rolls back to the newest
        fallback checkpoint from before it (``EcrmCoordinator.plan``)."""
        clean = self.clean_at()
        more = f" and {len(stripes) - 4} more" if len(stripes) > 4 else ""
        shown = ", ".join(map(str, stripes[:4])) + more
        if self.comm.Get_rank() == 0:
            self.env.tell_monitor(("unlocated", step, shown, clean), synchronous=True)
        with collective("ecrm unlocated corruption"):
            self.comm.Barrier()  # nobody raises before the monitor has member 0's message
        raise PeerFailure(MPI.ERR_OTHER, f"ecrm verification after step {step}: stripe(s) {shown} "
                                         "corrupted, not located")

    # -- recovery --------------------------------------------------------------------------------------
    def rebuild(self, plan: RecoveryPlan, sequence: Callable[[], dict[str, float]]) -> bool:
        """Run this member's side of the recovery (``sequence``: ``rebuild.rebuild_server`` or
        ``rebuild_parity``, returning its phase times); False (a ``rebuild_failed`` event) when the
        state cannot be rebuilt."""
        t0 = time.perf_counter()
        if self.env.slot in plan.replaced:
            self.env.event("rebuild_start", plan.step, detail=f"{self.env.slot} from its stripes "
                                                              f"({self.rebuild_mode})")
        try:
            times = sequence()
        except RebuildError as exc:
            self.env.event("rebuild_failed", plan.step, detail=str(exc)[:250])
            self.rebuilder = None
            return False
        self.stats["rebuilds"] += 1
        end = time.perf_counter()
        self.rebuild_t0 = t0  # a new failure restarts any rebuild in progress
        self.rebuild_step0 = plan.step
        self.next_round, self.others_cpu, self.previous_cost = 0, 0.0, 0.0  # its first round at once
        self.shard_back = False
        self.stats["rebuild_s"] = max(self.stats["rebuild_s"], end - t0)
        for key, a, b in (("rebuild_sync_s", "start", "sync"), ("rebuild_decode_s", "sync", "decode"),
                          ("rebuild_replay_s", "decode", "replay"), ("rebuild_encode_s", "replay", "encode")):
            if a in times and b in times:
                self.stats[key] = max(self.stats[key], times[b] - times[a])
        rb = self.rebuilder
        if rb is not None and rb.decoding and rb.phase != "decode":  # decoded inside the recovery
            self.shard_back = True
        if rb is not None and rb.phase is not None and plan.step >= self.env.cfg.training.steps:
            # a failure after the last step (in its evaluation, or at the end-of-training agreement):
            # no step is left to carry a background rebuild, and the final state must be complete
            rb.finish()
        if rb is not None and (rb.phase is None or plan.step >= self.env.cfg.training.steps):
            self.rebuild_done(plan.step)
        return True

    def on_recovered(self, plan: RecoveryPlan) -> None:
        """After a rollback (the fallback) or a re-placement of the rows (``plan.relayout``) every
        holder re-encodes its parity from the rows as they are (collective over ``servers``); nothing
        stays in flight past the restored step."""
        if plan.scope is Scope.ROLLBACK or plan.relayout:
            self.rebuilder = None
            self.pipeline.outgoing.clear()
            if self.store is not None:
                self.store.incoming.clear()
            jobs = encode_jobs(self, "encode") if self.store is not None else []
            run_jobs(self, jobs)
            self.stats["reencoded_rows"] += sum(job.rows for job in jobs)
            if self.store is not None:
                self.store.reset_versions(plan.restored)
        self.pipeline.reset(plan.restored)
        if self.source is not None:
            self.source.window.reset(plan.restored)
        # checks of steps a rollback undid say nothing about the steps executed again
        self.verified = [v for v in self.verified if v <= plan.restored]

    # -- what the rebuild reads --------------------------------------------------------------------
    def table_bytes(self) -> np.ndarray:
        assert self.source is not None, "only a data server holds data rows"
        return self.source.table_bytes()

    def provide_data(self, idx: np.ndarray) -> np.ndarray:
        return self.table_bytes()[idx]

    def provide_parity(self, idx: np.ndarray) -> np.ndarray:
        assert self.store is not None, "only a holder holds parity rows"
        return self.store.as_bytes(idx)

    def provide_rows(self, idx: np.ndarray, width: int) -> np.ndarray:
        """A rebuild's request: data rows ``idx >= 0`` and parity rows ``-1 - idx`` of ``width``
        bytes, in one kernel pass (``kernels.rebuild.take_rows``)."""
        empty = np.empty((0, width), dtype=np.uint8)
        data = self.table_bytes() if self.source is not None and self.row_bytes == width else empty
        store = self.store
        parity = (store.array.view(np.uint8).reshape(store.array.shape[0], width)
                  if store is not None and self.width == width else empty)
        out = np.empty((idx.size, width), dtype=np.uint8)
        take_rows(data, parity, idx, out)
        return out

    def parity_rows(self, rows: np.ndarray) -> np.ndarray:
        """Fetched parity bytes in the form the code decodes (``sum``: its float dtype)."""
        dtype = self.code.dtype if isinstance(self.code, SumCode) else np.dtype(np.uint8)
        return rows.view(dtype).reshape(rows.shape[0], -1)

    def tail(self, base: int, slots: np.ndarray | None, old: np.ndarray | None) -> Outgoing | None:
        """Recovery, on a source: the deltas from version ``base`` to the rows now (``slots``/``old``
        None: the open window's, if it starts at ``base``; None when it does not)."""
        src = self.source
        assert src is not None, "only a data server is a source"
        if slots is None:
            if src.window.base != base:
                return None
            slots, old = src.window.rows()
        assert old is not None
        rows = src.global_rows()[slots]
        return build_outgoing(self.pl, rows, src.delta(slots, old, self.width),
                              self.comm.Get_size())

    # -- results ---------------------------------------------------------------------------------------
    def figures(self) -> dict[str, Any]:
        steps = max(self.steps_run, 1)
        pipe, store, src = self.pipeline, self.store, self.source
        out: dict[str, Any] = {
            "parity_bytes_per_step": pipe.bytes_sent / steps, "parity_bytes": pipe.bytes_sent,
            "parity_rows_per_step": pipe.rows_sent / steps,
            "parity_memory_bytes": store.nbytes if store is not None else 0,
            "shard_memory_bytes": int(src.table().nbytes) if src is not None else 0,
            "parity_stage_s_per_step": pipe.seconds_stage / steps,
            "parity_drain_s_per_step": pipe.seconds_drain / steps,
            "parity_stage_cpu_s_per_step": pipe.cpu_stage / steps,
            "parity_drain_cpu_s_per_step": pipe.cpu_drain / steps,
            "retained_deltas_peak_bytes": pipe.peak_retained + (store.peak_retained if store is not None
                                                                else 0),
            "parity_commits": self.commits,
            "parity_window_peak_bytes": src.window.peak if src is not None else 0,
            "scrub_pass_steps": self.scrub_pass_steps(),
        }
        out.update({k: (int(v) if k in _COUNTS else v) for k, v in self.stats.items()})
        return out


# -- start-up ---------------------------------------------------------------------------------------

def seed_rows(cfg: Config, rows: np.ndarray) -> np.ndarray:
    """Initial rows ``[weights | zero optimizer state]`` of global ids ``rows`` (ids past the last
    table, the stripe padding, are zero rows): the pure function of the seed every server's shard
    starts from (the servers' own initial rows; a difference would show as parity mismatches)."""
    offsets = table_offsets(cfg.data.cardinalities)
    dim = cfg.model.dim
    state = 1 if cfg.training.optimizer == "adagrad" else 0
    rows = np.asarray(rows, dtype=np.int64)
    table = np.zeros((rows.size, dim + state), dtype=np.float32)
    real = (rows >= 0) & (rows < offsets[-1])
    tables = np.searchsorted(offsets, rows[real], side="right") - 1
    local = np.flatnonzero(real)
    for t in np.unique(tables):
        sel = tables == t
        ids = rows[real][sel] - offsets[t]
        table[local[sel], :dim] = init_embedding_rows(cfg.training.seed, int(t), cfg.data.cardinalities[t],
                                                      ids, dim)
    return table


def encode_initial(store: ParityStore, pl: RowPlacement, code: Code, cfg: Config, width: int) -> None:
    """A holder at start-up: parity of the initial rows, computed locally (they are a pure function
    of the seed)."""
    k = pl.k
    for residue in range(min(pl.servers, pl.n_stripes)):
        sel = np.flatnonzero((store.stripes >= 0) & (store.stripes % pl.servers == residue))
        if not sel.size:
            continue
        i = int(store.members[sel[0]])
        st = store.stripes[sel]
        data = [seed_rows(cfg, st * k + j).view(np.uint8) for j in range(k)]
        parity = code.encode(data)[i]
        store.load_bytes(sel, np.ascontiguousarray(parity).view(np.uint8).reshape(sel.size, width))
    store.reset_versions(-1)


def warm_up(code: Code, row_bytes: int) -> None:
    """Every member of ``servers`` and every spare loads the kernels of the code and of a rebuild
    now (numba cache), before the clock: a promoted spare then decodes at once, and a survivor
    answers its first fetch at once. A fresh clone compiled the rebuild's kernels inside its first
    recovery instead: a round of seconds, the rounds after it paced hundreds of steps apart, 24 s of
    time lost against 1 s (issue 40)."""
    k, w = code.k, row_bytes
    data = [np.full((4, w), j + 1, dtype=np.uint8) for j in range(k)]
    parity = code.encode(data)
    rows = np.arange(2, dtype=np.int64)
    code.update(parity[0], 0, rows, code.delta(data[0][:2], data[0][:2]), parity_index=0)
    code.decode([None, *data[1:]], parity, [0])
    code.decode([None, *data[1:]], parity, [0], rows=rows)
    table = np.zeros((4, w), dtype=np.uint8)
    out = np.empty((2, w), dtype=np.uint8)
    take_rows(table, table, np.array([0, -1], dtype=np.int64), out)  # a holder answering a fetch
    done = np.zeros(4, dtype=np.bool_)
    pending_rows(np.array([1, 1, 2], dtype=np.int64), done, np.zeros(4, dtype=np.bool_))  # a pull's rows
    src, offs, slots = np.ones((4, w), dtype=np.uint8), np.array([0, 2], dtype=np.int64), rows + 1
    combine_into(np.ones(2, dtype=np.uint8), src, offs, table, slots, done)  # xor: copies and xors
    combine_into(np.array([2, 3], dtype=np.uint8), src, offs, table, slots, None)  # GF multiplies
    gf_matmul(np.ones((1, 2), dtype=np.uint8), gf_mat_inv(np.eye(2, dtype=np.uint8)))  # Rebuilder.coef


__all__ = ["Member", "Source", "encode_initial", "seed_rows", "warm_up"]
