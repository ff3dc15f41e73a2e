"""Synthetic result files for the analysis tests: ``write_run`` (one run), ``write_bench`` (a bench).

The timeline, evaluations and summaries are crafted so each derived figure has a value the tests
can compute by hand (``wall_time``, ``SAMPLES``, ``recovery``)."""

from __future__ import annotations

import json

import numpy as np

from mpiec.results import RANKS_DTYPE, TIMELINE_DTYPE, ResultWriter

#: The synthetic timeline: 5 warm-up steps of 1 s, then 0.1 s steps, 64 samples each.
WARMUP_DT, STEP_DT, SAMPLES = 1.0, 0.1, 64


def wall_time(steps: int) -> float:
    """Last ``t_end`` of ``write_run``'s timeline of ``steps`` steps."""
    return min(steps, 5) * WARMUP_DT + max(0, steps - 5) * STEP_DT


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
    variant: str | None = None,
    kill_plan: list[str] | None = None,
    config: dict | None = None,
    auc: float | None = None,
    logloss: float = 0.55,
    checksum: str = "c0ffee",
    rss_mb: list[float] | None = None,
    checkpoints: list[tuple[int, str, int]] | None = None,
    recoveries: list[dict] | None = None,
    final_model: tuple[np.ndarray, np.ndarray] | None = None,
):
    """A result file. ``kill_plan`` goes to ``config.failures.kill`` (the twin pairing ignores it),
    ``auc`` is the last evaluation's AUC, ``recoveries`` the ``recovery_breakdown`` list, ``final_model``
    (dense, embeddings) the ``final_model`` group."""
    cfg = {"strategy": {"name": strategy}, "seed": seed, **(config or {})}
    if kill_plan is not None:
        cfg["failures"] = {"kill": kill_plan}
    attrs = {
        "config": cfg,
        "strategy": strategy,
        "seed": seed,
        "failure_mode": "emulated" if emulated else "ulfm",
        "ulfm": not emulated,
    }
    if variant is not None:
        attrs["variant"] = variant
    w = ResultWriter(path, attrs)
    tl = np.zeros(steps, TIMELINE_DTYPE)
    tl["step"] = np.arange(steps)
    tl["dt"] = STEP_DT
    tl["dt"][:5] = WARMUP_DT  # slow warm-up steps
    tl["t_end"] = np.cumsum(tl["dt"])
    tl["samples"] = SAMPLES
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
    evals = list(range(9, steps, 10))
    for s in evals:
        value = auc if auc is not None and s == evals[-1] else 0.70 + s / 10000
        w.add_eval(s, (s + 1) * SAMPLES, value, logloss, 0.75)
    for step, kind, nbytes in checkpoints or []:
        w.add_checkpoint(step, kind, nbytes, 0.01, 32)
    if rss_mb is not None:
        ranks = np.zeros(len(rss_mb), RANKS_DTYPE)
        ranks["rank"] = np.arange(len(rss_mb))
        ranks["peak_rss_mb"] = rss_mb
        w.set_ranks(ranks)
    if final_model is not None:
        w.set_final_model(*final_model)
    full = {"throughput_sps": throughput, "lost": lost, "param_checksum": "" if lost else checksum}
    if recoveries is not None:
        full["recovery_breakdown"] = json.dumps(recoveries)
        full["recoveries"] = len(recoveries)
        full["time_lost_s"] = sum(r["time_lost_s"] for r in recoveries)
        full["recovery_latency_s"] = float(np.mean([r["recovery_s"] for r in recoveries]))
    full.update(summary or {})
    w.close(full)
    return path


def recovery(kill: float, *, detection=0.1, shrink_agree=0.2, plan=0.0, replace=0.05, restore=0.3,
             back_to_normal=0.15, reexec=0.0) -> dict:
    """One ``recovery_breakdown`` entry whose phases add up to its ``time_lost_s``."""
    rec = {"kill": kill, "detection_s": detection, "shrink_agree_s": shrink_agree, "plan_s": plan,
           "replace_s": replace, "restore_s": restore, "back_to_normal_s": back_to_normal,
           "reexec_s": reexec}
    rec["recovery_s"] = detection + shrink_agree + plan + replace + restore
    rec["time_lost_s"] = rec["recovery_s"] + back_to_normal + reexec
    return rec


def write_bench(d):
    """What ``mpiec bench`` leaves: none, ckpt, cpr and ecrm failure-free and under one server kill
    (none lost, ckpt lossless with a rollback, cpr lossy, ecrm lossless and fast)."""
    d.mkdir(parents=True, exist_ok=True)
    plan = ["server:1@step=20"]
    ck = [(s, "full", 800_000) for s in (9, 19, 29, 39, 49)]
    write_run(d / "none-ff.h5", "none", throughput=1000.0, kill_plan=[], rss_mb=[100, 200, 200],
              summary={"ettr": 1.0, "goodput_sps": 1000.0})
    write_run(d / "ckpt-ff.h5", "ckpt", throughput=800.0, kill_plan=[], rss_mb=[100, 210, 210],
              checkpoints=ck, summary={"ettr": 0.9, "goodput_sps": 800.0, "checkpoint_bytes": 4_000_000,
                                       "checkpoint_interval_steps": 10, "checkpoint_interval_rule": "young",
                                       "checkpoint_interval_s": 1.25, "checkpoint_critical_s": 0.4})
    write_run(d / "cpr-ff.h5", "cpr", throughput=850.0, kill_plan=[], rss_mb=[100, 210, 210],
              checkpoints=ck, checksum="c0ffee",
              summary={"checkpoint_bytes": 4_000_000, "checkpoint_interval_steps": 10,
                       "checkpoint_interval_rule": "pls", "pls": 0.0})
    write_run(d / "ecrm-ff.h5", "ecrm", throughput=950.0, kill_plan=[], rss_mb=[100, 260, 260],
              summary={"ettr": 1.0, "goodput_sps": 950.0, "parity_bytes": 3_000_000})
    write_run(d / "none-kill.h5", "none", throughput=900.0, steps=21, kill_at=19, kill_plan=plan,
              lost=True, summary={"lost_samples": 29 * SAMPLES, "ettr": 0.0, "goodput_sps": 0.0,
                                  "abort_reason": "strategy none does not recover from failures"})
    write_run(d / "ckpt-kill.h5", "ckpt", throughput=700.0, kill_at=20, kill_plan=plan, checkpoints=ck,
              recoveries=[recovery(5.5, reexec=0.1)], summary={"checkpoint_bytes": 4_000_000})
    write_run(d / "cpr-kill.h5", "cpr", throughput=800.0, kill_at=20, kill_plan=plan, checkpoints=ck,
              auc=0.7, logloss=0.56, checksum="beef", recoveries=[recovery(5.5, restore=0.1)],
              summary={"checkpoint_bytes": 4_000_000, "pls": 0.05})
    write_run(d / "ecrm-kill.h5", "ecrm", throughput=940.0, kill_at=20, kill_plan=plan,
              recoveries=[recovery(5.5, restore=0.02, back_to_normal=0.0)],
              summary={"parity_bytes": 3_000_000})
    return d
