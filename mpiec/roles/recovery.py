"""Recovery after a failure: the sequence every strategy shares, on every rank.

Owns what happens between a detected failure and the next step:

1. **detect** — ULFM: revoke every communicator, shrink ``world``, agree on the
   last step every surviving trainer and server completed (``agree_min``);
   emulated: the victim leaves ``world`` by a split, the step is known to all;
2. **plan** — the monitor asks the strategy's coordinator (``Coordinator.plan``), picks spares
   for the dead slots (lowest spare for the lowest dead slot, spares on nodes
   that lost no process first), decides which planned kills fired, and
   broadcasts the plan with the authoritative slot table; every rank acts on
   that one plan;
3. **reconcile** — a trainer or server that completed one step more than the
   agreed committed step undoes it from its one-step undo record (unless every
   rank rolls back anyway);
4. **replace** — promoted spares take their slots, communicators are rebuilt
   in slot order (``comm.build_comms``), promoted ranks build their role;
5. **restore** — ROLLBACK: every trainer and server loads a checkpoint, the
   outcome agreed over ``world`` (a corrupted part makes everyone try the next
   candidate); other scopes: replaced trainers copy the dense replica from the
   lowest surviving trainer, replaced servers are restored by the strategy;
6. **resume** — training continues at ``plan.restored + 1``.

Invariants:

* a failure during any of this (a second kill, a spare dying as it is
  promoted) restarts the sequence at 1 with every slot dead since the last
  completed recovery (``Failure.dead`` only grows, so a plan's scope only
  widens); the monitor's slot table and the slots promoted so far carry over;
* every rank executes the same collectives in the same order (the plan is the
  monitor's, agreements are over ``world``), so no rank waits forever;
* a kill fires once: the kill that killed a slot's holder is consumed on every
  rank (in the plan), so neither a replacement nor a re-executed step fires it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from mpi4py import MPI

from mpiec.comm import Comms, PeerFailure, agree_min, build_comms, guard, intracomm, shrink
from mpiec.errors import MpiecError
from mpiec.failures.crashes import crash_line, run_crash_notes
from mpiec.layout import MONITOR, PARITY, SERVER, SPARE, TRAINER, Slot
from mpiec.roles.context import RankContext
from mpiec.roles.driver import Role, StateRole
from mpiec.roles.replicas import broadcast_replica
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope, ServerShard
from mpiec.strategies.replay import RebuildError

if TYPE_CHECKING:
    from mpiec.roles.trainer import Trainer

INT_MAX = 2**31 - 1
#: a planned growth (``layout.grow_back_steps``) cut this many times with no rank dead (its
#: ``MPI_Comm_spawn`` failing: open-mpi/ompi #12585) is given up, so a spawn that keeps failing
#: cannot hold the run in growth attempts until its time limit
GROWTH_ATTEMPTS = 3
_ROLE_RANK = {TRAINER: 0, "server": 1, "parity": 2, SPARE: 3, MONITOR: 4}


def slot_order(slot: Slot) -> tuple[int, int]:
    return _ROLE_RANK[slot.role], slot.index


@dataclass
class Detection:
    """One detected failure as this rank saw it (merged into the recovery in progress)."""

    failure: Failure
    times: dict[str, float] = field(default_factory=dict)
    where: str = ""


# -- 1. detect ---------------------------------------------------------------------

def shrink_world(ctx: RankContext) -> list[Slot]:
    """Revoke every communicator and shrink ``world`` to the survivors; the slots that died.

    Collective over the survivors of ``world`` (ULFM). The dead holders join ``ctx.gone``."""
    ctx.comms.revoke()
    old_slots = list(ctx.slots)
    with guard("shrink"):
        new_world, dead = shrink(ctx.comms.world)
    ctx.comms.free()
    ctx.comms = Comms(world=new_world, data=None, trainers=None)
    ctx.slots = [s for r, s in enumerate(old_slots) if r not in dead]
    ctx.gone.update(ctx.holders.get(old_slots[r], -1) for r in dead)
    note_dead_names(ctx, [old_slots[r] for r in dead])
    return [old_slots[r] for r in dead]


def note_dead_names(ctx: RankContext, dead: list[Slot]) -> None:
    """Remember the kill-plan names of slots that just died (``ctx.names`` is the one of the table
    they died in), for ``consumed_kills``."""
    names = [ctx.names.get(s, s) for s in dead]
    ctx.ledger.dead_names += [n for n in names if n not in ctx.ledger.dead_names]


def detect_ulfm(ctx: RankContext, exc: PeerFailure) -> Detection:
    """Revoke, shrink, agree. Collective over the survivors of ``world``."""
    detected = ctx.now()
    dead = shrink_world(ctx)
    # Remembered at once: if the agreement below fails (another death), the next attempt
    # still knows these slots died.
    ctx.ledger.unrecovered += [s for s in dead if s not in ctx.ledger.unrecovered]
    if all(s.role != MONITOR for s in ctx.slots):
        # The monitor is never a kill's target: survivors without it lost it to a crash (it left a
        # note: say so) or are the cut-off side of a network partition (the heartbeat detector
        # declared the rest dead). They stop instead of training apart.
        crashed = [n for n in run_crash_notes(ctx.out_path, ctx.run_id) if n.get("rank") == 0]  # the monitor
        if crashed:
            raise MonitorCrashed(f"the monitor crashed ({crashed[0]['error']}; its traceback is above): "
                                 "no result file")
        raise PartitionError(f"{ctx.slot} is cut off from the monitor with {len(ctx.slots) - 1} other "
                             "rank(s): a network partition; stopping")
    shrunk = ctx.now()
    # Trainers and servers vote their progress; the monitor, spares, parity ranks (their
    # steps only pace the parity pipeline) and promoted ranks whose state is not restored
    # yet vote "no constraint".
    mine = ctx.progress.completed + 1 if ctx.in_step_loop() and ctx.slot.role != PARITY else INT_MAX
    with guard("agreement on the committed step"):
        agreed = agree_min(ctx.comms.world, mine)
    committed = agreed - 1 if agreed < INT_MAX else -2  # -2: no trainer or server survived
    failure = Failure(step=committed + 1, committed=committed, dead=list(ctx.ledger.unrecovered),
                      survivors=list(ctx.slots))
    return Detection(failure, {"detect": detected, "shrink": shrunk, "agree": ctx.now()}, exc.where)


def detect_emulated(ctx: RankContext, data_ranks: list[int], step: int | None) -> Detection:
    """Emulated failure: the victims leave ``world`` by a split (collective over everyone)."""
    detected = ctx.now()
    from mpiec.layout import data_slot

    if step is not None:  # monitor and spares learn the step from the notice
        ctx.progress.current_step = step
    step = ctx.progress.current_step
    dead = [data_slot(r, ctx.n_trainers) for r in data_ranks]
    victim = ctx.slot in dead
    old = ctx.comms.world
    with guard("emulated shrink"):
        new = intracomm(old.Split(MPI.UNDEFINED if victim else 0, ctx.rank))
    ctx.comms.free()
    if victim:
        ctx.ledger.dead = True
        ctx.ledger.retired_world = old
        return Detection(Failure(step=step, committed=step - 1, dead=dead, emulated=True))
    new.Set_errhandler(MPI.ERRORS_RETURN)
    ctx.ledger.retired.append((old, [r for r, s in enumerate(ctx.slots) if s in dead]))
    ctx.comms = Comms(world=new, data=None, trainers=None)
    ctx.slots = [s for s in ctx.slots if s not in dead]
    ctx.ledger.unrecovered += [s for s in dead if s not in ctx.ledger.unrecovered]
    ctx.gone.update(ctx.holders.get(s, -1) for s in dead)
    note_dead_names(ctx, dead)
    t = ctx.now()
    failure = Failure(step=step, committed=step - 1, dead=list(ctx.ledger.unrecovered), emulated=True,
                      survivors=list(ctx.slots))
    return Detection(failure, {"detect": detected, "shrink": t, "agree": t}, "emulated death")


def merge(previous: Detection | None, new: Detection) -> Detection:
    """A failure during a recovery: the new detection, keeping the first one's detection time.

    (The dead slots need no merging: every detection reads them from ``ctx.ledger.unrecovered``.)
    """
    if previous is None:
        return new
    new.failure.emulated = previous.failure.emulated or new.failure.emulated
    new.times = {**new.times, "first_detect": previous.times.get("first_detect", previous.times["detect"])}
    return new


# -- 2. plan (monitor) ------------------------------------------------------------------

def consumed_kills(ctx: RankContext, failure: Failure) -> list[int]:
    """The planned kill that killed each dead slot's holder (at most one per slot, found by the
    slot's name in the kill plans, ``ctx.names``), and the node kill that killed each node with a
    dead holder (one per node)."""
    out = []
    now = ctx.now()
    # (failure.dead mixes numberings after an interrupted shrink; the names do not)
    names = ctx.ledger.dead_names or [ctx.names.get(s, s) for s in failure.dead]
    targets = [(slot.role, slot.index) for slot in names]
    targets += [("node", n) for n in dead_nodes(ctx, failure)]
    for role, index in targets:
        mine = [k for k in ctx.faults.kills if k.role == role and k.index == index
                and k.seq not in ctx.faults.consumed and k.seq not in out]
        timed = sorted((k for k in mine if k.time is not None and k.time <= now + 0.5),
                       key=lambda k: k.time or 0.0)  # (never None here)
        stepped = sorted((k for k in mine if k.step is not None and k.step <= failure.step + 1),
                         key=lambda k: k.step or 0)
        pick = timed[0] if timed else (stepped[0] if stepped else None)
        if pick is not None:
            out.append(pick.seq)
    return out


def dead_nodes(ctx: RankContext, failure: Failure) -> set[int]:
    """Nodes that lost a process since the last completed recovery (-1, no node, left out)."""
    return {n for n in (ctx.node_of(s) for s in failure.dead) if n >= 0}


def make_plan(ctx: RankContext, failure: Failure) -> RecoveryPlan:
    """Monitor: the strategy's plan plus spares, consumed kills and the slot table."""
    if failure.committed < -1:  # no trainer or server survived: the monitor knows how far it got
        failure.committed = ctx.progress.current_step - 1
        failure.step = ctx.progress.current_step
    # the survivors may be ahead of the progress the monitor heard of
    ctx.progress.current_step = max(ctx.progress.current_step, failure.committed + 1)
    # trainer 0's planned growth (layout.grow_back_steps): the revoke it started, at the step it was due
    grow = not failure.dead and 0 <= ctx.grow_at <= failure.committed + 1 and not ctx.ledger.relayout
    given_up = grow and ctx.ledger.growth_attempts >= GROWTH_ATTEMPTS
    if given_up:  # its spawn failed again and again with no rank dead: go on without growing
        grow = False
    ctx.ledger.growth_attempts += int(grow)
    ctx.ledger.empty_failures = 0 if failure.dead or grow else ctx.ledger.empty_failures + 1
    crashes = run_crash_notes(ctx.out_path, ctx.run_id)
    slots = list(ctx.slots)  # the plan's table: spares promoted into their slots below (or by ``plan_grow``)
    if crashes:  # a rank died of an exception: a bug to report, not a failure to recover from
        plan = RecoveryPlan.abort(f"{crash_line(crashes)} (a crash, not a failure: not recovered)")
    elif ctx.ledger.empty_failures > 3:  # an MPI error that is no rank's death, again and again
        plan = RecoveryPlan.abort("repeated MPI errors without a failed process (see the ranks' messages)")
    elif grow:
        plan = plan_grow(ctx, slots)
    else:
        plan = ctx.coordinator().plan(failure)
    plan.step, plan.committed = failure.step, failure.committed
    plan.epoch = ctx.epoch + 1
    # every kill fired so far, not only this failure's: a rank that a second failure cut off before
    # it received the interrupted attempt's plan learns that attempt's kills here (one that did not
    # fired the same kill again when its slot's step was re-executed, killing another server)
    plan.consumed = sorted(ctx.faults.consumed | set(consumed_kills(ctx, failure)))
    if not plan.aborts:
        held = set(slots)
        need = sorted((s for s in failure.dead if s.role != SPARE and s not in held), key=slot_order)
        # spares on a node that lost nothing first (a failing node may take its other ranks next)
        broken = dead_nodes(ctx, failure)
        spares = sorted((s for s in slots if s.role == SPARE),
                        key=lambda s: (ctx.node_of(s) in broken, slot_order(s)))
        # layout.grow_from = "spares": the spares are held for the growth, a trainer or server still shrinks
        held_for_growth = ctx.cfg.layout.grow_from == "spares"
        for dead in need:
            if held_for_growth and dead.role in (TRAINER, SERVER):
                plan.dropped.append(dead)
                continue
            if not spares and ctx.cfg.layout.replacement == "spawn":
                plan.spawn.append(dead)  # a fresh process, appended to world after the survivors
                continue
            if not spares and ctx.cfg.layout.replacement == "shrink" and dead.role in (TRAINER, SERVER):
                plan.dropped.append(dead)  # the survivors take its shards or rows (``shrink_slots``)
                continue
            if not spares:
                plan = ctx.coordinator().on_no_spare(failure, dead, plan)
                if plan.aborts:
                    break
                continue
            spare = spares.pop(0)
            plan.assignments[spare] = dead
            slots[slots.index(spare)] = dead
    if not plan.aborts and (plan.dropped or ctx.ledger.relayout):
        plan = plan_shrink(ctx, failure, plan, slots)
    if not plan.aborts:
        replaced = ctx.ledger.pending | set(plan.assignments.values()) | set(plan.spawn)
        trainers_left = [s for s in slots if s.role == TRAINER and s not in replaced]
        lost_trainer = any(s.role == TRAINER for s in replaced)
        if plan.scope is not Scope.ROLLBACK and not trainers_left and lost_trainer:
            plan = RecoveryPlan.abort("every trainer died: the dense replica is lost and strategy "
                                      f"{ctx.cfg.strategy.name} keeps no copy of it")
    plan.slots = slots + list(plan.spawn)
    plan.names = kill_names(ctx, plan)
    plan.failure = failure
    # when trainer 0 starts a growth: N steps after a shrink; not again after one (a failure during
    # it ends in a rollback); else as before
    grow_back = ctx.cfg.layout.grow_back_steps
    plan.grow_at = (-1 if plan.grow or plan.aborts else failure.committed + 1 + grow_back
                    if plan.dropped and grow_back and ctx.ulfm else ctx.grow_at)
    if given_up and not plan.aborts:
        plan.grow_at = -1
        plan.grow_short = (f"the growth back was cut {GROWTH_ATTEMPTS} times with no rank dead (its "
                           f"spawn failed): the run goes on with {layout_line(slots)}")
    if plan.grow_at >= 0 and ctx.cfg.layout.grow_from == "spares" and not any(
            s.role == SPARE for s in plan.slots):
        plan.grow_at = -1  # nothing to grow onto: no revoke for an empty growth (``plan.grow_short`` says so)
        plan.grow_short = f"no spare is left to grow back onto: the run goes on with {layout_line(slots)}"
    # a growth's new servers receive their rows from the others (``move_rows``), not a restore
    grown = {s for s in [*plan.spawn, *plan.assignments.values()] if s.role == SERVER} if plan.grow else set()
    replaced = ctx.ledger.pending | (set(plan.assignments.values()) | set(plan.spawn)) - grown
    plan.replaced = sorted(replaced, key=slot_order)
    return plan


def kill_names(ctx: RankContext, plan: RecoveryPlan) -> dict[Slot, Slot]:
    """Monitor: the kill-plan name of every slot of ``plan.slots`` (``RankContext.names``). A slot
    keeps its name through a spare or a spawned process taking it and through a shrink's
    renumbering (``plan.renamed``, old -> new); a slot a growth adds takes the lowest name of its
    role that no slot holds (a dropped one's)."""
    back = {new: old for old, new in plan.renamed.items()}
    names: dict[Slot, Slot] = {}
    for slot in plan.slots:
        old = back.get(slot, slot)
        if old in ctx.names and not (plan.grow and (slot in plan.spawn or slot in plan.assignments.values())):
            names[slot] = ctx.names[old]
    held = set(names.values())
    for slot in plan.slots:
        if slot not in names:
            free = (Slot(slot.role, i) for i in range(len(plan.slots)))
            names[slot] = next(n for n in free if n not in held)
            held.add(names[slot])
    return names


def shrink_slots(slots: list[Slot], role: str) -> dict[Slot, Slot]:
    """Elastic recovery: renumber the surviving ``role`` slots of the table ``slots`` (in place)
    to ``0 .. n - 1`` in index order, so index = ``data`` rank order holds again; returns
    ``{old slot: new slot}`` of those whose index changed."""
    live = sorted((s for s in slots if s.role == role), key=lambda s: s.index)
    renamed = {s: Slot(role, i) for i, s in enumerate(live) if s.index != i}
    for i, s in enumerate(slots):
        slots[i] = renamed.get(s, s)
    return renamed


def plan_shrink(ctx: RankContext, failure: Failure, plan: RecoveryPlan, slots: list[Slot]) -> RecoveryPlan:
    """Monitor, ``layout.replacement = "shrink"`` with no spare left for ``plan.dropped``: the
    survivors go on without those slots. A dropped trainer's virtual shards go to the others (no
    state is lost). Dropped servers re-place every row over the survivors, which the strategy
    must restore (``Coordinator.on_shrink``: a rollback or a handover), within its stripe width and
    the memory the receiving servers have; a strategy that declares it cannot
    (``Strategy.shrink_refusal``) is not asked. Otherwise the plan aborts with the reason."""
    servers = [s for s in plan.dropped if s.role == SERVER]
    # ``ctx.ledger.relayout``: an attempt that a failure cut short already re-placed the rows (its
    # slot table, renumbered, is the one in ``slots``): this one finishes that rollback
    if servers or ctx.ledger.relayout:
        refusal = type(ctx.strategy).shrink_refusal(ctx.cfg)
        if refusal:
            # before the strategy's own plan is used: a rollback of a strategy that cannot re-place
            # rows restores onto the old placement (ecsnap's snapshots died of IndexError there)
            return RecoveryPlan.abort(refusal)
        left = sum(1 for s in slots if s.role == SERVER)
        k, r = type(ctx.strategy).stripe_shape(ctx.cfg)
        if left < max(k + r, 1):
            return RecoveryPlan.abort(f"{', '.join(map(str, servers))} died with no spare: {left} "
                                      f"server(s) left, strategy {ctx.cfg.strategy.name} needs at least "
                                      f"{max(k + r, 1)} (layout.replacement = shrink)")
        why = shrink_room(ctx, left)
        if why:
            return RecoveryPlan.abort(why)
        # asked also when its plan is a rollback already: the rollback must be onto the new placement
        runtime = plan
        plan = ctx.coordinator().on_shrink(failure, plan)
        if plan.aborts:
            return plan
        if plan.handover and ctx.ledger.pending:
            return RecoveryPlan.abort("a failure came before slots promoted in an earlier recovery were "
                                      f"restored ({', '.join(sorted(map(str, ctx.ledger.pending)))}): "
                                      "their rows cannot be handed over")
        if plan.scope is not Scope.ROLLBACK and not plan.handover:
            return RecoveryPlan.abort(f"strategy {ctx.cfg.strategy.name}: on_shrink must roll back "
                                      f"every server onto the new placement or hand the rows over, it "
                                      f"answered {plan.scope}")
        plan.step, plan.committed, plan.epoch, plan.consumed = (runtime.step, runtime.committed,
                                                               runtime.epoch, runtime.consumed)
        plan.assignments, plan.spawn, plan.dropped = runtime.assignments, runtime.spawn, runtime.dropped
        plan.relayout = True
    if not any(s.role == TRAINER for s in slots):
        return RecoveryPlan.abort("every trainer died: nothing is left to take their virtual shards")
    plan.renamed = {**shrink_slots(slots, TRAINER), **shrink_slots(slots, SERVER)}
    return plan


def plan_grow(ctx: RankContext, slots: list[Slot]) -> RecoveryPlan:
    """Monitor, at trainer 0's planned growth (``layout.grow_back_steps`` after a shrink): a new
    process for every trainer and server slot the configured layout has and the run lacks, spawned
    (``layout.grow_from = "spawn"``) or a waiting spare promoted into it (``"spares"``: the lowest
    spare for the lowest slot, trainers first; the table ``slots`` is updated in place). The
    trainers always grow (a new one copies the dense replica; every trainer takes its new block of
    shards). The servers grow if the strategy agrees (``Coordinator.on_grow``): every row then moves
    to its owner under the larger placement (``roles.server.move_rows``), nothing is restored and no
    step re-executed; otherwise the run goes on with the servers it has. With fewer spares waiting
    than slots missing, what can be grown is (trainers first), ``plan.grow_short`` says what not;
    nothing is ever spawned in that mode."""
    lay = ctx.cfg.layout
    trainers = [Slot(TRAINER, i) for i in range(ctx.n_trainers, lay.trainers)]
    servers = [Slot(SERVER, i) for i in range(ctx.n_servers, lay.servers)]
    from_spares = lay.grow_from == "spares"
    onto = "held spares" if from_spares else "spawned ranks"
    plan = RecoveryPlan(Scope.COMMITTED, reason=f"grow back onto {onto}")
    plan.grow = True
    spares = sorted((s for s in slots if s.role == SPARE), key=slot_order)
    missing = trainers + servers
    if from_spares and len(spares) < len(missing):
        trainers, servers = trainers[:len(spares)], servers[:max(len(spares) - len(trainers), 0)]
    if servers:
        plan.relayout = True
        if not ctx.coordinator().on_grow(plan):
            plan.relayout, servers = False, []
            plan.reason += f" (trainers only: strategy {ctx.cfg.strategy.name} keeps its servers)"
    if not from_spares:
        plan.spawn = trainers + servers
        return plan
    for spare, slot in zip(spares, trainers + servers, strict=False):
        plan.assignments[spare] = slot
        slots[slots.index(spare)] = slot
    if len(spares) < len(missing):
        short = ", ".join(map(str, missing[len(spares):]))
        plan.grow_short = (f"{len(spares)} spare(s) held for growth, {len(missing)} slot(s) missing: "
                           f"{short} not grown back, the run goes on with {layout_line(slots)}")
    return plan


def layout_line(slots: list[Slot]) -> str:
    """``2 trainers, 3 servers`` of a slot table."""
    return (f"{sum(s.role == TRAINER for s in slots)} trainer(s), "
            f"{sum(s.role == SERVER for s in slots)} server(s)")


def shrink_room(ctx: RankContext, servers: int) -> str:
    """Monitor: "" if the ``servers`` survivors have memory for the rows they receive, else why not.

    The survivors receive the dead servers' rows (the new placement's shards minus the old, a
    row ``[weights | optimizer state]`` of float32) and read a checkpoint part while restoring;
    asked of this host's ``MemAvailable`` (one host; on several, each host's share is smaller)."""
    from mpiec.config import mem_total

    new = ctx.placement_for(servers)
    received = sum(new.n_local(s) for s in range(servers)) - sum(
        ctx.placement.n_local(s.index) for s in ctx.slots if s.role == SERVER)
    need = 2 * max(received, 0) * 4 * ctx.cfg.row_floats  # the rows received, and a part read beside them
    have = mem_total("MemAvailable")
    if have is not None and need > have:
        return (f"re-placing the rows of the dead server(s) over {servers} server(s) needs "
                f"{need / 2**20:.0f} MiB, this host has {have / 2**20:.0f} MiB available: give the run a "
                "spare or more memory")
    return ""


def share_plan(ctx: RankContext, failure: Failure) -> RecoveryPlan:
    """The monitor's plan, on every rank (collective over ``world``)."""
    plan = make_plan(ctx, failure) if ctx.rank == 0 else None
    # (a recovery's collectives may meet a peer that just died: Open MPI may say MPI_ERR_OTHER then)
    with guard("recovery plan", nonblocking_collective=True):
        plan = ctx.comms.world.bcast(plan, root=0)
    if ctx.rank == 0:  # promoted slots stay pending until a recovery completes
        ctx.ledger.pending = set(plan.replaced)
        ctx.ledger.relayout = ctx.ledger.relayout or plan.relayout
    return plan


# -- 3-6. reconcile, replace, restore, resume ------------------------------------------------

def log_detection(ctx: RankContext, detection: Detection, plan: RecoveryPlan) -> None:
    """The detect, shrink and agree events of this rank, at the agreed step; consume the kills."""
    ctx.faults.consumed.update(plan.consumed)
    dead = [str(s) for s in detection.failure.dead]
    for kind, detail in (("detect", detection.where), ("shrink", f"dead {dead}"),
                         ("agree", f"committed step {plan.committed}")):
        if kind in detection.times and not ctx.ledger.dead:
            ctx.event(kind, plan.step, ctx.rank, detail=detail, at=detection.times[kind])


def step_role(ctx: RankContext, role: Role | None) -> StateRole:
    """The role of a rank in the step loop (trainer, server, parity), where the recovery needs its
    state: ``runner.make_role`` built it for the rank's slot."""
    if role is None:
        raise RuntimeError(f"{ctx.slot}: no role object to restore")
    return cast(StateRole, role)


def agree_all(ctx: RankContext, ok: bool) -> bool:
    with guard("recovery agreement"):
        return bool(ctx.comms.world.Agree(1 if ok else 0))


def reconcile(ctx: RankContext, role: Role | None, plan: RecoveryPlan) -> None:
    """A trainer or server whose state holds the step after the agreed one undoes it from its
    one-step undo record, so that step, executed again, is applied once. Not called under a
    rollback (everyone restores anyway).

    "Holds" is ``progress.applied`` as well as ``progress.completed``: a server's table holds step ``s``
    from its apply on, and a failure seen inside the strategy's ``after_apply`` hook (``ecrm``
    polls and posts its parity exchange there) leaves ``s`` applied but not completed. Judged by
    ``completed`` alone that server kept ``s``, and re-executing ``s`` applied it twice (the
    contract test's ``ecrm`` rs k = 2, r = 2 run once ended with another checksum)."""
    if plan.scope is Scope.ROLLBACK or not ctx.in_step_loop():
        return
    if max(ctx.progress.completed, ctx.progress.applied) > plan.committed:
        step_role(ctx, role).undo_last(plan.committed)
        ctx.progress.completed = ctx.progress.applied = plan.committed
        ctx.event("undo", plan.step, ctx.rank, detail=f"undid step {plan.committed + 1}")


def carry_out(ctx: RankContext, role: Role | None, plan: RecoveryPlan, detection: Detection,
              make_role: Callable[[RankContext], Role], spawned: bool = False) -> Role | None:
    """Reconcile, replace, restore; return the role to resume. Collective over ``world``
    (``spawned``: this process was just spawned for a slot and joins here)."""
    t_plan = ctx.now()
    log_detection(ctx, detection, plan)

    # 3. reconcile: back to the committed step, unless everyone rolls back anyway
    reconcile(ctx, role, plan)

    # 4. replace
    if plan.spawn and not spawned:
        from mpiec.roles.spawn import spawn_replacements

        spawn_replacements(ctx, plan)
    me_before = ctx.role_slot  # the slot this rank's role was built for (an attempt that a
    ctx.slots = list(plan.slots)  # failure cut may have moved it)
    ctx.names = dict(plan.names) or {s: ctx.names.get(s, s) for s in ctx.slots}  # (with the table)
    for spare, dead in plan.assignments.items():  # the promoted processes go with their slots
        ctx.holders[dead] = ctx.holders.pop(spare, -1)
    for slot in plan.spawn:
        ctx.holders[slot] = -1
    moved = {new: ctx.holders.get(old, -1) for old, new in plan.renamed.items()}
    for old in plan.renamed:
        ctx.holders.pop(old, None)
    ctx.holders.update(moved)
    # The placement follows the slot table's server count on every rank, also on one whose earlier
    # attempt (cut short by a failure) did not get as far as this.
    if ctx.placement.servers != ctx.n_servers:
        ctx.replace_placement()
    # An elastic recovery changed the trainer count: every trainer rebuilds its role for the new
    # layout (its virtual shards, maybe its index) and keeps its live state (``relayout``).
    relayout = (not spawned and ctx.slot.role == TRAINER and me_before is not None
                and me_before.role == TRAINER
                and (ctx.slot != me_before or ctx.role_layout != ctx.layout_now))
    # Re-placed rows: every server's shard is rebuilt for the new placement (unless an earlier attempt
    # did) and restored by the plan's rollback, like a promoted spare's.
    replaced_rows = plan.relayout and ctx.slot.role == SERVER and not spawned
    rebuild_shard = replaced_rows and (ctx.slot != me_before or ctx.role_layout[1] != ctx.n_servers)
    promoted = spawned or (ctx.slot != me_before and not relayout) or rebuild_shard
    if promoted or replaced_rows:  # from now on this rank's state is not its slot's: neutral until restored
        ctx.awaiting_restore = True
    ctx.comms.free()
    with guard("communicator rebuild", nonblocking_collective=True):
        ctx.comms = build_comms(ctx.comms.world, ctx.slot, ctx.n_trainers, ctx.n_servers)
    handed = hand_over(ctx, plan, spawned) if plan.handover else []
    if handed is None:
        return None
    old_role = role
    why = f"dropped {', '.join(map(str, plan.dropped))}" if plan.dropped else "grown back"  # relayouts
    if promoted:
        ctx.faults.disarm()
        role = make_role(ctx)
        who = "a spawned process" if spawned else str(me_before)
        if rebuild_shard and me_before is not None and me_before.role == SERVER:
            rows = ctx.placement.n_local(ctx.slot.index)
            ctx.event("relayout", plan.step, ctx.rank,
                      detail=f"{me_before} -> {ctx.slot} of {ctx.n_servers} servers, {rows} rows ({why})")
        else:
            ctx.event("replace", plan.step, ctx.rank, detail=f"{who} takes {ctx.slot}")
    elif relayout:
        old_role = cast("Trainer", step_role(ctx, role))
        role = make_role(ctx)
        cast("Trainer", role).adopt(old_role)
        ctx.event("relayout", plan.step, ctx.rank,
                  detail=f"{me_before} -> {ctx.slot} of {ctx.n_trainers} trainers ({why})")
    if role is None:  # only a spawned process comes without a role, and it was promoted above
        raise RuntimeError(f"{ctx.slot}: no role to resume after the recovery")
    if (plan.grow or plan.handover) and plan.relayout and ctx.slot.role in (SERVER, PARITY):
        from mpiec.roles.server import Server, move_rows

        t_move = ctx.now()
        old_shards = [old_role.shard] if isinstance(old_role, Server) and not spawned else []
        sent, nbytes = move_rows(ctx, old_shards + handed, role if isinstance(role, Server) else None)
        if sent:
            ctx.event("rows_moved", plan.step, ctx.rank, detail=f"{sent} rows, {nbytes} bytes sent to "
                      f"their new owners in {ctx.now() - t_move:.3f} s")
    t_replaced = ctx.now()

    # 5. restore
    ctx.event("restore_start", plan.step, ctx.rank, detail=plan.scope.value if plan.scope else "")
    replaced = ctx.slot in plan.replaced
    restored = restore(ctx, role, plan, replaced)
    if restored is None:
        return None
    plan.restored = restored
    ctx.progress.completed = ctx.progress.applied = restored
    ctx.progress.current_step = restored + 1
    ctx.awaiting_restore = False
    ctx.epoch = plan.epoch
    ctx.grow_at = plan.grow_at
    role.after_recovery(plan)
    ctx.agent.on_recovered(plan)
    if ctx.rank == 0:
        ctx.ledger.pending = set()
        ctx.ledger.relayout = False
        ctx.ledger.growth_attempts = 0
    ctx.ledger.unrecovered = []
    ctx.ledger.dead_names = []
    ctx.event("restore_end", plan.step, ctx.rank, detail=f"resume at step {restored + 1}")
    if promoted or not ctx.faults.armed:
        ctx.faults.arm()
    times = {"epoch": plan.epoch, "replaced": t_replaced, "restored": ctx.now(), **detection.times}
    if plan.grow:
        times["grow"] = 1.0  # a planned growth, not a failure's recovery (``accounting``)
    if not spawned:  # a spawned process starts after the plan: its clock says nothing about planning
        times["plan"] = t_plan
    ctx.ledger.recoveries.append(times)
    return role


def hand_over(ctx: RankContext, plan: RecoveryPlan, spawned: bool) -> list[ServerShard] | None:
    """A shrink without rollback (``plan.handover``): the old agents of the trainers and servers
    rebuild the dropped servers' rows (``StepAgent.handover``) before the roles are rebuilt for
    the new layout; the outcome is agreed over ``world``. Returns the rows this server rebuilt
    (for ``move_rows``), or None on every rank when they cannot be rebuilt (``plan.reason`` says
    why). Collective over ``world``."""
    handed: list[ServerShard] = []
    logged = len(ctx.events)
    ok = True
    if ctx.slot.role in (TRAINER, SERVER, PARITY) and not spawned:
        try:
            shard = ctx.step_agent().handover(plan)
        except RebuildError as exc:
            ctx.event("rebuild_failed", plan.step, ctx.rank, detail=str(exc)[:250])
            ok = False
        else:
            handed = [shard] if shard is not None else []
    if agree_all(ctx, ok):
        return handed
    why = failure_cause(ctx, logged)
    plan.reason = f"strategy {ctx.cfg.strategy.name} could not rebuild the dropped servers' rows" + (
        f": {why}" if why else "")
    return None


def restore(ctx: RankContext, role: Role | None, plan: RecoveryPlan, replaced: bool) -> int | None:
    """Every rank: bring trainers and servers to one step; None if no candidate works."""
    in_loop = ctx.slot.role not in (MONITOR, SPARE)
    if plan.scope is Scope.ROLLBACK:
        for step in plan.candidates:
            ok = ctx.step_agent().restore(plan, step, replaced) if in_loop else True
            if agree_all(ctx, ok):
                return step
            ctx.event("restore_failed", plan.step, ctx.rank, detail=f"checkpoint of step {step} unusable")
        plan.reason = "no usable checkpoint: " + ", ".join(str(s) for s in plan.candidates)
        return None
    ok = True
    logged = len(ctx.events)
    if ctx.slot.role == TRAINER:
        copy_dense_replica(ctx, step_role(ctx, role), plan)
    elif in_loop and replaced:
        ok = ctx.step_agent().restore(plan, plan.committed, True)
    ok = ctx.agent.rebuild(plan) and ok
    if not agree_all(ctx, ok):
        why = failure_cause(ctx, logged)
        slots = ", ".join(str(s) for s in plan.replaced)
        plan.reason = f"strategy {ctx.cfg.strategy.name} could not restore {slots}" + (f": {why}" if why
                                                                                          else "")
        return None
    return plan.committed


def failure_cause(ctx: RankContext, since: int) -> str:
    """Collective over ``world``, after a failed restore agreement: the first cause a rank logged
    (a ``rebuild_failed`` or ``restore_failed`` event since event number ``since``), so the line
    that ends the run names it (e.g. the stripe beyond the code's tolerance); "" if none did."""
    mine = next((e[6] for e in ctx.events[since:] if e[2] in ("rebuild_failed", "restore_failed")), "")
    with guard("failure cause", nonblocking_collective=True):
        causes = ctx.comms.world.allgather(mine)
    return next((c for c in causes if c), "")


def copy_dense_replica(ctx: RankContext, role: StateRole, plan: RecoveryPlan) -> None:
    """Trainers: replaced trainers receive the dense replica of the lowest surviving trainer."""
    replaced = {s.index for s in plan.replaced if s.role == TRAINER}
    if not replaced:
        return
    source = min(i for i in range(ctx.n_trainers) if i not in replaced)
    broadcast_replica(ctx.comms.trainers_comm(), role, source, "dense replica copy")


__all__ = ["Detection", "detect_ulfm", "detect_emulated", "merge", "share_plan", "carry_out", "log_detection",
           "INT_MAX"]


def start_from_checkpoint(ctx: RankContext, role: Role) -> Role:
    """``mpiec run --resume``: every trainer and server loads the newest usable checkpoint.

    Collective over ``world``, before training starts; the same restore (and the same
    fallback to an older checkpoint when a part is corrupted) as a rollback.
    """
    steps = [s for s in ctx.coordinator().resume_steps() if s >= 0] if ctx.rank == 0 else None
    with guard("resume plan"):
        steps = ctx.comms.world.bcast(steps, root=0)
    if not steps:
        raise CheckpointResumeError(f"{ctx.resume_from} holds no complete checkpoint of strategy "
                                    f"{ctx.cfg.strategy.name}")
    plan = RecoveryPlan(Scope.ROLLBACK, candidates=steps, reason="resume from a checkpoint")
    restored = restore(ctx, role, plan, replaced=False)
    if restored is None:
        raise CheckpointResumeError(f"{ctx.resume_from}: no checkpoint could be restored "
                                    f"(tried steps {plan.candidates}; see the ranks' messages)")
    ctx.progress.completed = ctx.progress.applied = ctx.resumed_step = restored
    ctx.progress.current_step = restored + 1
    ctx.event("resume", restored + 1, ctx.rank,
              detail=f"from checkpoint of step {restored} in {ctx.resume_from}")
    return role


class PartitionError(MpiecError):
    """This rank survived a failure on the side of a network partition without the monitor."""


class MonitorCrashed(MpiecError):
    """The monitor died of an exception (its crash note says which): the others stop."""


class CheckpointResumeError(MpiecError):
    """``--resume`` found nothing to resume from (reported as bad input)."""
