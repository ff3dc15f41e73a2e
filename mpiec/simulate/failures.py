"""When nodes fail in a simulated job: per-node lifetime processes (exponential, Weibull, lognormal;
lemon nodes, repairs, correlated bursts), replayed times and traces, and the published failure
rates the docs use.

Owns the failure arrival processes of ``mpiec simulate`` (their command-line flags are
``failure_args.py``). Invariants:

* an arrival process yields ``Arrival(time_s, node, also, repair_s)`` in non-decreasing time,
  ``0 <= node < nodes``, ``also`` the other nodes lost at the same instant (distinct, sorted, never
  ``node``), ``repair_s`` how long the failed node(s) stay unavailable; it is a pure function of its
  parameters and the seed (the same seed gives the same failures, so every strategy of one trial
  sees the same failures: common random numbers);
* ``NodeRenewal``: every node runs a renewal process — a lifetime drawn from an exponential, a
  Weibull of ``shape`` or a lognormal of ``sigma``, scaled so its **mean is the node MTBF**
  (Weibull ``scale = MTBF / Γ(1 + 1/shape)``, lognormal ``mu = ln(MTBF) - sigma²/2``); a node's
  next lifetime starts when the spare takes its place, at the failure (``repair_holds_slot``: after
  the repair, when no spare stands in). All nodes start new at time 0, so ``shape < 1`` (infant
  mortality) and a large ``sigma`` front-load failures. Lemon nodes (``lemon_fraction`` of the
  nodes, ``lemon_factor`` times the failure rate), repairs and bursts draw from their own seeded
  streams: switching one on does not change the base lifetimes, and with all of them off the
  arrivals are the same as before they existed;
* ``Replay``: failures at given times, on given nodes or on nodes drawn with the seed;
* ``trace_arrivals``: a node fault trace (``mpiec.failures.traces.load_trace``: InfiniteHBD JSON or LANL
  CSV), its times divided by ``scale``, its node ids mapped onto the job's nodes by
  ``mpiec.failures.traces.trace_node_map`` (``sample``: one trace node per job node, the others dropped;
  ``fold``: every trace node mapped, the whole trace's arrivals land on the job); a failure's repair
  time, where the trace gives it, divided by ``scale`` too, is its ``repair_s``;
* ``PUBLISHED``: node MTBFs derived from published figures, each with its source and the
  arithmetic (``docs/simulate.md`` quotes them).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from mpiec.errors import MpiecError

__all__ = ["BURST_SIZES", "INFINITEHBD_BURSTS", "INFINITEHBD_LEMONS", "INFINITEHBD_REPAIR_H",
           "LEMON_FACTORS", "LIFETIME_LAWS", "LOGNORMAL_SIGMAS", "PUBLISHED", "REPAIR_LAWS", "WEIBULL_SHAPES",
           "Arrival", "ArrivalProcess", "NodeRenewal", "Published", "Replay", "Schedule", "trace_arrivals"]

HOUR_S = 3600.0
#: Weibull shapes a node lifetime may have: published fits are 0.5 to 1.5 (infant mortality below 1);
#: below 0.1 the mean's Γ(1 + 1/shape) leaves floating point (overflow near 0.006).
WEIBULL_SHAPES = (0.1, 100.0)
LIFETIME_LAWS = ("exponential", "weibull", "lognormal")
#: Lognormal sigmas a node lifetime may have. At sigma 4 the median lifetime is MTBF x e^-8
#: (3e-4 MTBF): almost every node fails at once and a few live for ages; beyond that the mean is
#: a number no run observes.
LOGNORMAL_SIGMAS = (0.1, 4.0)
#: The lognormal sigma when none is given: an assumption (1.0: median lifetime 0.61 x the mean), not
#: a published fit of node lifetimes that this module could check.
DEFAULT_LOGNORMAL_SIGMA = 1.0
#: How many times more often a lemon node fails than the others.
LEMON_FACTORS = (1.0, 1000.0)
#: Nodes one correlated failure may take down (the failed one included).
BURST_SIZES = (2, 256)
REPAIR_LAWS = ("fixed", "exponential")

#: Lemon nodes fitted on the InfiniteHBD fault trace (stepfun-ai/InfiniteHBD-Trace, commit 7aacdc8:
#: 584 faults on the 400 GPU servers its README says it covers, 348 days): the per-server fault
#: counts are over-dispersed (mean 1.46, variance 3.75; 169 servers without a fault where a common
#: rate predicts 93). A two-class Poisson mixture with the mean held, fitted by maximum likelihood
#: over a grid (fraction 0.01..0.6, factor 1..40) in this repository, gives **26.5 % of the servers
#: failing 6.5 times as often** as the rest (log-likelihood -666 against -768 for a common rate);
#: those servers have 70 % of the faults. One trace, 400 servers, servers taken to be in service the
#: whole 348 days: an illustration of how uneven a real fleet is, not a law. Kokolis et al., "Revisiting
#: Reliability in Large-Scale Machine Learning Research Clusters" (Meta, arXiv:2410.21680, HPCA 2025)
#: report detecting and removing lemon nodes (as quoted in a secondary summary: large-job failures
#: from 14 % to 4 %); the share of lemon nodes in their clusters was not found in the sources read
#: here, so no figure of theirs is used.
INFINITEHBD_LEMONS = (0.265, 6.5)
#: Correlated failures in the same trace: 30 of its 529 fault instants take down several servers at
#: the same time (5.7 %), 2.83 servers on average (20 of 2, 5 of 3, 2 of 4, 1 of 6, 2 of 8):
#: ``(burst_p, burst_size)`` = (0.057, 3).
INFINITEHBD_BURSTS = (0.057, 3)
#: Repair times in the same trace (fault_start to fault_end of the same server and fault type):
#: median 20.4 h, mean 132.8 h, so far from fixed (an exponential's median is 0.69 x its mean).
INFINITEHBD_REPAIR_H = {"median": 20.4, "mean": 132.8}


@dataclass(frozen=True)
class Arrival:
    """One failure: at ``time_s`` (since the job started, wall-clock seconds) ``node`` fails, and the
    nodes of ``also`` with it (a correlated failure: distinct, sorted, ``node`` not among them).
    ``repair_s``: how long the failed node(s) stay unavailable (0: not modelled, or a spare stands in
    at once; the process's ``repair_holds_slot`` says whether the slot waited for it)."""

    time_s: float
    node: int
    also: tuple[int, ...] = ()
    repair_s: float = 0.0

    @property
    def nodes(self) -> tuple[int, ...]:
        """Every node this failure takes down, ``node`` first."""
        return (self.node, *self.also)


class ArrivalProcess(Protocol):
    def arrivals(self, nodes: int, seed: int) -> Iterator[Arrival]: ...

    def job_mtbf_s(self, nodes: int) -> float: ...

    def arrival_bound(self, nodes: int) -> float:
        """At most this many arrivals (inf: endless)."""
        ...

    def start_events(self, nodes: int) -> int:
        """Work before the first arrival, in events (the simulation's budget unit)."""
        ...

    def describe(self) -> str: ...


def _in(value: float, bounds: tuple[float, float], what: str) -> None:
    low, high = bounds
    if not low <= value <= high:  # also refuses nan
        raise MpiecError(f"{what} must be a number in [{low:g}, {high:g}], got {value!r}")


@dataclass(frozen=True)
class NodeRenewal:
    """Independent node lifetimes with mean ``mtbf_node_s`` (see the module's invariants).

    ``law``: ``exponential``, ``weibull`` (of ``shape``) or ``lognormal`` (of ``sigma``); None takes
    it from ``shape`` (1: exponential, else Weibull), as before the field existed.

    ``lemon_fraction`` of the nodes (``round(fraction x nodes)`` of them, chosen with the seed) have
    their MTBF divided by ``lemon_factor``. Off by default; ``INFINITEHBD_LEMONS`` is one trace's fit.

    ``repair_s``: mean time a failed node is away (``repair_law`` ``fixed`` or ``exponential``), on
    every ``Arrival.repair_s``. The job's spare takes the node's place at once and starts a fresh
    lifetime at the failure, unless ``repair_holds_slot``: then the slot has no spare and its next
    failure is ``failure + repair + lifetime`` (a node under repair cannot fail). One draw per
    arrival: the nodes of a burst are repaired together.

    ``burst_p``: the probability that a failure takes ``burst_size`` nodes down at once (the failed
    one and ``burst_size - 1`` others drawn with the seed, at most every other node), listed in
    ``Arrival.also``; each of them starts a fresh lifetime like the failed one. Off by default;
    ``INFINITEHBD_BURSTS`` is one trace's figure.
    """

    mtbf_node_s: float
    shape: float = 1.0
    law: Literal["exponential", "weibull", "lognormal"] | None = None
    sigma: float = DEFAULT_LOGNORMAL_SIGMA
    lemon_fraction: float = 0.0
    lemon_factor: float = 1.0
    repair_s: float = 0.0
    repair_law: Literal["fixed", "exponential"] = "exponential"
    repair_holds_slot: bool = False
    burst_p: float = 0.0
    burst_size: int = INFINITEHBD_BURSTS[1]

    def __post_init__(self) -> None:
        if not (self.mtbf_node_s > 0 and math.isfinite(self.mtbf_node_s)):
            raise MpiecError(f"node MTBF must be a number of seconds > 0, got {self.mtbf_node_s!r}")
        _in(self.shape, WEIBULL_SHAPES, "Weibull shape")
        law = self.law if self.law is not None else ("exponential" if self.shape == 1.0 else "weibull")
        if law not in LIFETIME_LAWS:
            raise MpiecError(f"lifetime law must be one of {', '.join(LIFETIME_LAWS)}, got {law!r}")
        if law != "weibull" and self.shape != 1.0:
            raise MpiecError(f"a Weibull shape ({self.shape:g}) needs the weibull lifetime law, not {law}")
        object.__setattr__(self, "law", law)
        _in(self.sigma, LOGNORMAL_SIGMAS, "lognormal sigma")
        _in(self.lemon_fraction, (0.0, 1.0), "lemon fraction")
        _in(self.lemon_factor, LEMON_FACTORS, "lemon factor")
        if not (self.repair_s >= 0 and math.isfinite(self.repair_s)):
            raise MpiecError(f"repair time must be a number of seconds >= 0, got {self.repair_s!r}")
        if self.repair_law not in REPAIR_LAWS:
            raise MpiecError(f"repair law must be one of {', '.join(REPAIR_LAWS)}, got {self.repair_law!r}")
        _in(self.burst_p, (0.0, 1.0), "burst probability")
        low, high = BURST_SIZES
        if not (isinstance(self.burst_size, int) and low <= self.burst_size <= high):
            raise MpiecError(f"burst size must be a whole number of nodes in {low}..{high}, "
                             f"got {self.burst_size!r}")

    @property
    def scale_s(self) -> float:
        """The Weibull scale whose mean is the node MTBF (the MTBF itself for shape 1)."""
        return self.mtbf_node_s / math.gamma(1.0 + 1.0 / self.shape)

    @property
    def mu(self) -> float:
        """The lognormal's log-mean whose mean is the node MTBF: ln(MTBF) - sigma²/2."""
        return math.log(self.mtbf_node_s) - self.sigma ** 2 / 2.0

    def _lifetimes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lifetimes of a node that is not a lemon (mean ``mtbf_node_s``)."""
        if self.law == "lognormal":
            return rng.lognormal(self.mu, self.sigma, n)
        if self.shape == 1.0:
            return rng.exponential(self.mtbf_node_s, n)
        return self.scale_s * rng.weibull(self.shape, n)

    def lemon_count(self, nodes: int) -> int:
        return math.floor(self.lemon_fraction * nodes + 0.5) if self.lemon_factor != 1.0 else 0

    def lemons(self, nodes: int, seed: int) -> frozenset[int]:
        """The lemon nodes of a job of ``nodes`` nodes under ``seed`` (their own stream)."""
        k = self.lemon_count(nodes)
        if not k:
            return frozenset()
        rng = np.random.default_rng([seed, 1])
        return frozenset(int(i) for i in rng.choice(nodes, size=k, replace=False))

    def arrivals(self, nodes: int, seed: int) -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)  # the lifetimes: the same stream as before lemons and bursts
        lemons = self.lemons(nodes, seed)
        lemon = 1.0 / self.lemon_factor
        repair_rng = np.random.default_rng([seed, 2]) if self.repair_s > 0 else None
        burst_rng = np.random.default_rng([seed, 3]) if self.burst_p > 0 and nodes > 1 else None
        first = self._lifetimes(rng, nodes)
        if lemons:
            first[list(lemons)] *= lemon
        # (time, node, generation): a node a burst took down gets a new lifetime, its old entry is stale
        heap = [(float(t), i, 0) for i, t in enumerate(first)]
        heapq.heapify(heap)
        generation: dict[int, int] = {}
        batch: list[float] = []  # lifetimes drawn in blocks: one numpy call per 1024 failures

        def lifetime(node: int) -> float:
            nonlocal batch
            if not batch:
                batch = self._lifetimes(rng, 1024).tolist()
            life = batch.pop()
            return life * lemon if node in lemons else life

        while True:
            t, node, gen = heapq.heappop(heap)
            if generation.get(node, 0) != gen:
                continue
            also: tuple[int, ...] = ()
            if burst_rng is not None and burst_rng.random() < self.burst_p:
                k = min(self.burst_size, nodes) - 1
                others = burst_rng.choice(nodes - 1, size=k, replace=False)
                also = tuple(sorted(int(j) + (1 if j >= node else 0) for j in others))
            repair = 0.0
            if repair_rng is not None:
                repair = (self.repair_s if self.repair_law == "fixed"
                          else float(repair_rng.exponential(self.repair_s)))
            yield Arrival(t, node, also, repair)
            start = t + repair if self.repair_holds_slot else t
            heapq.heappush(heap, (start + lifetime(node), node, gen))
            for j in also:
                g = generation.get(j, 0) + 1
                generation[j] = g
                heapq.heappush(heap, (start + lifetime(j), j, g))

    def job_mtbf_s(self, nodes: int) -> float:
        """Mean time between failures of a job on ``nodes`` nodes: 1 / the sum of the nodes' rates,
        a node's rate 1 / (its mean lifetime [+ the mean repair when the slot waits for it]) — the
        long-run renewal rate, whatever the law. A burst is one failure (its other nodes restart
        their lifetimes early, which the figure does not count)."""
        k = self.lemon_count(nodes)
        held = self.repair_s if self.repair_holds_slot else 0.0
        rate = (nodes - k) / (self.mtbf_node_s + held) + k / (self.mtbf_node_s / self.lemon_factor + held)
        return 1.0 / rate

    def arrival_bound(self, nodes: int) -> float:
        return math.inf

    def start_events(self, nodes: int) -> int:
        # a lifetime drawn and heaped per node (~0.2 µs, a fifth of an event), lemons drawn alike
        return (nodes + self.lemon_count(nodes)) // 5

    def describe(self) -> str:
        if self.law == "lognormal":
            law = f"lognormal sigma {self.sigma:g}"
        else:
            law = "exponential" if self.shape == 1.0 else f"Weibull shape {self.shape:g}"
        parts = [f"node MTBF {self.mtbf_node_s / HOUR_S:,.0f} h ({law})"]
        if self.lemon_fraction > 0 and self.lemon_factor != 1.0:
            parts.append(f"{100 * self.lemon_fraction:g} % lemon nodes failing {self.lemon_factor:g}x "
                         "as often")
        if self.repair_s > 0:
            slot = "the slot waits for it" if self.repair_holds_slot else "a spare stands in"
            parts.append(f"repair {self.repair_s / HOUR_S:g} h ({self.repair_law}; {slot})")
        if self.burst_p > 0:
            parts.append(f"{100 * self.burst_p:g} % of failures take {self.burst_size} nodes down")
        return ", ".join(parts)


@dataclass(frozen=True)
class Replay:
    """Failures at ``times_s``; on ``nodes`` (one per time) or, if None, on seeded random nodes;
    ``repairs_s`` (one per time, or None: 0) is each arrival's ``repair_s``."""

    times_s: tuple[float, ...]
    nodes: tuple[int, ...] | None = None
    what: str = "given failure times"
    repairs_s: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for t in self.times_s:
            if not (t >= 0 and math.isfinite(t)):
                raise MpiecError(f"failure times must be seconds >= 0, got {t!r}")
        if self.nodes is not None and len(self.nodes) != len(self.times_s):
            raise MpiecError("a replay needs one node per failure time")
        if self.repairs_s is not None:
            if len(self.repairs_s) != len(self.times_s):
                raise MpiecError("a replay needs one repair time per failure time")
            for r in self.repairs_s:
                if not (r >= 0 and math.isfinite(r)):
                    raise MpiecError(f"repair times must be seconds >= 0, got {r!r}")

    def arrivals(self, nodes: int, seed: int) -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)
        order = sorted(range(len(self.times_s)), key=lambda i: self.times_s[i])
        for i in order:
            node = self.nodes[i] if self.nodes is not None else int(rng.integers(nodes))
            if 0 <= node < nodes:  # a node the job does not use cannot hurt it
                yield Arrival(self.times_s[i], node,
                              repair_s=self.repairs_s[i] if self.repairs_s is not None else 0.0)

    def job_mtbf_s(self, nodes: int) -> float:
        """Observed mean gap between the failures that hit this job (inf with fewer than two)."""
        times = sorted(a.time_s for a in self.arrivals(nodes, 0))
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else math.inf

    def arrival_bound(self, nodes: int) -> float:
        return len(self.times_s)

    def start_events(self, nodes: int) -> int:
        return 0

    def describe(self) -> str:
        return f"{self.what} ({len(self.times_s)} failures)"


def trace_arrivals(path: str | Path, nodes: int, scale: float = 1.0, seed: int = 0,
                   mapping: Literal["fold", "sample"] = "sample") -> Replay:
    """A node fault trace replayed on a job of ``nodes`` nodes (times divided by ``scale``; a failure's
    repair time, where the trace gives one, divided alike, is its ``repair_s``, else 0)."""
    from mpiec.failures.traces import load_trace, trace_node_map

    if not (scale > 0 and math.isfinite(scale)):
        raise MpiecError(f"trace scale must be a number > 0, got {scale!r}")
    failures = load_trace(path)
    targets = [f"node:{i}" for i in range(nodes)]
    where = trace_node_map(failures, targets, seed=seed, mapping=mapping)
    kept = [(f.time_s / scale, int(where[f.node].split(":")[1]), (f.repair_s or 0.0) / scale)
            for f in failures if f.node in where]
    return Replay(tuple(t for t, _, _ in kept), tuple(n for _, n, _ in kept),
                  what=f"trace {Path(path).name} ({mapping}, time / {scale:g})",
                  repairs_s=tuple(r for _, _, r in kept))


class Schedule:
    """The arrivals of one trial, drawn once and shared by every strategy (common random numbers)."""

    def __init__(self, process: ArrivalProcess, nodes: int, seed: int) -> None:
        self._it = process.arrivals(nodes, seed)
        self._seen: list[Arrival] = []
        self._done = False

    def __getitem__(self, i: int) -> Arrival | None:
        """The ``i``-th arrival, or None when a finite process has no more."""
        while len(self._seen) <= i and not self._done:
            try:
                self._seen.append(next(self._it))
            except StopIteration:
                self._done = True
        return self._seen[i] if i < len(self._seen) else None


@dataclass(frozen=True)
class Published:
    """A node MTBF derived from a published failure count. ``servers``: the node count where the
    source gives servers, not GPUs (0: ``gpus // gpus_per_node``)."""

    key: str
    source: str
    failures: int
    days: float
    gpus: int
    gpus_per_node: int
    what: str
    servers: int = 0

    @property
    def nodes(self) -> int:
        return self.servers or self.gpus // self.gpus_per_node

    @property
    def mtbf_node_h(self) -> float:
        """Node-hours observed over failures: every failure taken as one node's."""
        return self.days * 24.0 * self.nodes / self.failures

    @property
    def job_mtbf_h(self) -> float:
        return self.days * 24.0 / self.failures

    def derivation(self) -> str:
        where = (f"{self.servers:,} servers" if self.servers
                 else f"{self.gpus:,} GPUs ({self.nodes:,} nodes of {self.gpus_per_node})")
        return (f"{self.failures} {self.what} in {self.days:g} days on {where}: "
                f"job MTBF {self.job_mtbf_h:.2f} h, "
                f"node MTBF = {self.days:g} d x 24 h x {self.nodes:,} nodes / {self.failures} = "
                f"{self.mtbf_node_h:,.0f} h")


PUBLISHED: dict[str, Published] = {
    "llama3": Published(
        key="llama3",
        source="Llama Team, AI @ Meta, \"The Llama 3 Herd of Models\", arXiv:2407.21783 (2024), "
               "section 3.3.4 and Table 5",
        failures=419, days=54.0, gpus=16384, gpus_per_node=8,
        what="unexpected interruptions of the Llama 3 405B pre-training job"),
    # the README's 400 servers and 348 days; the 584 faults counted in fault_trace.json (commit
    # 7aacdc8) by mpiec.failures.traces.load_trace, as docs/traces.md reports; GPUs per server not given
    "infinitehbd": Published(
        key="infinitehbd",
        source="stepfun-ai/InfiniteHBD-Trace (the fault trace of InfiniteHBD, SIGCOMM'25, "
               "arXiv:2502.03885): README (400 GPU servers, 348 days from 2024-03-30) and "
               "fault_trace.json at commit 7aacdc8 (584 fault_start events on 231 servers)",
        failures=584, days=348.0, gpus=0, gpus_per_node=0, servers=400,
        what="node faults (fault_start events) of an LLM pre-training cluster"),
}
