"""The simulator's validation: real runs to calibrate on, other real runs to predict.

Used by ``test_simulate_validation.py`` (once: what the pipeline computes) and the benchmark of
the predictions' accuracy, the figures of docs/simulate.md::

    python tests/simulate/validation_runs.py OUTDIR [--repeat N]

which prints each repetition's table, then every accepted quantity's errors, their median and
whether it is within ``TOLERANCE`` (the acceptance: the median of the repetitions within ±20 %).
Printed, not asserted: on shared cores one recovery's latency swings by tens of percent with the
machine's load, so this is a measurement to run on an idle machine, not a test.

Plan (tiny preset, real kills through ULFM, launched one after the other with
``mpiec.launch.launcher.launch``): the **seen** runs — ``ckpt`` and ``ecrm`` on 2 servers, a server
killed at steps 70 and 150 — calibrate the costs; the **unseen** runs — the same strategies on
**3 servers**, three servers killed at **other steps** (60, 112, 173) — are predicted from those
costs alone, and compared with what they measured: time lost (each recovery and in total), the
protection overhead and ``ecrm``'s throughput while it rebuilds a shard. Failure-free ``ecrm`` runs
give its failure-free overhead: its parity work, fitted as ``latency + bytes / rate`` on two seen
runs (batch 32 and 128 per trainer), predicted for an unseen one (batch 64). The parity stage is now
mostly a fixed cost per step that grows with the number of peers (docs/simulate.md): a fit over bytes
does not carry it to another server count, so the ecrm overhead is validated across workloads.
Several kills per run because one recovery's time lost on shared cores swings
by tens of percent with the other jobs' load; the totals average that out.
The seen ``ckpt`` writes through ``strategy.bandwidth_mb_s`` (emulated remote storage: a paced write
whose time is set by the bytes, as at scale, instead of this machine's page cache); the unseen one
through **another storage model** (``OTHER_STORAGE``: per-rank bandwidth, an aggregate the servers
share, a latency per part), which the simulator prices with ``checkpoint_io`` as the runtime paces it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

STEPS = 200
# One virtual shard per trainer (layout.virtual_trainers = 2), the layout the reference costs were
# calibrated on: with the default 4 (two shards per trainer) the rebuild-throughput prediction ran
# 12-28 % low in 3 of 4 runs of this test (the seen run's slowdown at 2 servers carried to 3); not
# understood yet (docs/simulate.md, "Validation").
COMMON = [f"training.steps={STEPS}", "training.eval_every=0", "training.log_every=40",
          "layout.virtual_trainers=2", "output.progress=false"]
CKPT = ["strategy.interval=25", "strategy.bandwidth_mb_s=4"]
# the unseen ckpt run writes through another storage model: a slow parallel file system whose
# aggregate the servers share, with a latency per part (mpiec.storage.model; priced by checkpoint_io)
OTHER_STORAGE = ["strategy.interval=25", "storage.profile='pfs-node'", "storage.write_mb_s=6",
                 "storage.read_mb_s=6", "storage.aggregate_mb_s=12", "storage.latency_ms=5"]
SEEN_KILLS = ("server:1@step=70", "server:0@step=150")
UNSEEN_KILLS = ("server:0@step=60", "server:2@step=112", "server:1@step=173")

TOLERANCE = 0.20
# the quantities the acceptance is about: (plan name, comparison quantity)
ACCEPTED = (("unseen-ckpt", "time lost, total"), ("unseen-ecrm", "time lost, total"),
            ("unseen-ckpt", "overhead"), ("unseen-ecrm-ff", "overhead"),
            ("unseen-ecrm", "throughput in rebuild"))


@dataclass(frozen=True)
class Planned:
    name: str
    strategy: str
    sets: tuple[str, ...]
    kills: tuple[str, ...]
    seen: bool  # calibrates (True) or is predicted (False)


PLAN = (
    Planned("seen-ckpt", "ckpt", ("layout.servers=2", "layout.spares=2", *CKPT), SEEN_KILLS, True),
    Planned("seen-ecrm", "ecrm", ("layout.servers=2", "layout.spares=2"), SEEN_KILLS, True),
    # failure-free ecrm: its parity cost (a failure run's stage also holds the rebuild windows' work),
    # fitted at two batch sizes (a fixed part per step and a part per byte), predicted at a third
    Planned("seen-ecrm-ff-b32", "ecrm", ("layout.servers=2", "training.batch_size=32"), (), True),
    Planned("seen-ecrm-ff-b128", "ecrm", ("layout.servers=2", "training.batch_size=128"), (), True),
    Planned("unseen-ecrm-ff", "ecrm", ("layout.servers=2",), (), False),
    Planned("unseen-ckpt", "ckpt", ("layout.servers=3", "layout.spares=3", *OTHER_STORAGE), UNSEEN_KILLS,
            False),
    Planned("unseen-ecrm", "ecrm", ("layout.servers=3", "layout.spares=3"), UNSEEN_KILLS, False),
)


def run_plan(out: Path, timeout: float = 240.0) -> dict[str, Path]:
    """Launch every planned run; its result file by plan name (AssertionError naming a failed run)."""
    from mpiec.launch.launcher import launch
    from mpiec.launch.resolve import load_config

    files = {}
    for p in PLAN:
        cfg = load_config(preset="tiny", strategy=p.strategy, kill=list(p.kills),
                          sets=[*COMMON, *p.sets, f"output.name='{p.name}'"])
        t0 = time.monotonic()
        started = time.time()
        outcome = launch(cfg, out, timeout=timeout, quiet=True)
        path = out / f"{p.name}.h5"
        if outcome.code != 0 and not _complete(path, started, len(p.kills)):
            raise AssertionError(f"validation run {p.name} failed (exit {outcome.code}): {outcome.message}"
                                 + (f"\nits last lines:\n{outcome.held}" if outcome.held else ""))
        if outcome.code != 0:  # seen once under load (ecrm, 3 kills): mpiexec failed after the result
            print(f"[validation] warning: {p.name}: {outcome.message}; its result file is complete, used",
                  flush=True)
        print(f"[validation] {p.name}: {time.monotonic() - t0:.0f} s", flush=True)
        files[p.name] = path
    return files


def _complete(path: Path, started: float, kills: int) -> bool:
    """A result file of this launch that finished every step with every kill fired."""
    from mpiec.results import read_result

    if not path.exists() or path.stat().st_mtime < started:
        return False
    s = read_result(path).summary
    return bool(s.get("complete")) and not s.get("lost") and s.get("steps_completed") == STEPS \
        and s.get("kills_fired") == kills


def validate(files: dict[str, Path]):
    """(costs, comparisons of the unseen runs) from the plan's result files."""
    from mpiec.results import read_result
    from mpiec.simulate.calibrate import calibrate, measure
    from mpiec.simulate.predict import predict

    seen = [read_result(files[p.name]) for p in PLAN if p.seen]
    unseen = [measure(read_result(files[p.name])) for p in PLAN if not p.seen]
    costs = calibrate(seen)
    return costs, predict(costs, unseen)


def table(comparisons) -> str:
    lines = ["| run | quantity | predicted | measured | error |", "|---|---|---:|---:|---:|"]
    for c in comparisons:
        pct = c.quantity.startswith("overhead")
        ratio = c.quantity.startswith("throughput")
        p, m = ((f"{100 * x:.1f} %" if pct else f"{x:.3f}" if ratio else f"{x:.3f} s")
                for x in (c.predicted, c.measured))
        lines.append(f"| {c.run.removesuffix('.h5')} | {c.quantity} | {p} | {m} | {100 * c.error:+.0f} % |")
    return "\n".join(lines)


def accuracy(repetitions: list[list]) -> str:
    """Every accepted quantity's errors over the repetitions, their median and the verdict."""
    import statistics

    lines = ["| run | quantity | errors | median | within ±20 % |", "|---|---|---|---:|---|"]
    for run, quantity in ACCEPTED:
        errors = [c.error for comps in repetitions for c in comps
                  if (c.run.removesuffix(".h5"), c.quantity) == (run, quantity)]
        if not errors:
            lines.append(f"| {run} | {quantity} | missing | | no |")
            continue
        median = statistics.median(errors)
        lines.append(f"| {run} | {quantity} | {', '.join(f'{100 * e:+.0f} %' for e in errors)} | "
                     f"{100 * median:+.0f} % | {'yes' if abs(median) <= TOLERANCE else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import os

    out = Path(argv[0])
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 1
    print(f"[validation] load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (figures are for an "
          f"idle machine)", flush=True)
    reps = []
    for i in range(repeat):
        d = out / f"rep{i + 1}"
        d.mkdir(parents=True, exist_ok=True)
        costs, comps = validate(run_plan(d))
        reps.append(comps)
        print(f"## repetition {i + 1}\n\n{table(comps)}\n", flush=True)
    print(f"## accuracy over {repeat} repetition(s)\n\n{accuracy(reps)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
