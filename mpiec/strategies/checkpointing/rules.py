"""The checkpointing rules (``ckpt``, ``cpr``, ...): where checkpoints go, the storage model they go
through, Young's interval and CPR's portion-of-lost-samples model.

Invariants: pure functions of the config (no MPI, no I/O besides paths), so the
launcher, every rank and the unit tests compute the same numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mpiec.storage.model import StorageModel, resolve


def checkpoint_root(directory: str, out_path: Path) -> Path:
    """``directory`` (the strategy's typed ``strategy.dir``), else ``<result dir>/<result name>.ckpt``."""
    return Path(directory) if directory else out_path.parent / f"{out_path.stem}.ckpt"


def root_directories(directory: str, out_path: Path) -> list[tuple[str, Path]]:
    """``Strategy.directories`` of a strategy writing checkpoints into ``checkpoint_root``."""
    what = "checkpoint directory" + (" (strategy.dir)" if directory else "")
    return [(what, checkpoint_root(directory, out_path))]


def storage_of(cfg: Any) -> StorageModel:
    """The storage model of the run's ``[storage]`` section, for every checkpoint store of the job
    (``strategy.bandwidth_mb_s``, the older per-rank write cap, is the store's own argument)."""
    return resolve(cfg.storage)


def expected_mtbf_s(cfg: Any) -> tuple[float | None, float | None]:
    """(MTBF in seconds, MTBF in steps) from ``failures.mtbf_s`` / ``mtbf_steps`` or the kill plan;
    None if unknown."""
    if cfg.failures.mtbf_s > 0:
        return cfg.failures.mtbf_s, None
    if cfg.failures.mtbf_steps > 0:
        return None, float(cfg.failures.mtbf_steps)
    from mpiec.failures.faults import parse_kill_plans

    kills = parse_kill_plans(cfg.failures.kill, cfg)
    times = sorted(k.time for k in kills if k.time is not None)
    steps = sorted(k.step for k in kills if k.step is not None)
    if times:
        return times[-1] / len(times), None
    if steps:
        return None, (steps[-1] + 1) / len(steps)
    return None, None


def young_interval(t_save: float, mtbf: float) -> float:
    """Young's checkpoint interval ``sqrt(2 · t_save · MTBF)``: the one that minimises checkpoint
    cost plus expected re-executed work when failures are rare; in the unit of ``mtbf``
    (``t_save`` in seconds)."""
    if not t_save >= 0 or not mtbf > 0:
        raise ValueError(f"young_interval: t_save {t_save}, mtbf {mtbf}")
    return math.sqrt(2.0 * t_save * mtbf)


def predicted_pls(interval: float, shards: int, mtbf: float) -> float:
    """CPR's model (Maeng et al., MLSys'21): ``PLS ≈ T_ckpt / (2 · N_shards · MTBF)``.

    A failure hits on average half an interval after the last checkpoint and loses that
    time's updates of one shard in ``N_shards``; there are ``T_total / MTBF`` failures.
    ``interval`` and ``mtbf`` in the same unit (seconds or steps).
    """
    if interval <= 0 or shards < 1 or not mtbf > 0:
        raise ValueError(f"predicted_pls: interval {interval}, shards {shards}, mtbf {mtbf}")
    return interval / (2.0 * shards * mtbf)


def interval_for_pls(target_pls: float, shards: int, mtbf: float) -> float:
    """The checkpoint interval that makes the predicted PLS ``target_pls``: ``2 · N · MTBF · PLS``."""
    if not 0 < target_pls or shards < 1 or not mtbf > 0 or not math.isfinite(mtbf):
        raise ValueError(f"interval_for_pls: target {target_pls}, shards {shards}, mtbf {mtbf}")
    return 2.0 * shards * mtbf * target_pls


def measured_pls(lost_steps: list[tuple[int, int]], shards: int, steps: int) -> float:
    """PLS as the paper defines it: samples whose embedding updates were lost / samples trained.

    ``lost_steps``: one ``(steps since the restored checkpoint, shards lost)`` per failure; a
    failure that loses ``k`` of ``N`` shards ``d`` steps after their checkpoint loses ``d · k / N``
    steps' worth of samples (every step has the same global batch).
    """
    if steps <= 0:
        return 0.0
    return sum(d * k for d, k in lost_steps) / (shards * steps)


__all__ = ["checkpoint_root", "expected_mtbf_s", "interval_for_pls", "measured_pls", "predicted_pls",
           "root_directories", "storage_of", "young_interval"]
