"""Print every strategy's failure-free and recovered ``param_checksum`` (the contract test's cases).

A refactoring of the strategies must not change what any of them trains or recovers: run this
before and after, and compare (``--json FILE`` keeps the figures; ``--compare FILE`` says which
case changed and exits 1 if one did).

    python scripts/strategy_checksums.py --json before.json
    python scripts/strategy_checksums.py --compare before.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BASE = ["--preset", "tiny", "--steps", "30", "--set", "layout.spares=3"]
KILLS = "server:1@step=10;trainer:0@step=17;spare:1@step=3"
VARIANTS = [
    ("cnr:diff=one-shot", "cnr", ["--set", "strategy.diff='one-shot'",
                                  "--set", "strategy.quantization='none'"]),
    ("cnr:diff=consecutive", "cnr", ["--set", "strategy.diff='consecutive'",
                                     "--set", "strategy.quantization='none'"]),
    ("ecrm:code=rs:k=2:r=2", "ecrm", ["--set", "strategy.code='rs'", "--set", "strategy.k=2",
                                      "--set", "strategy.r=2", "--set", "layout.servers=4"]),
    ("ecrm:parity_every=4", "ecrm", ["--set", "strategy.parity_every=4"]),
    ("log:log_memory_mb=0", "log", ["--set", "strategy.log_memory_mb=0"]),
]


def checksum(args: list[str], out: Path) -> str:
    from mpiec.results import read_result

    proc = subprocess.run([sys.executable, "-P", "-m", "mpiec", "run", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    files = sorted(out.glob("*.h5"))
    if not files:
        return f"crash rc={proc.returncode}"
    s = read_result(files[0]).summary
    return ("lost " if s["lost"] else "") + str(s["param_checksum"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the checksums to this file")
    ap.add_argument("--compare", help="compare with the checksums of this file; exit 1 on a change")
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    from mpiec.strategies import STRATEGIES

    cases = [(n, n, []) for n in sorted(STRATEGIES)] + VARIANTS
    if args.only:
        cases = [c for c in cases if c[0] in args.only.split(",")]
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (case, name, extra) in enumerate(cases):
            row = {}
            for kind, kill in (("failure-free", []), ("recovered", ["--kill", KILLS])):
                d = Path(tmp) / f"{i}-{kind}"
                d.mkdir()
                row[kind] = checksum([*BASE, "--strategy", name, *extra, *kill], d)
            out[case] = row
            print(f"{case:24s} failure-free {row['failure-free']:24s} recovered {row['recovered']}",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        changed = [f"{c} {k}: {before[c][k]} -> {v}" for c, row in out.items() if c in before
                   for k, v in row.items() if before[c][k] != v]
        print("\n".join(changed) if changed else "every checksum unchanged")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
