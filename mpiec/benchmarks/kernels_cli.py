"""``mpiec kernels``: the kernels' micro-benchmark, the parity pipeline and the checkpoint paths.

Owns the command: it composes the pure kernel timings (``benchmarks.kernels``: each kernel beside a
copy, the parity pipeline's stages in one process), the parity pipeline between two ranks
(``benchmarks.parity_pipeline``, under ``mpiexec``) and the checkpointing strategies' paths
(``benchmarks.checkpoint_paths``), which need the runtime's modules that ``kernels/`` never imports.
"""

from __future__ import annotations

import argparse
import json
import sys

from mpiec.benchmarks import checkpoint_paths
from mpiec.benchmarks.kernels import (
    PIPE_ROWS,
    PIPE_WIDTH,
    format_pipeline,
    format_table,
    parse_size,
    pipeline_cases,
    run,
)
from mpiec.kernels import gf256


def pipeline_mpi(steps: int, rows: int = PIPE_ROWS) -> dict:
    """The whole pipeline between two ranks (``mpiec.benchmarks.parity_pipeline``, under mpiexec).

    This process never initialises MPI: the ranks are two new processes."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:  # importing the strategy package imports mpi4py.MPI
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
    from mpiec.benchmarks.parity_pipeline import launch

    return launch(rows=rows, steps=steps, width=PIPE_WIDTH)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mpiec kernels",
                                description="Micro-benchmark of mpiec's numba kernels.")
    p.add_argument("--sizes", default="1MiB,256MiB",
                   help="comma-separated payload sizes (default: 1MiB,256MiB)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per kernel (best is kept)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--quick", action="store_true",
                   help="small sizes and few repeats (smoke test)")
    p.add_argument("--no-mpi", action="store_true",
                   help="leave out the parity pipeline between two ranks (which starts mpiexec -n 2)")
    p.add_argument("--no-checkpoint", action="store_true",
                   help="leave out the checkpoint paths (mpiec/benchmarks/checkpoint_paths.py)")
    args = p.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if not sizes:
        p.error("--sizes names no size")
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    repeat = args.repeat
    adagrad_table = 1 << 20
    if args.quick:
        sizes = [min(s, 4 << 20) for s in sizes]
        repeat = min(repeat, 2)
        adagrad_table = 1 << 17

    # the path the kernels take now (run-time choice), not what was compiled or cached
    path = gf256.path_name()
    print(f"# mpiec kernels: best of {repeat}; GF multiply path: {path}"
          f"{'' if gf256.CPU_HAS_GFNI else ' (this CPU has no GFNI)'}")
    results = run(sizes, repeat, adagrad_table)
    print(format_table(results))
    pipe = pipeline_cases(repeat)
    mpi = None
    if not args.no_mpi:
        try:
            mpi = pipeline_mpi(steps=60 if args.quick else 300)
        except Exception as exc:  # noqa: BLE001 - no mpiexec, a failed launch: say so, keep the rest
            print(f"# parity pipeline between two ranks not measured: {str(exc).strip()[:300]}")
    print()
    print(format_pipeline(pipe, mpi))
    ckpt = None
    if not args.no_checkpoint:  # the checkpoint paths beside a copy (mpiec/benchmarks/checkpoint_paths.py)
        rows = 1 << 12 if args.quick else checkpoint_paths.SHARD_ROWS
        ckpt = checkpoint_paths.run(max(repeat, 3), rows)
        print()
        print(checkpoint_paths.format_table(ckpt, max(repeat, 3), rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gfni": gf256.gfni_active(), "gf_path": path, "repeat": repeat,
                       "results": results, "pipeline": pipe, "pipeline_2_ranks": mpi,
                       "checkpoint": ckpt}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
