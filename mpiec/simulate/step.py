"""One training step at cluster scale: the critical path of the roles' work, with overlap.

Owns how a step's time is built from the calibrated CPU per step of each role (``costs.StepCosts``)
and the hardware a job runs on (``Hardware``), and how much of a strategy's per-step work
(``ecrm``'s parity) lands on that path. The model follows the runtime's synchronous step
(docs/runtime.md): trainers send ids, servers gather and return rows, trainers compute forward and
backward, gradients go back, servers sum and apply them. So, per step:

* **trainer** = the trainer's CPU for its samples (``StepCosts.trainer`` of its work: samples per
  trainer × ``Job.trainer_work_per_sample``, the MLPs' parameters plus the bags' floats, so a larger
  model costs more per sample) / ``trainer_speedup`` (a GPU trainer is that many calibration cores);
* **server** = the server's CPU for the rows it looks up and updates (``StepCosts.server`` of their
  bytes: ids per server × row bytes) / ``server_threads`` (row-parallel work over that many cores);
* **comm** = the larger of a trainer's and a server's bytes on the wire at ``network_Bps``
  (rows pulled and gradients pushed, ``4 · dim`` bytes per id, plus the ring all-reduce of the dense
  gradients, ``2 · dense`` bytes): an assumption, not calibrated (one host has no network);
* **none's step** = trainer + server + comm: the three happen one after the other;
* **protection work** ``P`` per server (``ecrm``: its parity CPU for the delta bytes it sends, over
  ``server_threads``, plus those bytes on the wire) runs on the server's core **while the trainers
  compute and communicate** (with ``exchange = "overlap"`` a step's deltas are applied up to two
  steps later): the window is ``trainer + comm``, and only what does not fit is added,
  ``exposed = max(0, P − window)``. Without overlap (``overlap = False``: ranks share cores, as on a
  laptop) ``P`` is added in full.

``speed`` scales the whole step (every term alike): ``mpiec simulate --step-time S`` sets it so
that none's step is ``S``, which keeps every ratio of the calibrated costs.

Invariants: every term is finite and >= 0; ``step_s = trainer + server + comm``;
``run_step_s = step_s + exposed`` and ``exposed <= P``; with ``overlap`` the step never exceeds
``max(step_s, server + P)`` (the server's own core is the bottleneck then).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpiec.errors import MpiecError

from .costs import StepCosts
from .job import Job

__all__ = ["DEFAULT_NETWORK_GBPS", "Hardware", "StepTimes", "step_times"]

#: Network per rank, Gbit/s: CPR's production setup, 25 Gbit Ethernet ([S]: a secondary summary).
DEFAULT_NETWORK_GBPS = 25.0


@dataclass(frozen=True)
class Hardware:
    """What the job's nodes are, against the calibration machine's one core per rank."""

    trainer_speedup: float = 1.0  # a trainer's compute: this many calibration cores (a GPU: more)
    server_threads: int = 1  # cores a server's row-parallel work spreads over
    network_Bps: float = DEFAULT_NETWORK_GBPS * 1e9 / 8
    overlap: bool = True  # ranks on dedicated cores: a server's protection work overlaps the trainers'
    speed: float = 1.0  # every term of the step x this (set by --step-time)

    def __post_init__(self) -> None:
        for name in ("trainer_speedup", "network_Bps", "speed"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise MpiecError(f"hardware: {name} must be a number > 0, got {v!r}")
        if self.server_threads < 1:
            raise MpiecError(f"hardware: server_threads must be >= 1, got {self.server_threads}")

    def describe(self) -> str:
        return (f"trainer x{self.trainer_speedup:g} of a calibration core, {self.server_threads} core(s) per "
                f"server, network {self.network_Bps * 8 / 1e9:g} Gbit/s, "
                f"{'overlapped' if self.overlap else 'not overlapped (shared cores)'} protection work")


@dataclass(frozen=True)
class StepTimes:
    """One step's critical path, seconds (see the module docstring)."""

    trainer_s: float
    server_s: float
    comm_s: float
    protection_s: float  # P: a server's protection work per step
    exposed_s: float  # the part of P on the critical path

    @property
    def step_s(self) -> float:
        return self.trainer_s + self.server_s + self.comm_s

    @property
    def run_step_s(self) -> float:
        return self.step_s + self.exposed_s

    @property
    def window_s(self) -> float:
        """A server's idle time in none's step: the trainers' compute and the wire."""
        return self.trainer_s + self.comm_s

    def describe(self) -> str:
        ms = 1e3
        return (f"trainer {self.trainer_s * ms:.3g} ms + server {self.server_s * ms:.3g} ms + comm "
                f"{self.comm_s * ms:.3g} ms = {self.step_s * ms:.3g} ms; protection "
                f"{self.protection_s * ms:.3g} ms per server, {self.exposed_s * ms:.3g} ms exposed")


def comm_bytes(job: Job) -> float:
    """Bytes the busiest rank moves per step: a trainer's rows and gradients plus the dense
    all-reduce, or a server's rows and gradients."""
    wire = 4 * job.dim
    per_trainer = 2 * wire * job.lookups_per_step / max(1, job.trainers) + 2 * job.dense_bytes
    per_server = 2 * wire * job.lookups_per_step / max(1, job.servers)
    return max(per_trainer, per_server)


def step_times(costs: StepCosts, job: Job, hw: Hardware, protection_cpu_s: float = 0.0,
               protection_bytes: float = 0.0) -> StepTimes:
    """The step of ``job`` on ``hw``; ``protection_cpu_s`` / ``protection_bytes``: a server's
    per-step protection work at the calibration's speed (CPU seconds, bytes it sends)."""
    work = job.global_batch / max(1, job.trainers) * job.trainer_work_per_sample
    row_bytes = job.lookups_per_step / max(1, job.servers) * job.row_bytes
    trainer = costs.trainer.seconds(work) / hw.trainer_speedup
    server = costs.server.seconds(row_bytes) / hw.server_threads
    comm = comm_bytes(job) / hw.network_Bps
    protection = protection_cpu_s / hw.server_threads + protection_bytes / hw.network_Bps
    window = trainer + comm
    exposed = max(0.0, protection - window) if hw.overlap else protection
    f = hw.speed
    out = StepTimes(trainer * f, server * f, comm * f, protection * f, exposed * f)
    for name in ("trainer_s", "server_s", "comm_s", "protection_s", "exposed_s"):
        v = getattr(out, name)
        if not (math.isfinite(v) and v >= 0):
            raise MpiecError(f"the step model's {name} comes out as {v!r} with these costs and this job: "
                             "a cost or an input is out of range")
    return out
