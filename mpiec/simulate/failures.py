"""When nodes fail in a simulated job: per-node MTBF processes, replayed times and traces, and the
published failure rates the docs use.

Owns the failure arrival processes of ``mpiec simulate``. Invariants:

* an arrival process yields ``Arrival(time_s, node)`` in non-decreasing time, ``0 <= node < nodes``;
  it is a pure function of its parameters and the seed (the same seed gives the same failures, so
  every strategy of one trial sees the same failures: common random numbers);
* ``NodeRenewal``: every node runs a renewal process — a lifetime drawn from an exponential
  (``shape = 1``) or a Weibull distribution of that shape, scaled so its **mean is the node MTBF**
  (``scale = MTBF / Γ(1 + 1/shape)``); the spare that takes a failed node's place starts a fresh
  lifetime at the failure (repair is off the job's critical path). All nodes start new at time 0,
  so ``shape < 1`` (infant mortality) front-loads failures;
* ``Replay``: failures at given times, on given nodes or on nodes drawn with the seed;
* ``trace_arrivals``: a node fault trace (``mpiec.traces.load_trace``: InfiniteHBD JSON or LANL
  CSV), its times divided by ``scale``, its node ids mapped onto the job's nodes by
  ``mpiec.traces.trace_node_map`` (``sample``: one trace node per job node, the others dropped;
  ``fold``: every trace node mapped, the whole trace's arrivals land on the job);
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

__all__ = ["PUBLISHED", "WEIBULL_SHAPES", "Arrival", "ArrivalProcess", "NodeRenewal", "Published", "Replay",
           "Schedule", "trace_arrivals"]

HOUR_S = 3600.0
#: Weibull shapes a node lifetime may have: published fits are 0.5 to 1.5 (infant mortality below 1);
#: below 0.1 the mean's Γ(1 + 1/shape) leaves floating point (overflow near 0.006).
WEIBULL_SHAPES = (0.1, 100.0)


@dataclass(frozen=True)
class Arrival:
    time_s: float  # since the job started, wall-clock seconds
    node: int


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


@dataclass(frozen=True)
class NodeRenewal:
    """Independent node lifetimes with mean ``mtbf_node_s``: exponential, or Weibull of ``shape``."""

    mtbf_node_s: float
    shape: float = 1.0

    def __post_init__(self) -> None:
        if not (self.mtbf_node_s > 0 and math.isfinite(self.mtbf_node_s)):
            raise MpiecError(f"node MTBF must be a number of seconds > 0, got {self.mtbf_node_s!r}")
        low, high = WEIBULL_SHAPES
        if not low <= self.shape <= high:  # also refuses nan
            raise MpiecError(f"Weibull shape must be a number in [{low:g}, {high:g}], got {self.shape!r}")

    @property
    def scale_s(self) -> float:
        return self.mtbf_node_s / math.gamma(1.0 + 1.0 / self.shape)

    def _lifetimes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.shape == 1.0:
            return rng.exponential(self.mtbf_node_s, n)
        return self.scale_s * rng.weibull(self.shape, n)

    def arrivals(self, nodes: int, seed: int) -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)
        heap = [(float(t), i) for i, t in enumerate(self._lifetimes(rng, nodes))]
        heapq.heapify(heap)
        batch: list[float] = []  # lifetimes drawn in blocks: one numpy call per 1024 failures
        while True:
            t, node = heapq.heappop(heap)
            yield Arrival(t, node)
            if not batch:
                batch = self._lifetimes(rng, 1024).tolist()
            heapq.heappush(heap, (t + batch.pop(), node))

    def job_mtbf_s(self, nodes: int) -> float:
        """Mean time between failures of a job on ``nodes`` nodes (long-run: MTBF / nodes)."""
        return self.mtbf_node_s / nodes

    def arrival_bound(self, nodes: int) -> float:
        return math.inf

    def start_events(self, nodes: int) -> int:
        return nodes // 5  # a lifetime drawn and heaped per node: ~0.2 µs, a fifth of an event

    def describe(self) -> str:
        law = "exponential" if self.shape == 1.0 else f"Weibull shape {self.shape:g}"
        return f"node MTBF {self.mtbf_node_s / HOUR_S:,.0f} h ({law})"


@dataclass(frozen=True)
class Replay:
    """Failures at ``times_s``; on ``nodes`` (one per time) or, if None, on seeded random nodes."""

    times_s: tuple[float, ...]
    nodes: tuple[int, ...] | None = None
    what: str = "given failure times"

    def __post_init__(self) -> None:
        for t in self.times_s:
            if not (t >= 0 and math.isfinite(t)):
                raise MpiecError(f"failure times must be seconds >= 0, got {t!r}")
        if self.nodes is not None and len(self.nodes) != len(self.times_s):
            raise MpiecError("a replay needs one node per failure time")

    def arrivals(self, nodes: int, seed: int) -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)
        order = sorted(range(len(self.times_s)), key=lambda i: self.times_s[i])
        for i in order:
            node = self.nodes[i] if self.nodes is not None else int(rng.integers(nodes))
            if 0 <= node < nodes:  # a node the job does not use cannot hurt it
                yield Arrival(self.times_s[i], node)

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
    """A node fault trace replayed on a job of ``nodes`` nodes (times divided by ``scale``)."""
    from mpiec.traces import load_trace, trace_node_map

    if not (scale > 0 and math.isfinite(scale)):
        raise MpiecError(f"trace scale must be a number > 0, got {scale!r}")
    failures = load_trace(path)
    targets = [f"node:{i}" for i in range(nodes)]
    where = trace_node_map(failures, targets, seed=seed, mapping=mapping)
    kept = [(f.time_s / scale, int(where[f.node].split(":")[1])) for f in failures if f.node in where]
    return Replay(tuple(t for t, _ in kept), tuple(n for _, n in kept),
                  what=f"trace {Path(path).name} ({mapping}, time / {scale:g})")


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
    """A node MTBF derived from a published failure count."""

    key: str
    source: str
    failures: int
    days: float
    gpus: int
    gpus_per_node: int
    what: str

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @property
    def mtbf_node_h(self) -> float:
        """Node-hours observed over failures: every failure taken as one node's."""
        return self.days * 24.0 * self.nodes / self.failures

    @property
    def job_mtbf_h(self) -> float:
        return self.days * 24.0 / self.failures

    def derivation(self) -> str:
        return (f"{self.failures} {self.what} in {self.days:g} days on {self.gpus:,} GPUs "
                f"({self.nodes:,} nodes of {self.gpus_per_node}): job MTBF {self.job_mtbf_h:.2f} h, "
                f"node MTBF = {self.days:g} d x 24 h x {self.nodes:,} nodes / {self.failures} = "
                f"{self.mtbf_node_h:,.0f} h")


PUBLISHED: dict[str, Published] = {
    "llama3": Published(
        key="llama3",
        source="Llama Team, AI @ Meta, \"The Llama 3 Herd of Models\", arXiv:2407.21783 (2024), "
               "section 3.3.4 and Table 5",
        failures=419, days=54.0, gpus=16384, gpus_per_node=8,
        what="unexpected interruptions of the Llama 3 405B pre-training job"),
}
