"""``mpiec kernels``' parity-pipeline case: ``ecrm``'s delta exchange between two ranks, per row.

Owns the measurement of the whole per-step parity path as a run executes it -- ``DeltaPipeline``'s
``stage`` + ``post`` (route, pack, post the counts) and ``advance`` + ``poll`` (post the rows, drive
the exchange, apply them to parity) -- on two ranks that are each a source and a holder (``k = 1``,
``r = 1``: every row's delta goes to the other rank), timed by the pipeline's own CPU clocks (the
``parity_stage_cpu_s_per_step`` / ``parity_drain_cpu_s_per_step`` of a run's result), beside a
memory copy of the same wire bytes (``np.copyto``) timed in the same steps. Waiting ranks poll and
sleep (``WaitPolicy.sleep``, as on a shared machine), so a peer's lateness is not CPU. Rows of a
step are random unique rows of the rank's shard, sorted (the runtime's pattern), 76-byte wire rows
by default (the laptop preset: 16 fp32 weights, the Adagrad accumulator, the 8-byte word).

``launch`` (no MPI in the calling process) runs ``main`` under ``mpiexec -n 2`` and returns its
figures; ``main`` runs inside the two ranks.

Invariant checked on every run: after the last step, each rank's parity equals the XOR of the
deltas it was sent (re-encoding from the other rank's rows reproduces it byte for byte).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def _figures(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)),
            "p90": float(np.percentile(a, 90))}


def main(argv: list[str] | None = None) -> int:
    """Inside ``mpiexec -n 2``: the measurement; rank 0 prints one JSON line."""
    p = argparse.ArgumentParser(prog="python -m mpiec.benchmarks.parity_pipeline")
    p.add_argument("--rows", type=int, default=2400, help="delta rows a rank stages per step")
    p.add_argument("--width", type=int, default=68, help="payload bytes of a delta row")
    p.add_argument("--steps", type=int, default=300,
                   help="measured steps (after 30 warm-up steps), in samples of 10 steps")
    p.add_argument("--shard", type=int, default=20_736,
                   help="rows of each rank's shard, and of its parity (default: a laptop holder's parity)")
    p.add_argument("--code", default="xor", choices=("xor", "rs"))
    args = p.parse_args(argv)

    from mpi4py import MPI

    from mpiec.comm import configure_waiting
    from mpiec.kernels.codes import make_code
    from mpiec.layout import RowPlacement
    from mpiec.strategies.ecrm import DeltaPipeline, ParityStore, parity_stripes

    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        print("parity_pipeline: needs exactly 2 ranks", file=sys.stderr)
        return 2
    configure_waiting(True)  # poll and sleep: CPU is work, not waiting for the peer
    rank = comm.Get_rank()
    pl = RowPlacement(2 * args.shard, 2, 1, 1)
    code = make_code(args.code, 1, 1)
    stripes, members = parity_stripes(pl, rank)
    store = ParityStore(code, stripes, members, args.width, 2, keep=3)
    pipe = DeltaPipeline(lambda: comm, pl, store, args.width, keep=3)
    rng = np.random.default_rng(rank)
    mine = pl.rows_of(rank)
    n = min(args.rows, mine.size)
    batches = [(np.sort(rng.choice(mine, n, replace=False)),
                rng.integers(0, 256, (n, args.width), dtype=np.uint8)) for _ in range(8)]
    copy_src = np.empty((n, 8 + args.width), np.uint8)
    copy_dst = np.empty_like(copy_src)
    warm, total = 30, 30 + args.steps
    block = 10  # steps per sample: two steps are in flight, so one step's CPU is an arbitrary cut
    stage: list[float] = []
    drain: list[float] = []
    copy: list[float] = []
    mark = (0.0, 0.0, 0.0)
    copy_cpu = 0.0
    for step in range(total + 2):
        # the runtime's order (``member``): at the overlap point, apply what is two steps old and
        # post the rows of the previous step; the copy stands in for the step's other work; after
        # the apply, stage and post the counts of this step
        pipe.poll(upto=step - 2)
        pipe.advance(upto=step - 1)
        c0 = time.thread_time()
        np.copyto(copy_dst, copy_src)  # a copy of the same bytes, in the same step
        copy_cpu += time.thread_time() - c0
        pipe.poll()
        if step < total:
            rows, payload = batches[step % len(batches)]
            pipe.stage(step, rows, payload)
            pipe.post(step)
        if step == warm - 1:
            mark = (pipe.cpu_stage, pipe.cpu_drain, copy_cpu)
        elif step >= warm and (step - warm + 1) % block == 0:
            now = (pipe.cpu_stage, pipe.cpu_drain, copy_cpu)
            for samples, a, b in zip((stage, drain, copy), now, mark, strict=True):
                samples.append((a - b) / (block * n))
            mark = now
    pipe.drain()
    # every delta applied exactly once: this rank's parity is the XOR of the other rank's deltas
    # (batch b was sent by it at the steps s < total with s % 8 == b)
    sent = np.zeros((pl.n_local(rank), args.width), np.uint8)
    for b, (rows, payload) in enumerate(batches):
        if len(range(b, total, len(batches))) % 2:
            sent[pl.local_slot(rows)] ^= payload
    other = np.empty_like(sent)
    comm.Sendrecv(sent, dest=1 - rank, recvbuf=other, source=1 - rank)
    exact = bool(np.array_equal(store.array, other))
    exact = comm.allreduce(exact, op=MPI.LAND)
    out = {"rows": n, "wire_bytes": 8 + args.width, "steps": args.steps, "block": block, "code": args.code,
           "stage_ns": _figures([x * 1e9 for x in stage]), "drain_ns": _figures([x * 1e9 for x in drain]),
           "total_ns": _figures([(a + b) * 1e9 for a, b in zip(stage, drain, strict=True)]),
           "copy_ns": _figures([x * 1e9 for x in copy]), "parity_exact": exact}
    gathered = comm.gather(out, root=0)
    if rank == 0:
        assert gathered is not None
        # the rank with the larger median total: the figure a server would pay
        print(json.dumps(max(gathered, key=lambda o: o["total_ns"]["median"])))
    return 0 if exact else 1


def launch(rows: int = 2400, steps: int = 300, width: int = 68, code: str = "xor",
           timeout: float = 300.0) -> dict:
    """Run ``main`` under ``mpiexec -n 2`` (this process does not initialise MPI) and return its
    figures; raises ``RuntimeError`` with the ranks' output when it fails."""
    from mpiec.launch.launcher import find_mpiexec, mpi_flavour

    mpiexec = find_mpiexec()
    cmd = [mpiexec, "-n", "2"]
    env = dict(os.environ)
    if mpi_flavour(mpiexec) == "openmpi":  # as a run launches its ranks (``launcher.mpiexec_command``)
        cmd += ["--with-ft", "ulfm", "--oversubscribe"]
        env.setdefault("OMPI_MCA_btl", "^ofi")
        if os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    cmd += [sys.executable, "-m", "mpiec.benchmarks.parity_pipeline", "--rows", str(rows), "--steps",
            str(steps), "--width", str(width), "--code", code]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"parity pipeline benchmark failed (rc {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


if __name__ == "__main__":
    sys.exit(main())
