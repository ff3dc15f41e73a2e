"""One ``mpiec bench`` per study point, run once: the studies in scripts/ share it.

A bench directory holding a ``done`` marker (the bench's seconds) is not run again, so a page
can be remade from its result files without training; the bench's output is kept in
``bench.log`` beside them, and a failed bench stops the study with one line naming that log.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def run_cached_bench(out: Path, args: list[str], what: str, indent: str = "") -> float:
    """``mpiec bench ARGS --out OUT`` unless ``OUT/done`` exists; the bench's seconds."""
    if (out / "done").exists():
        print(f"{indent}(cached) {out}", flush=True)
        return float((out / "done").read_text() or 0)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-P", "-m", "mpiec", "bench", *args, "--out", str(out)]
    print(f"{indent}$ mpiec " + " ".join(cmd[4:]), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    (out / "bench.log").write_text(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"bench of {what} failed (exit {proc.returncode}); its output: {out / 'bench.log'}")
    (out / "done").write_text(f"{seconds:.1f}")
    return seconds
