"""The discrete-event model of one training job under failures, one strategy at a time.

Owns what a strategy does on the wall clock: steps, checkpoint stalls, failures, recoveries,
rollbacks, background rebuilds and lost updates — and the figures of a simulated run, defined as
the runtime defines them for a measured one (``mpiec.results.accounting``), so that predictions can
be checked against result files:

* **time lost per recovery** = kill → back to normal speed, plus the rolled-back steps executed
  again: the interrupted step's elapsed part + recovery latency + ``resume_extra_s`` +
  re-executed steps (rollback) or the rebuild window after the resume (``ecrm``, counted when the
  rebuild slows a step by more than 1/0.95 − 1, the runtime's "back to 95 %" threshold);
* **ETTR** = ``1 − (Σ time lost + checkpoint stall on the critical path) / wall``;
* **goodput ratio** = (samples of the final model − lost samples) / wall, over the failure-free
  ``none`` throughput (``global_batch / step_s``): the all-inclusive figure (per-step overhead,
  stalls, recoveries, degraded steps and lost updates all count against it);
* **failure-free overhead** = ``1 − throughput / throughput of none`` without failures.

What each strategy does (``Policy.kind``, after ``docs/strategies.md``):

* ``restart`` (``none``): a failure loses the job; it restarts from step 0 after the recovery
  latency (the runtime stops; at scale the scheduler restarts it);
* ``rollback`` (``ckpt``, ``cnr``): every rank returns to the last committed checkpoint, the steps
  since are executed again; a checkpoint interrupted by a failure is not committed;
* ``partial`` (``cpr*``): only the failed shards reload their checkpoint, nobody re-executes; the
  failed shards' updates since their checkpoint are lost: ``steps since × global batch × shards
  lost / servers`` samples (CPR's PLS accounting), less the share ``partial_coverage`` that
  ``cpr-mfu`` / ``cpr-ssu``'s partial checkpoints keep;
* ``replay`` (``log``): only the failed shards reload their checkpoint and replay the trainers'
  logged gradients of the steps since (``replay_s_per_step`` each); nobody re-executes, nothing is
  lost;
* ``rebuild`` (``ecrm``): training resumes after the synchronous part; the lost shard is rebuilt
  in the background while steps run ``1 + rebuild_slowdown`` times slower; more than ``r`` lost
  members of one stripe (rotated placement: ``r + 1`` lost servers within ``k + r`` consecutive
  ones) cannot be decoded: the job restarts from scratch (``unrecoverable``).

``Policy.shrink`` (the runtime's ``layout.replacement = "shrink"``, no spare held): a failure's ranks
are not replaced. Lost servers are recovered as the runtime does it: by a rollback onto the
survivors (``ckpt``, ``cnr``, ``log``; ``cpr*``, which cannot re-place rows, restart), or, for
``ecrm`` with at least ``k + r`` servers left, by a ``handover`` (the survivors decode the lost
shard and re-place every row: latency + the rebuild's synchronous part + a restore, nothing
re-executed; with a trainer lost in the same failure its fallback's rollback, else a restart);
lost trainers cost only the latency. Until the failed nodes come back
(``grow_back_s`` after the recovery: the scheduler's replacement, then re-placed onto — a growth the
runtime does not build yet) the job runs on fewer ranks with the same global batch: a step takes
``max(S / S_live, T / T_live)`` times as long. That lost throughput, ``Σ shrunk time × (1 − 1 /
factor)``, counts in the ETTR beside the time lost (``Outcome.shrink_lost_s``).

A trainer-only failure is the runtime's peer copy of the dense replica for every strategy but
``none``; all trainers lost at once rolls back (or restarts without checkpoints). A failure that
arrives during a recovery is applied when that recovery ends. Step-triggered failures (``Failure.
step``) fire once, the first time the job reaches that step, as the runtime's kill plans do.

Invariants: time only moves forward; a run ends when every step is done or at ``cap_s`` of wall
time (``finished = False``); the engine is deterministic for a given policy and failure list; every
event (a turn of the engine's loop: a checkpoint, a stretch of steps; a failure costs
``FAILURE_EVENTS``) is paid from an ``EventBudget`` (``MAX_EVENTS`` unless the caller shares one),
so no input runs without end: past the budget the run stops with a ``MpiecError`` saying the bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from mpiec.errors import MpiecError

__all__ = ["BACK_TO_NORMAL_SLOWDOWN", "FAILURE_EVENTS", "MAX_EVENTS", "EventBudget", "Failure", "Outcome",
           "Policy", "RecoveryRecord", "simulate"]

#: The runtime is "back to normal" at the first step no slower than normal / 0.95.
BACK_TO_NORMAL_SLOWDOWN = 1.0 / 0.95 - 1.0
KINDS = ("restart", "rollback", "partial", "replay", "rebuild")
#: Events one command may simulate: about a minute of the engine (~1 µs an event: a turn of its
#: loop, a checkpoint). The default sweep spends ~120,000; a year of a 10,000-node job, one trial
#: of every strategy, ~8 million (10 s).
MAX_EVENTS = 50_000_000
#: What one failure costs in events: it is drawn, built, recovered from and recorded (~15 µs).
FAILURE_EVENTS = 15


class EventBudget:
    """Events left to simulate; ``spend`` past the bound is a ``MpiecError`` that says it."""

    def __init__(self, limit: int = MAX_EVENTS) -> None:
        self.limit = limit
        self.left = limit

    def check(self, events: float, what: str) -> None:
        """Refuse, before any of it runs, work estimated at ``events`` events (``what`` says whose)."""
        if not events <= self.left:
            raise MpiecError(f"{what} would simulate about {events:.3g} events (checkpoints, failures, "
                             f"node lifetimes), more than the bound of {self.limit:,}: fewer --hours, "
                             "--nodes or --trials, or a larger MTBF")

    def spend(self, events: int = 1) -> None:
        self.left -= events
        if self.left < 0:
            raise MpiecError(f"the simulation passed its bound of {self.limit:,} events (checkpoints, "
                             "failures, node lifetimes) and was stopped: fewer --hours, --nodes or "
                             "--trials, or a larger MTBF (or a Weibull shape nearer 1)")


@dataclass(frozen=True)
class Failure:
    """One failure: at a wall time (s since training started) or at the start of a step."""

    time_s: float | None = None
    step: int | None = None
    servers: tuple[int, ...] = ()  # server indices lost
    trainers: int = 0  # trainers lost
    label: str = ""
    wait_s: float = 0.0  # the replacement waits this long too (a repair that holds the slot)


@dataclass(frozen=True)
class Policy:
    """One strategy's behaviour on one job, every cost already in seconds."""

    name: str
    kind: str
    step_s: float  # step time without protection (none's)
    overhead_s: float = 0.0  # protection time added to every step (ecrm's parity work)
    interval_steps: int | None = None  # full checkpoint every N steps
    interval_rule: str = ""
    ckpt_stall_s: float = 0.0  # critical-path stall of one full checkpoint
    partial_every_steps: int | None = None  # cpr-mfu / ssu partial checkpoints
    partial_stall_s: float = 0.0
    latency_s: float = 0.0  # kill -> replacement in place
    restore_s: float = 0.0  # a server failure: the restore (rollback: every shard in parallel)
    trainer_restore_s: float = 0.0  # a trainer-only failure: the peer copy
    resume_extra_s: float = 0.0  # resume -> back to normal, beyond what the model counts
    sync_restore_s: float = 0.0  # rebuild: the synchronous part before training resumes
    rebuild_s: float = 0.0  # rebuild: one lost shard, from its replacement to its last row
    rebuild_slowdown: float = 0.0
    replay_s_per_step: float = 0.0  # replay: seconds to replay one step's logged gradients
    partial_coverage: float = 0.0  # partial: share of the lost updates partial checkpoints keep
    ckpt_bytes: float = 0.0  # bytes one checkpoint writes, every part (figures only: not simulated)
    restore_bytes: float = 0.0  # bytes a restore of every part reads (a chain: what storage must keep)
    servers: int = 1
    trainers: int = 1
    global_batch: int = 1
    k: int = 1
    r: int = 1
    shrink: bool = False  # no spare: go on without the failed ranks (module docstring)
    grow_back_s: float = 0.0  # shrink: recovery -> the failed nodes' replacements join again

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"policy kind {self.kind!r} not in {KINDS}")

    @property
    def run_step_s(self) -> float:
        return self.step_s + self.overhead_s


@dataclass(frozen=True)
class RecoveryRecord:
    time_s: float  # the failure
    step: int  # steps completed when it hit
    kind: str  # rollback | partial | rebuild | handover | peer | restart | unrecoverable
    recovery_s: float  # failure -> training resumes
    reexec_steps: int
    time_lost_s: float  # the runtime's definition (module docstring)
    lost_samples: int
    label: str = ""


@dataclass
class Outcome:
    strategy: str
    steps: int  # steps the job had to train
    steps_done: int
    wall_s: float
    finished: bool
    stall_s: float = 0.0  # checkpoint stalls on the critical path
    shrink_lost_s: float = 0.0  # throughput lost while running on fewer ranks, in seconds
    checkpoints: int = 0
    interval_steps: int | None = None
    interval_rule: str = ""
    lost_samples: int = 0
    unrecoverable: int = 0
    global_batch: int = 1
    step_s: float = 0.0  # none's step time (the goodput reference)
    recoveries: list[RecoveryRecord] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return len(self.recoveries)

    @property
    def time_lost_s(self) -> float:
        return sum(r.time_lost_s for r in self.recoveries)

    @property
    def time_lost_per_failure_s(self) -> float:
        return self.time_lost_s / self.failures if self.recoveries else math.nan

    @property
    def ettr(self) -> float:
        if not self.finished or self.wall_s <= 0:
            return 0.0 if not self.finished else math.nan
        lost = self.time_lost_s + self.stall_s + self.shrink_lost_s
        return max(0.0, 1.0 - min(self.wall_s, lost) / self.wall_s)

    @property
    def goodput_ratio(self) -> float:
        """Kept samples per second over none's failure-free throughput (see the module docstring)."""
        if self.wall_s <= 0:
            return math.nan
        kept = max(0, self.steps_done * self.global_batch - self.lost_samples)
        return kept / self.wall_s / (self.global_batch / self.step_s)


class _Run:
    """The state of one simulated run (``simulate`` drives it)."""

    def __init__(self, p: Policy, steps: int, budget: EventBudget) -> None:
        self.p, self.steps, self.budget = p, steps, budget
        self.t = 0.0
        self.done = 0  # steps in the current state
        self.ckpt = 0  # steps covered by the last committed checkpoint (0: the initial state)
        self.next_ck = p.interval_steps
        self.next_partial = p.partial_every_steps
        self.slow_until = -math.inf  # rebuild window: steps starting before it run slower
        self.rebuilding: dict[int, float] = {}  # server -> end of its rebuild
        self.down: list[tuple[float, int, int]] = []  # shrink: (back at, servers, trainers) missing
        self.out = Outcome(p.name, steps, 0, 0.0, False, interval_steps=p.interval_steps,
                           interval_rule=p.interval_rule, global_batch=p.global_batch, step_s=p.step_s)

    # -- stepping ------------------------------------------------------------------------
    def shrink_factor(self) -> float:
        """How much longer a step takes on the ranks left (1: none missing)."""
        self.down = [d for d in self.down if d[0] > self.t]
        if not self.down:
            return 1.0
        s = sum(d[1] for d in self.down)
        tr = sum(d[2] for d in self.down)
        p = self.p
        return max(p.servers / max(1, p.servers - s), p.trainers / max(1, p.trainers - tr))

    def step_time(self) -> float:
        slow = self.t < self.slow_until
        return self.p.run_step_s * (1.0 + self.p.rebuild_slowdown if slow else 1.0) * self.shrink_factor()

    def segment(self, limit_step: int) -> tuple[int, float]:
        """(target step, seconds a step takes) of the next stretch of equal-speed steps."""
        target = min(self.steps, limit_step)
        for nxt in (self.next_ck, self.next_partial):
            if nxt is not None and nxt > self.done:
                target = min(target, nxt)
        st = self.step_time()
        ends = [self.slow_until] if self.t < self.slow_until else []
        ends += [d[0] for d in self.down]  # shrink: the speed changes when missing nodes come back
        if ends:  # steps starting before the change keep this speed, the rest not
            target = min(target, self.done + max(1, math.ceil((min(ends) - self.t) / st)))
        return target, st

    # -- failures ------------------------------------------------------------------------
    def fail(self, f: Failure, at: float, partial_s: float) -> None:
        """Apply failure ``f`` at wall time ``at``; ``partial_s`` of the current step is lost."""
        self.budget.spend(FAILURE_EVENTS)
        p, out = self.p, self.out
        d = self.done
        all_trainers = f.trainers >= p.trainers
        kind = p.kind
        if p.shrink and f.servers:  # re-placed onto the survivors (the runtime's on_shrink)
            left = p.servers - len(set(f.servers)) - sum(d[1] for d in self.down if d[0] > at)
            if kind == "rebuild":  # ecrm: a handover, or its fallback's rollback when a trainer died too
                kind = ("restart" if left < p.k + p.r else "handover" if not f.trainers
                        else "rollback" if p.interval_steps else "restart")
            else:
                kind = "rollback" if kind in ("rollback", "replay") and left >= 1 else "restart"
        if kind == "restart":
            how = "restart"
        elif f.servers or all_trainers:
            how = "unrecoverable" if kind == "rebuild" and self._overflows(f.servers, at) else kind
            if all_trainers and kind in ("partial", "replay", "rebuild"):
                how = "rollback" if p.interval_steps else "restart"
        else:
            how = "peer"
        extra = p.resume_extra_s + f.wait_s
        lost_samples = 0
        reexec = 0
        window = 0.0
        if how in ("restart", "unrecoverable"):
            recovery = p.latency_s
            new_done, reexec = 0, d
            self.ckpt = 0
            self.rebuilding.clear()
            self.slow_until = -math.inf
            if how == "unrecoverable":
                out.unrecoverable += 1
        elif how == "rollback":
            recovery = p.latency_s + p.restore_s
            new_done, reexec = self.ckpt, d - self.ckpt
        elif how == "partial":
            recovery = p.latency_s + p.restore_s
            new_done = d
            lost = (d - self.ckpt) * p.global_batch * len(set(f.servers)) / max(1, p.servers)
            lost_samples = int(lost * (1.0 - p.partial_coverage))
        elif how == "replay":
            recovery = p.latency_s + p.restore_s + (d - self.ckpt) * p.replay_s_per_step
            new_done = d
        elif how == "handover":
            # the survivors decode the lost shard and re-place every row before training resumes:
            # modelled as the rebuild's synchronous part plus a restore's worth of rows loaded
            # (every server receives about a shard), not calibrated on handovers
            recovery = p.latency_s + p.sync_restore_s + p.restore_s
            new_done = d
        elif how == "rebuild":
            recovery = p.latency_s + p.sync_restore_s
            new_done = d
            window = max(0.0, p.rebuild_s - p.sync_restore_s)
            end = at + recovery + extra + window  # the window is counted after the resume's extra
            for s in set(f.servers):
                self.rebuilding[s] = end
            self.slow_until = max(self.slow_until, end)
        else:  # peer copy of the dense replica (shrink: the survivors take the shards, no copy)
            recovery = p.latency_s + (0.0 if p.shrink else p.trainer_restore_s)
            new_done = d
        counted_window = window if p.rebuild_slowdown > BACK_TO_NORMAL_SLOWDOWN else 0.0
        lost = partial_s + recovery + extra + reexec * p.run_step_s + counted_window
        out.recoveries.append(RecoveryRecord(at, d, how, recovery, reexec, lost, lost_samples, f.label))
        out.lost_samples += lost_samples
        self.t = at + recovery + extra
        self.done = new_done
        if p.shrink and how not in ("restart", "unrecoverable"):
            self.down.append((self.t + p.grow_back_s, len(set(f.servers)), f.trainers))
        elif how in ("restart", "unrecoverable"):
            self.down.clear()  # a restarted job is scheduled whole again
        if self.p.interval_steps:
            self.next_ck = self.ckpt + self.p.interval_steps if new_done == self.ckpt else self.next_ck
            if how in ("restart", "unrecoverable"):
                self.next_ck = self.p.interval_steps
            if self.next_ck is not None and self.next_ck <= new_done:
                # the checkpoint due at this step was interrupted and training goes on from here
                # (partial, replay, rebuild, peer): the schedule's next one, or none would ever come
                self.next_ck = (new_done // self.p.interval_steps + 1) * self.p.interval_steps
        if self.p.partial_every_steps:
            if new_done < d:
                self.next_partial = new_done + self.p.partial_every_steps
            elif self.next_partial is not None and self.next_partial <= new_done:
                self.next_partial = (new_done // self.p.partial_every_steps + 1) * self.p.partial_every_steps

    def _overflows(self, lost: Iterable[int], at: float) -> bool:
        """More than ``r`` members of some stripe lost: the rebuilding servers plus ``lost``."""
        down = {s for s, end in self.rebuilding.items() if end > at} | set(lost)
        self.rebuilding = {s: e for s, e in self.rebuilding.items() if e > at}
        n, width, r = self.p.servers, self.p.k + self.p.r, self.p.r
        if len(down) <= r:
            return False
        pos = sorted(down)
        for a in pos:  # windows of `width` consecutive servers (cyclic) starting at a lost one
            if sum(1 for b in pos if (b - a) % n < width) > r:
                return True
        return False


_NEEDS_TIME_OR_STEP = "simulate: timed failures need time_s, at_steps ones need step"


def _arrivals(timed: Iterable[Failure]) -> Iterator[tuple[float, Failure]]:
    """``(time_s, failure)`` of each timed failure, lazily (``timed`` may be endless); ValueError at
    the first without a time."""
    for f in timed:
        if f.time_s is None:
            raise ValueError(_NEEDS_TIME_OR_STEP)
        yield f.time_s, f


def simulate(p: Policy, steps: int, timed: Iterable[Failure] = (), at_steps: Iterable[Failure] = (),
             cap_s: float = math.inf, budget: EventBudget | None = None) -> Outcome:
    """Run ``steps`` steps of policy ``p``; ``timed`` failures in time order (may be an endless
    iterator: it is consumed only as far as the run goes), ``at_steps`` ones by step. Each turn of
    the loop is paid from ``budget`` (a fresh ``MAX_EVENTS`` one if None)."""
    budget = budget or EventBudget()
    run = _Run(p, steps, budget)
    it = _arrivals(timed)
    nxt = next(it, None)  # the next timed failure: (its time, it)
    pending_steps = sorted(at_steps, key=lambda f: f.step if f.step is not None else -1)
    if any(f.step is None for f in pending_steps):
        raise ValueError(_NEEDS_TIME_OR_STEP)
    out = run.out
    while run.done < steps and run.t < cap_s:
        budget.spend()
        step_kill = pending_steps[0].step if pending_steps else None
        if step_kill is not None and step_kill <= run.done:
            f = pending_steps.pop(0)
            run.fail(f, run.t, 0.0)
            continue
        target, st = run.segment(step_kill if step_kill is not None else steps)
        if nxt is not None and nxt[0] <= run.t:  # arrived during a recovery: applied now
            f, nxt = nxt[1], next(it, None)
            run.fail(f, run.t, 0.0)
            continue
        end = run.t + (target - run.done) * st
        slower = 1.0 - 1.0 / run.shrink_factor()  # shrink: the share of the throughput missing
        if nxt is not None and nxt[0] < end:
            n = int((nxt[0] - run.t) // st)
            out.shrink_lost_s += (nxt[0] - run.t) * slower
            run.done += n
            at = nxt[0]
            partial = at - (run.t + n * st)
            f, nxt = nxt[1], next(it, None)
            run.fail(f, at, partial)
            continue
        out.shrink_lost_s += (end - run.t) * slower
        run.t, run.done = end, target
        if run.done >= steps:
            break
        if run.next_partial is not None and run.done == run.next_partial:
            run.t += p.partial_stall_s
            out.stall_s += p.partial_stall_s
            run.next_partial += p.partial_every_steps or 0
        if run.next_ck is not None and run.done == run.next_ck:
            stall_end = run.t + p.ckpt_stall_s
            if nxt is not None and nxt[0] < stall_end:
                at = max(nxt[0], run.t)
                f, nxt = nxt[1], next(it, None)
                run.fail(f, at, at - run.t)  # the checkpoint never commits
                continue
            run.t = stall_end
            out.stall_s += p.ckpt_stall_s
            out.checkpoints += 1
            run.ckpt = run.done
            run.next_ck = run.done + (p.interval_steps or 0)
    out.steps_done = run.done
    out.wall_s = run.t
    out.finished = run.done >= steps
    return out
