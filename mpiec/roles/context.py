"""What every rank knows: the ``RankContext`` built once at start-up.

Owns the per-rank view of the run: config, slot table (which world rank holds
which role slot), communicators, row placement, the strategy and its agent for
this rank, the local event log and the step counters; fault injection is
``faults.Injector`` (``faults``), strategies see the rank through
``strategies.env.RankEnv``. Invariant: everything
here except ``comms``, the event log and the counters is a pure function of
the config and the slot table, so every rank computes the same values.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mpiec.comm import Comms, tags
from mpiec.config import Config
from mpiec.failures.corruption import KEPT, Corrupter, keep_event, kept_dir, parse_flips
from mpiec.failures.faults import Injector, parse_kill_plans
from mpiec.layout import (
    MONITOR,
    SERVER,
    SPARE,
    TRAINER,
    RowPlacement,
    Slot,
    rank_nodes,
    stripe_placement,
    table_offsets,
)
from mpiec.roles.ledger import RecoveryLedger
from mpiec.roles.progress import Progress
from mpiec.strategies import get_strategy_class
from mpiec.strategies.api.agents import Agent, Coordinator, ParityAgent, ServerAgent, StepAgent, TrainerAgent
from mpiec.strategies.api.base import Strategy

if TYPE_CHECKING:
    from mpiec.roles.driver import Role
    from mpiec.roles.spawn import SpawnWatch

A = TypeVar("A", bound=Agent)

TRACE_EVENTS = os.environ.get("MPIEC_TRACE_EVENTS", "") not in ("", "0")

# Message tags between ranks and the monitor: the runtime's, in the tag table (``mpiec.comm.tags``).
TAG_STEPS, TAG_EVAL, TAG_DONE, TAG_CONTROL, TAG_FAILURE, TAG_STRATEGY = (
    tags.TAG_STEPS, tags.TAG_EVAL, tags.TAG_DONE, tags.TAG_CONTROL, tags.TAG_FAILURE, tags.TAG_STRATEGY)


@dataclass
class RankContext:
    cfg: Config
    slots: list[Slot]  # slot of every current world rank, indexed by world rank
    comms: Comms
    ulfm: bool
    t0_wall: float  # common wall-clock origin (monitor's, broadcast at start)
    out_path: Path
    strategy: Strategy = field(init=False)  # the factory of this rank's agents
    # the strategy's agent for the role this rank's role object was built for (``runner.make_agent``,
    # with the role); the role-specific accessors below (``coordinator()``, ``trainer_agent()``, ...)
    agent: Agent = field(init=False, repr=False)
    placement: RowPlacement = field(init=False)
    offsets: np.ndarray = field(init=False)
    ledger: RecoveryLedger = field(default_factory=RecoveryLedger)  # failures and recoveries so far
    faults: Injector = field(init=False)  # the planned kills, which fired, the switch armed here
    flips: Corrupter = field(init=False)  # the planned silent corruptions (``flip:`` plans)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)  # the step counters (roles.progress)
    run_id: str = ""  # the monitor's token for this run (kill notes carry it)
    epoch: int = 0  # recoveries completed (the same on every rank)
    awaiting_restore: bool = False  # promoted, state not restored yet
    role_slot: Slot | None = None  # the slot the rank's current role object was built for
    role: Role | None = None  # that role object (``runner.make_role``): survives an interrupted recovery
    role_layout: tuple[int, int] = (0, 0)  # (trainers, servers) when that role object was built
    grow_at: int = -1  # layout.grow_back_steps: the step before which trainer 0 starts the growth
    resume_from: str = ""  # checkpoint root of ``mpiec run --resume``
    resumed_step: int = -1  # the checkpoint step a resumed run started from
    worker_args: list[str] = field(default_factory=list)  # how this worker was started (spawn reuses them)
    spawned: int = 0  # monitor: processes spawned so far (their first_rank follows n_ranks)
    spawn_watch: SpawnWatch | None = None  # monitor: the watch over a recovery that spawns (roles.spawn)
    procs: list[tuple[str, int]] = field(default_factory=list)  # (processor name, pid) by original world rank
    cpu_t0: float = 0.0  # process CPU clock when training started (``rank_info``'s cpu_s counts from it)

    def __post_init__(self) -> None:
        self.first_rank = self.comms.world.Get_rank()  # rank in the original world, for reports
        reset_peak_rss()  # the kernels are compiled (worker.warm_up) before the context is made
        self.strategy = get_strategy_class(self.cfg.strategy.name)(self.cfg)
        k, r = type(self.strategy).stripe_shape(self.cfg)
        self.offsets = table_offsets(self.cfg.data.cardinalities)
        self.placement = stripe_placement(self.cfg.layout, int(self.offsets[-1]), k, r)
        # node of every original world rank (layout.rank_nodes: the config's, or the hosts')
        self.nodes = rank_nodes(self.cfg.n_ranks, self.cfg.layout.ranks_per_node,
                                [h for h, _ in self.procs] or None)
        # original world rank of the process holding each slot (-1: unknown, e.g. spawned); updated
        # when a plan's slot table is adopted (recovery.carry_out)
        self.holders: dict[Slot, int] = {slot: r for r, slot in enumerate(self.slots)}
        self.gone: set[int] = set()  # original world ranks known dead
        # the name kill plans use for each slot of the table (``faults``): the slot as launched. A
        # spare or spawned process that takes a dead slot takes its name; a shrink's renumbered
        # survivors keep theirs and a dropped slot's name is held by nobody (its kills cannot fire)
        # until a growth gives it to a new process. Replaced by every plan's ``names`` (the same on
        # every rank, with ``slots``).
        self.names: dict[Slot, Slot] = {slot: slot for slot in self.slots}
        self.faults = Injector(self, parse_kill_plans(self.cfg.failures.kill, self.cfg))
        self.flips = Corrupter(self, parse_flips(self.cfg.failures.kill, self.cfg))

    # -- identity -----------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.comms.world.Get_rank()

    @property
    def slot(self) -> Slot:
        return self.slots[self.rank]

    def checkpoint_root(self) -> Path | None:
        """Where this run's checkpoints are: ``--resume DIR``'s root, else the strategy's (None: it
        writes none)."""
        return Path(self.resume_from) if self.resume_from else self.strategy.checkpoint_root(self.out_path)

    @property
    def kill_name(self) -> Slot:
        """The name kill plans use for this rank's slot (``names``)."""
        return self.names.get(self.slot, self.slot)

    @property
    def node(self) -> int:
        """This process's node (-1: none, e.g. a spawned replacement); fixed for its life."""
        return self.nodes[self.first_rank] if self.first_rank < len(self.nodes) else -1

    def node_of(self, slot: Slot) -> int:
        """Node of the process holding ``slot`` (-1: none or unknown)."""
        r = self.holders.get(slot, -1)
        return self.nodes[r] if 0 <= r < len(self.nodes) else -1

    def world_rank_of(self, role: str, index: int) -> int:
        return self.slots.index(Slot(role, index))

    @property
    def n_trainers(self) -> int:
        """Trainers in the current slot table: ``layout.trainers`` until an elastic recovery
        (``layout.replacement = "shrink"``) drops one; the same on every rank."""
        return sum(1 for s in self.slots if s.role == TRAINER)

    @property
    def layout_now(self) -> tuple[int, int]:
        """(trainers, servers) of the current slot table."""
        return self.n_trainers, self.n_servers

    @property
    def n_servers(self) -> int:
        """Servers in the current slot table: ``layout.servers`` until an elastic recovery drops one."""
        return sum(1 for s in self.slots if s.role == SERVER)

    def placement_for(self, servers: int) -> RowPlacement:
        """Every row's owner as a run started with ``servers`` servers places it (``--resume`` onto
        that count does the same)."""
        k, r = type(self.strategy).stripe_shape(self.cfg)
        layout = dataclasses.replace(self.cfg.layout, servers=servers)
        return stripe_placement(layout, int(self.offsets[-1]), k, r)

    def replace_placement(self) -> None:
        """After an elastic recovery changed the server count: the placement for ``n_servers``."""
        self.placement = self.placement_for(self.n_servers)

    @property
    def monitor_rank(self) -> int:
        return self.world_rank_of(MONITOR, 0)

    def in_step_loop(self) -> bool:
        """Holds a trainer, server or parity slot whose state is live (not awaiting restore)."""
        return self.slot.role not in (MONITOR, SPARE) and not self.awaiting_restore

    def tell_monitor(self, payload: Any, synchronous: bool = False) -> None:
        """An agent's message to the monitor's strategy (``Strategy.on_message``); small, eager, or
        ``synchronous``: back once the monitor received it (its receive loop handles it at once)."""
        from mpiec.comm import guard

        with guard("message to the monitor"):
            send = self.comms.world.ssend if synchronous else self.comms.world.send
            send((self.slot, payload), dest=self.monitor_rank, tag=TAG_STRATEGY)

    # -- the strategy's agent, typed for the role that calls it ---------------
    # ``runner.make_agent`` builds ``agent`` with the strategy's factory method for the role
    # (``Strategy.coordinator`` / ``trainer`` / ``server`` / ``parity`` / ``spare``); a plug-in's
    # factory that returns another kind of agent is named here, at its first use.
    def coordinator(self) -> Coordinator:
        """The monitor's agent (call it on the monitor only)."""
        return self._agent(Coordinator, "coordinator")

    def step_agent(self) -> StepAgent:
        """The agent of a trainer, server or parity rank (the step loop's hooks, ``restore``)."""
        return self._agent(StepAgent, self.slot.role)

    def trainer_agent(self) -> TrainerAgent:
        """A trainer's agent (call it on a trainer only)."""
        return self._agent(TrainerAgent, "trainer")

    def server_agent(self) -> ServerAgent:
        """A server's agent (call it on a server only)."""
        return self._agent(ServerAgent, "server")

    def parity_agent(self) -> ParityAgent:
        """A dedicated parity rank's agent (call it on a parity rank only)."""
        return self._agent(ParityAgent, "parity")

    def _agent(self, kind: type[A], factory: str) -> A:
        if not isinstance(self.agent, kind):
            raise TypeError(f"strategy '{self.cfg.strategy.name}': its {factory}() returned a "
                            f"{type(self.agent).__name__}, not a {kind.__name__} (strategies.agents)")
        return self.agent

    # -- time and events ----------------------------------------------------
    def now(self) -> float:
        """Seconds since the common start (wall clock, comparable across hosts)."""
        return time.time() - self.t0_wall

    def event(self, kind: str, step: int, rank: int = -1, slot: Slot | None = None,
              detail: str = "", at: float | None = None) -> None:
        """Log an event seen by this rank (``rank`` = the rank concerned; default: slot's own;
        ``at`` = when it happened, default now)."""
        s = slot or self.slot
        self.events.append((step, self.now() if at is None else at, kind,
                            self.first_rank if rank == self.rank else rank, s.role, s.index, detail))
        if kind in KEPT:  # a corruption found or repaired: in the result even if this rank dies later
            keep_event(kept_dir(self.out_path, self.run_id), self.first_rank, self.events[-1])
        if TRACE_EVENTS:  # MPIEC_TRACE_EVENTS=1: every event on stderr as it happens (debugging hangs)
            print(f"[trace {self.now():8.3f} rank {self.first_rank} {self.slot}] {kind} step {step} {s} "
                  f"{detail}", file=sys.stderr, flush=True)

    def final_report(self, role: Any) -> dict[str, Any]:
        """This rank's final report, ``role`` its role object (``runner.hand_in`` gathers every
        rank's at the monitor; a monitor that writes a cut run's result alone uses its own)."""
        return {"info": self.rank_info(), "events": self.events, "dead": False, "role": role.final_report(),
                "strategy": self.agent.summary(), "recoveries": self.ledger.recoveries}

    def rank_info(self) -> dict[str, Any]:
        return {"rank": self.first_rank, "role": self.slot.role, "role_index": self.slot.index,
                "host": socket.gethostname(), "node": self.node, "pid": os.getpid(),
                "peak_rss_mb": peak_rss_mb(), "cpu_s": time.process_time() - self.cpu_t0,
                "steps_run": self.progress.steps_run}


def reset_peak_rss() -> None:
    """Start the peak-RSS count afresh (Linux: VmHWM := VmRSS), after the kernels are compiled, so a
    run that compiled them does not show their compiler's memory as its own."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """Peak resident memory since ``reset_peak_rss`` (``VmHWM``), else since the process started."""
    import resource

    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def server_rows(ctx: RankContext, server: int) -> np.ndarray:
    """Global row id of each local slot of a server (-1 for stripe padding)."""
    return ctx.placement.slot_rows(server)


__all__ = ["RankContext", "server_rows"]
