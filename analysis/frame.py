"""A set of result files as a pandas DataFrame: one row per run (``pip install 'mpiec[analysis]'``).

``frame(paths_or_dirs)`` (or ``frame(results)``) returns every figure of ``metrics.RunMetrics`` per run
plus the columns researchers group by: ``variant``, ``scenario`` (``failure-free`` or the failure
run's kill plan), ``kind`` (``failure-free`` / ``failure``), ``repeat`` (the bench round, 0 when not
repeated), ``order`` (the run's place in the whole bench, from its ``bench.json``; None without one),
``order_in_round`` (its place within its round, 0 first: from ``bench.json``, else from the order of
the runs given, which ``load_results`` sorts by creation time), ``kill_shift_steps``,
``configuration`` (the keys that differ where the runs mix configurations, ``configs.config_groups``;
"" for one), and the run's disturbance figures (``other_cpu_share``, ``run_cpu_share``,
``host_load_1m``, ``host_cores``, ``step_time_spread``).

A repeated bench is a randomized complete block design: ``repeat`` is the block (round), ``variant``
the treatment, ``order_in_round`` the position the rotation gave it; docs/report.md redoes the tables'
paired analysis from these columns in a few lines of pandas and scipy.

Invariants: pandas is imported only when ``frame`` is called (a clear ``ImportError`` otherwise); the
rows keep the order of the runs given.

Example::

    from mpiec.analysis import frame
    df = frame("results/bench-20260101-120000")
    df.groupby(["variant", "kind"])["throughput_sps"].median()
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mpiec.results import RunResult

from .configs import config_label, differing_keys
from .metrics import compare, planned_kills
from .read import bench_manifest, load_results, repeat_of

__all__ = ["DISTURBANCE_COLUMNS", "frame", "frame_rows"]

DISTURBANCE_COLUMNS = ("other_cpu_share", "run_cpu_share", "host_load_1m", "host_cores", "step_time_spread")


def frame_rows(results: list[RunResult], baseline: str = "none") -> list[dict[str, Any]]:
    """The rows of ``frame`` as dicts (no pandas needed)."""
    manifests: dict[Path, list[dict]] = {}
    keys = differing_keys(results)
    seen_in_round: dict[tuple[Path, str, int], int] = {}  # (directory, configuration, round) -> runs so far
    rows = []
    for m, r in zip(compare(results, baseline), results, strict=True):
        d = r.path.parent
        if d not in manifests:
            manifests[d] = [x for x in bench_manifest(d).get("runs", []) if isinstance(x, dict)]
        entry = next((x for x in manifests[d] if x.get("path") == r.path.name), {})
        rep = int(entry.get("repeat", repeat_of(r)))
        config = config_label(r, keys) if keys else ""
        slot = (d, config, rep)
        position = seen_in_round.get(slot, 0)
        seen_in_round[slot] = position + 1
        order = entry.get("order")
        if isinstance(order, int):  # the runs of this round the bench ran before this one (failed ones too)
            position = sum(1 for x in manifests[d] if x.get("repeat", 0) == rep
                           and isinstance(x.get("order"), int) and x["order"] < order)
        row = {"run": m.run, "variant": m.variant, "kind": "failure" if m.failure else "failure-free",
               "scenario": "; ".join(map(str, planned_kills(r))) or ("failure" if m.failure
                                                                      else "failure-free"),
               "repeat": rep, "order": order, "order_in_round": position,
               "kill_shift_steps": entry.get("kill_shift_steps", 0), "configuration": config}
        row.update({k: v for k, v in m.as_row().items() if k not in row})
        for key in (*DISTURBANCE_COLUMNS, "server_cpu_s_per_step", "trainer_cpu_s_per_step"):
            row[key] = r.summary.get(key)
        rows.append(row)
    return rows


def frame(source: str | Path | Iterable[str | Path] | list[RunResult], baseline: str = "none") -> Any:
    """One row per run of the result files under ``source`` (paths, directories or loaded results)."""
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("mpiec.analysis.frame needs pandas: pip install 'mpiec[analysis]'") from exc
    if isinstance(source, list) and source and all(isinstance(x, RunResult) for x in source):
        results = list(source)
    else:
        results = load_results(source)  # type: ignore[arg-type]
    return pd.DataFrame(frame_rows(results, baseline))
