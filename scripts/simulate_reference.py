"""The runs behind ``mpiec simulate``'s reference calibration (``mpiec/simulate/reference.py``).

    python scripts/simulate_reference.py OUTDIR [--only NAME,...] [--fit-only] [--freeze]

Runs, one after the other (``mpiec.launch.launcher.launch``), then fits the costs and prints them as JSON
(also written to ``OUTDIR/costs.json``; ``--fit-only``: fit the plan's files already in OUTDIR,
run nothing); ``--freeze`` writes them, sources as file names, to
``mpiec/simulate/reference.json``, the reference calibration ``mpiec simulate`` ships:

* **failure-free** (the step model's CPU per step by role, ``ecrm``'s parity CPU): laptop preset,
  300 steps, ``none`` and ``ecrm`` at two sizes each — 2 servers and batch 1024 per trainer, 4
  servers and batch 256 — so the trainer's and the server's CPU are fitted as ``latency + rate``
  over two sizes;
* **one server killed** (recovery latencies, restores, rebuilds, replays, cpr-mfu/ssu against cpr):
  laptop preset, 400 steps, a checkpoint every 50 steps, ``server:1@step=240``, one spare, for every
  modelled strategy; the same on the tiny preset (120 steps, every 10 steps, ``server:1@step=53``)
  for a second part size in the write and restore fits.

About 15 minutes on 2 idle cores. Run it on a quiet machine: the CPU figures are robust to other
jobs, the recovery latencies are not (docs/simulate.md).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FREE = ["training.eval_every=0", "training.log_every=100", "output.progress=false", "training.steps=300"]
KILLED_LAPTOP = ["training.eval_every=0", "training.log_every=100", "output.progress=false",
                 "training.steps=400", "strategy.interval=50", "layout.spares=1"]
KILLED_TINY = ["training.eval_every=0", "output.progress=false", "training.steps=120", "strategy.interval=10",
               "layout.spares=1"]
RECOVERING = ("ckpt", "cpr", "cpr-mfu", "cpr-ssu", "cnr", "ecrm", "log", "ecsnap")


@dataclass(frozen=True)
class Planned:
    name: str
    preset: str
    strategy: str
    sets: tuple[str, ...]
    kills: tuple[str, ...] = ()


def _interval(strategy: str, sets: list[str]) -> list[str]:
    # ecrm has no checkpoint interval; ecsnap calls it its snapshot interval (same key)
    return [s for s in sets if not (strategy == "ecrm" and s.startswith("strategy.interval"))]


PLAN = (
    Planned("ff-none-s2-b1024", "laptop", "none", (*FREE, "layout.servers=2")),
    Planned("ff-none-s4-b256", "laptop", "none", (*FREE, "layout.servers=4", "training.batch_size=256")),
    Planned("ff-ecrm-s2-b1024", "laptop", "ecrm", (*FREE, "layout.servers=2")),
    Planned("ff-ecrm-s4-b256", "laptop", "ecrm", (*FREE, "layout.servers=4", "training.batch_size=256")),
    *(Planned(f"kill-laptop-{s}", "laptop", s, tuple(_interval(s, KILLED_LAPTOP)), ("server:1@step=240",))
      for s in RECOVERING),
    *(Planned(f"kill-tiny-{s}", "tiny", s, tuple(_interval(s, KILLED_TINY)), ("server:1@step=53",))
      for s in RECOVERING),
)


def run_plan(out: Path, only: set[str] | None = None, timeout: float = 600.0) -> list[Path]:
    from mpiec.launch.launcher import launch
    from mpiec.launch.resolve import load_config

    files = []
    for p in PLAN:
        if only and p.name not in only:
            continue
        cfg = load_config(preset=p.preset, strategy=p.strategy, kill=list(p.kills),
                          sets=[*p.sets, f"output.name='{p.name}'"])
        t0 = time.monotonic()
        outcome = launch(cfg, out, timeout=timeout, quiet=True)
        path = out / f"{p.name}.h5"
        status = "ok" if outcome.code == 0 else f"exit {outcome.code}: {outcome.message}"
        print(f"[reference] {p.name}: {time.monotonic() - t0:.0f} s, {status}", flush=True)
        if path.exists():
            files.append(path)
    return files


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[argv.index("--only") + 1].split(",")) if "--only" in argv else None
    if "--fit-only" in argv:
        files = [out / f"{p.name}.h5" for p in PLAN if (out / f"{p.name}.h5").exists()]
    else:
        files = run_plan(out, only)
    from mpiec.analysis.read import load_results

    from mpiec.simulate.calibrate import calibrate

    costs = calibrate(load_results([str(f) for f in files]))
    text = costs.to_json()
    (out / "costs.json").write_text(text + "\n")
    print(text)
    if "--freeze" in argv:
        frozen = json.loads(text)
        frozen["note"] = ""
        for part in (frozen, frozen.get("step") or {}, *frozen["strategies"].values()):
            if "sources" in part:
                part["sources"] = [Path(x).name for x in part["sources"]]
        target = Path(__file__).parents[1] / "mpiec" / "simulate" / "reference.json"
        target.write_text(json.dumps(frozen, indent=1, sort_keys=True) + "\n")
        print(f"[reference] frozen: {target} (update NOTE in reference.py: date, machine, load)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
