"""Rank entry point: ``python -m mpiec.worker CONFIG.json --out FILE.h5``.

Every rank of a run executes this module under ``mpiexec``/``srun``. It reads
the resolved config (written by ``mpiec run`` or ``mpiec config --write``),
detects ULFM, builds the communicators and runs the rank's role. Exit code 0
on a completed run, 1 on the monitor when the run was lost, 2 on bad input. A
rank that raises prints its traceback, leaves a crash note (``mpiec.failures.crashes``:
the run is then reported crashed, not lost) and dies by ``SIGKILL``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.roles.context import RankContext

# One BLAS/numba thread per rank: ranks already share the cores, and threaded
# BLAS under oversubscription is several times slower (8.7 ms vs 69 ms per laptop step).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpiec.worker",
                                     description="One rank of an mpiec run (start it under mpiexec/srun).")
    parser.add_argument("config", help="resolved config (JSON from 'mpiec config --write' or TOML)")
    parser.add_argument("--out", required=True, help="result file (.h5) or directory to write it into")
    parser.add_argument("--spawned", action="store_true",
                        help="internal: this process was spawned to replace a dead rank")
    parser.add_argument("--resume", metavar="DIR", default="",
                        help="start from the newest complete checkpoint in DIR (a checkpointing strategy)")
    args = parser.parse_args(argv)
    load_numba_without_blas()
    from mpiec.launch import stacks

    stacks.arm_from_env(args.spawned)  # under ``mpiec run``: where it was, should the run hit its limit

    from mpiec.config import Config
    from mpiec.errors import MpiecError
    from mpiec.launch.resolve import load_config

    try:
        text = Path(args.config).read_text()
        if args.config.endswith(".json"):
            cfg = Config.from_json(text)
        else:
            cfg = load_config(config_file=args.config)
    except (OSError, MpiecError) as exc:
        print(f"mpiec worker: error: {exc}", file=sys.stderr)
        return 2

    from mpi4py import MPI

    from mpiec.comm import (
        build_comms,
        configure_nbc_errors,
        configure_waiting,
        oversubscribed,
        returning,
        ulfm_available,
        wait,
    )
    from mpiec.failures.faults import die_now
    from mpiec.launch.launcher import result_name
    from mpiec.layout import MONITOR, initial_slots
    from mpiec.roles.context import RankContext
    from mpiec.roles.recovery import start_from_checkpoint
    from mpiec.roles.runner import make_role, run_rank

    if args.spawned:
        return spawned_main(cfg, args)
    world = returning(MPI.COMM_WORLD.Dup())
    rank, size = world.Get_rank(), world.Get_size()
    if size != cfg.n_ranks:
        if rank == 0:
            print(f"mpiec worker: error: the config needs {cfg.n_ranks} ranks "
                  f"(1 monitor + {cfg.layout.trainers} trainers + {cfg.layout.servers} servers + "
                  f"{cfg.layout.parity_ranks} parity + {cfg.layout.spares} spares), got {size}",
                  file=sys.stderr)
        return 2
    ulfm = ulfm_available()
    mode = cfg.failures.mode
    if mode == "ulfm" and not ulfm:
        if rank == 0:
            print("mpiec worker: error: failures.mode = 'ulfm' but this MPI has no active ULFM "
                  "(Open MPI: run mpiexec --with-ft ulfm)", file=sys.stderr)
        return 2
    if mode == "emulated":
        ulfm = False
    configure_nbc_errors(ulfm)

    out = Path(args.out)
    if out.suffix != ".h5":
        out = out / f"{result_name(cfg)}.h5"
    out = Path(world.bcast(str(out.resolve()) if rank == 0 else None, root=0))
    if rank == 0:
        out.parent.mkdir(parents=True, exist_ok=True)

    slots = initial_slots(cfg.layout.trainers, cfg.layout.servers, cfg.layout.parity_ranks,
                          cfg.layout.spares)
    comms = build_comms(world, slots[rank], cfg.layout.trainers, cfg.layout.servers)
    configure_waiting(oversubscribed(world), cfg.layout.wait)
    if slots[rank].role != MONITOR:  # the monitor runs no kernel: its warm-up only cost CPU the others need
        warm_up()
    ctx = RankContext(cfg=cfg, slots=slots, comms=comms, ulfm=ulfm, t0_wall=time.time(), out_path=out,
                      resume_from=args.resume, procs=world.allgather((MPI.Get_processor_name(), os.getpid())))
    ctx.worker_args = [args.config, "--out", str(out)]
    try:
        ctx.run_id = world.bcast(uuid.uuid4().hex[:12] if rank == 0 else None, root=0)
        role = make_role(ctx)  # shards, models, eval sets: built before the clock starts
        if args.resume:
            role = start_from_checkpoint(ctx, role)
        wait(world.Ibarrier(), "start-up")  # a peer that crashed while building fails this, no hang
        ctx.t0_wall = world.bcast(time.time() if rank == 0 else None, root=0)
        outcome = run_rank(ctx, role)
    except BaseException as exc:
        if is_consequence(exc):  # the failed peer (or the crashed monitor) said why
            print(f"mpiec worker (rank {rank}): stopping: {exc}", file=sys.stderr)
        elif isinstance(exc, MpiecError):
            print(f"mpiec worker (rank {rank}, {ctx.slot}): error: {exc}", file=sys.stderr)
        else:
            import traceback

            print(f"mpiec worker (rank {rank}, {ctx.slot}): internal error", file=sys.stderr)
            traceback.print_exc()
        note_crash(ctx, exc)
        sys.stderr.flush()
        sys.stdout.flush()
        # Die as a crash does: the runtime reports a killed rank to its peers (ULFM) or
        # ends the job; a plain exit would leave peers waiting (seen with Open MPI 5).
        die_now()
        raise
    code = 1 if (rank == 0 and outcome != "done") else 0
    if ctx.ledger.failures_seen and ulfm:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip MPI_Finalize after a real failure: it can wait on cut-off operations
    return code


def spawned_main(cfg: Config, args: argparse.Namespace) -> int:
    """A process spawned to replace a dead rank: join the run, train, end like the others."""
    from mpiec.comm import PeerFailure, configure_waiting
    from mpiec.errors import MpiecError
    from mpiec.failures.faults import die_now
    from mpiec.roles.runner import join_run, run_rank

    configure_waiting(True, cfg.layout.wait)  # spawned onto a busy node: never spin
    warm_up()
    ctx: RankContext | None = None
    try:
        ctx, role = join_run(cfg, Path(args.out), [args.config, "--out", args.out])
        outcome = run_rank(ctx, role)
    except BaseException as exc:
        if isinstance(exc, (MpiecError, PeerFailure)):
            print(f"mpiec worker (spawned): stopping: {exc}", file=sys.stderr)
        else:
            import traceback

            print("mpiec worker (spawned): internal error", file=sys.stderr)
            traceback.print_exc()
        if ctx is not None:
            note_crash(ctx, exc)
        sys.stderr.flush()
        die_now()
        raise
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if ctx.rank == 0 and outcome != "done" else 0)


def is_consequence(exc: BaseException) -> bool:
    """``exc`` only follows another rank's failure or crash (that rank says why): no crash of ours."""
    from mpiec.comm import PeerFailure
    from mpiec.roles.recovery import MonitorCrashed, PartitionError

    return isinstance(exc, (PeerFailure, PartitionError, MonitorCrashed, KeyboardInterrupt, SystemExit))


def note_crash(ctx: RankContext, exc: BaseException) -> None:
    """A rank dying of ``exc`` leaves its crash note (``mpiec.failures.crashes``) unless ``exc`` is a
    consequence, so the run is reported as crashed, not as a failure it could not survive."""
    if is_consequence(exc):
        return
    from mpiec.failures.crashes import write_crash_note

    try:  # the slot of a rank whose communicator a failure revoked may not be known
        # the step only once training started (run_rank set cpu_t0), for a rank that trains steps
        slot, step = str(ctx.slot), ctx.progress.current_step if ctx.cpu_t0 and ctx.in_step_loop() else -1
    except Exception:  # noqa: BLE001 - the note names the rank anyway
        slot, step = "?", -1
    write_crash_note(ctx.out_path, ctx.run_id, getattr(ctx, "first_rank", -1), slot, exc, step=step)


#: what numba imports to see whether scipy's BLAS is there (numba.np.linalg.ensure_blas)
_NUMBA_BLAS_PROBE = "scipy.linalg.cython_blas"


def load_numba_without_blas() -> None:
    """Load numba's array math with its BLAS probe answered "none", before any kernel loads.

    numba checks once, when its array math loads, whether scipy's BLAS is there for ``np.dot`` and
    the like: that ``import scipy.linalg`` costs ~0.2 s of CPU in every rank, a fifth of a rank's
    start-up (a run starts 5-9 ranks; the test suite thousands). No kernel uses numba's linear
    algebra (the dense layers multiply in numpy, outside the kernels), so no rank needs the answer.
    scipy stays importable in the rank afterwards (the probe's entry is removed)."""
    if _NUMBA_BLAS_PROBE in sys.modules or "numba.np.arraymath" in sys.modules:
        return  # scipy's BLAS already loaded, or the probe already ran: nothing to save
    sys.modules[_NUMBA_BLAS_PROBE] = None  # type: ignore[assignment]  # its import fails at once
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if _NUMBA_BLAS_PROBE in sys.modules and sys.modules[_NUMBA_BLAS_PROBE] is None:
            del sys.modules[_NUMBA_BLAS_PROBE]


def warm_up() -> None:
    """Compile (or load from cache) the numba kernels before the clock starts."""
    import numpy as np

    from mpiec.kernels import embedding as k

    ids = np.array([3, 1, 3], dtype=np.int64)
    uniq, inv = k.unique_inverse(ids)
    table = np.zeros((4, 3), dtype=np.float32)
    rows = np.zeros((2, 2), dtype=np.float32)
    k.gather_rows(table, uniq, 2, rows)
    acc = np.zeros((2, 2), dtype=np.float32)
    k.scatter_add_rows(np.ones((3, 2), dtype=np.float32), inv, acc)
    k.adagrad_apply(table, uniq, acc, np.float32(0.1), np.float32(1e-8))
    delta = np.zeros((2, 12), dtype=np.uint8)
    k.adagrad_apply_delta(table, uniq, acc, np.float32(0.1), np.float32(1e-8), delta)
    table2 = np.zeros((4, 2), dtype=np.float32)
    k.sgd_apply(table2, uniq, acc, np.float32(0.1))
    k.sgd_apply_delta(table2, uniq, acc, np.float32(0.1), np.zeros((2, 8), dtype=np.uint8))
    from mpiec.model.dlrm import pool_bags, pool_bags_backward

    bounds = np.array([0, 1, 3], dtype=np.int64)  # embedding bags: one-hot and multi-hot
    pool_bags_backward(pool_bags(rows, inv.reshape(1, 3), bounds), inv.reshape(1, 3), bounds, 2)
    from mpiec.model.elementwise import bias_relu, column_sums, relu_mask

    h = np.zeros((2, 2), dtype=np.float32)
    bias_relu(h, np.zeros(2, dtype=np.float32), relu=True)
    relu_mask(h, h)
    column_sums(h, np.zeros(2, dtype=np.float32))


if __name__ == "__main__":
    sys.exit(main())
