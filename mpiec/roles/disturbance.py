"""What else the machine did during a run: the monitor samples it at the start and end of training.

Owns the disturbance figures of the summary (schema v5, see ``docs/results-schema.md``):

* ``host_cores``: CPUs of the monitor's host (``os.cpu_count``);
* ``host_load_1m``: the 1-minute load average at the end of training (``/proc/loadavg``);
* ``other_cpu_share``: CPU time the host spent on processes outside the run over the training
  window, as a share of wall × cores: Δ busy jiffies of ``/proc/stat`` minus the run's own CPU;
* ``run_cpu_share``: CPU time the run's processes received over the window / (wall × cores);
* ``step_time_spread``: interquartile range of the step times over their median (after warm-up).

The run's own CPU is that of the ranks' parent processes (the MPI launcher's daemon) with their
reaped children (``cutime``/``cstime``: a killed rank's CPU stays counted) plus every live child,
so spawned replacements count too. Invariants: never raises (a missing ``/proc`` gives nan);
only the monitor's host is observed (a multi-host run's other hosts are not).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DisturbanceProbe", "step_time_spread"]

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
DISTURBANCE_KEYS = ("host_cores", "host_load_1m", "other_cpu_share", "run_cpu_share", "step_time_spread")


def _host_busy_s() -> float:
    """Busy CPU seconds of the whole host since boot (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        parts = f.readline().split()
    vals = [int(x) for x in parts[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(vals) - vals[3] - vals[4]) / _TICK


def _stat(pid: int) -> tuple[int, list[str]] | None:
    """(ppid, fields after the command name) of a process, None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()
    return int(rest[1]), rest


def _run_cpu_s(parents: set[int]) -> float:
    """CPU seconds of ``parents`` with their reaped children plus every live child of theirs."""
    total = 0.0
    for pid in parents:
        st = _stat(pid)
        if st is not None:  # utime stime cutime cstime: fields 14-17 of stat, 11-14 after the name
            total += sum(int(x) for x in st[1][11:15]) / _TICK
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in parents:
            continue
        st = _stat(int(entry))
        if st is not None and st[0] in parents:
            total += sum(int(x) for x in st[1][11:13]) / _TICK
    return total


def step_time_spread(dt: np.ndarray, warmup: int = 5) -> float:
    """Interquartile range of the step times over their median (nan with fewer than 4 steps)."""
    x = np.asarray(dt, dtype=np.float64)[warmup:]
    x = x[np.isfinite(x)]
    if len(x) < 4:
        return math.nan
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return float((q3 - q1) / med) if med > 0 else math.nan


@dataclass
class DisturbanceProbe:
    """Samples the host at ``start()`` and summarises the window in ``summary(dt)``."""

    pids: list[int]
    parents: set[int] = field(default_factory=set)
    t0: float = math.nan
    busy0: float = math.nan
    run0: float = math.nan

    def start(self) -> None:
        try:
            self.parents = {st[0] for st in map(_stat, self.pids) if st is not None} - {0, 1}
            self.t0 = time.monotonic()
            self.busy0 = _host_busy_s()
            self.run0 = _run_cpu_s(self.parents)
        except (OSError, ValueError, IndexError):
            self.t0 = math.nan

    def summary(self, dt: np.ndarray | None = None) -> dict[str, Any]:
        """The disturbance keys of the summary (nan where not measurable)."""
        cores = os.cpu_count() or 1
        out: dict[str, Any] = {"host_cores": cores, "host_load_1m": math.nan, "other_cpu_share": math.nan,
                               "run_cpu_share": math.nan,
                               "step_time_spread": step_time_spread(dt) if dt is not None else math.nan}
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                out["host_load_1m"] = float(f.read().split()[0])
            if math.isfinite(self.t0):
                wall = (time.monotonic() - self.t0) * cores
                busy = _host_busy_s() - self.busy0
                run = _run_cpu_s(self.parents) - self.run0
                if wall > 0:
                    out["run_cpu_share"] = max(0.0, run / wall)
                    out["other_cpu_share"] = min(1.0, max(0.0, (busy - run) / wall))
        except (OSError, ValueError, IndexError):
            pass
        return out
