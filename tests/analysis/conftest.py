"""Fixtures for the analysis tests: small synthetic result files."""

from __future__ import annotations

import numpy as np
import pytest

from mpiec.results import TIMELINE_DTYPE, ResultWriter


def write_run(
    path,
    strategy: str,
    *,
    seed: int = 1,
    throughput: float = 1000.0,
    steps: int = 50,
    kill_at: int | None = None,
    emulated: bool = False,
    lost: bool = False,
    summary: dict | None = None,
):
    w = ResultWriter(path, {
        "config": {"strategy": {"name": strategy}, "seed": seed},
        "strategy": strategy,
        "seed": seed,
        "failure_mode": "emulated" if emulated else "ulfm",
        "ulfm": not emulated,
    })
    tl = np.zeros(steps, TIMELINE_DTYPE)
    tl["step"] = np.arange(steps)
    tl["dt"] = 0.1
    tl["dt"][:5] = 1.0  # slow warm-up steps
    tl["t_end"] = np.cumsum(tl["dt"])
    tl["samples"] = 64
    tl["t_data"] = 0.01
    tl["t_compute"] = 0.06
    tl["t_comm"] = 0.02
    tl["t_wait"] = 0.01
    w.add_steps(tl)
    if kill_at is not None:
        kind = "emulated_kill" if emulated else "kill"
        w.add_event(kill_at, float(tl["t_end"][kill_at]), kind, rank=3, role="server",
                    role_index=1, detail=f"server:1@step={kill_at}")
        w.add_event(kill_at + 1, float(tl["t_end"][kill_at + 1]), "detect", rank=3)
    for s in range(9, steps, 10):
        w.add_eval(s, (s + 1) * 64, 0.70 + s / 10000, 0.55, 0.75)
    full = {"throughput_sps": throughput, "lost": lost, "param_checksum": "c0ffee"}
    full.update(summary or {})
    w.close(full)
    return path


@pytest.fixture
def runs_dir(tmp_path):
    d = tmp_path / "results"
    (d / "sub").mkdir(parents=True)
    write_run(d / "none.h5", "none", throughput=1000.0)
    write_run(d / "sub" / "ecrm.h5", "ecrm", throughput=900.0, kill_at=20,
              summary={"recovery_latency_s": 0.25, "parity_bytes": 3 * 2**20})
    write_run(d / "cpr.h5", "cpr", throughput=800.0, kill_at=20, emulated=True,
              summary={"lost_samples": 128, "checkpoint_bytes": 4096})
    return d


@pytest.fixture
def make_run():
    """The ``write_run`` factory: ``make_run(path, strategy, **options)``."""
    return write_run
