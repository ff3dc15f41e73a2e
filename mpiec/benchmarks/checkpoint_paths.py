"""``mpiec kernels``' checkpoint paths: each path's MB/s beside a memory copy in the same run.

Owns the measurement of what the checkpointing strategies do to a shard's bytes, on one core,
as the strategies call it (their own functions where they are importable without MPI):

* ``snapshot copy``: ``PartWriter.save``'s snapshot (``np.array(copy=True)`` of the rows
  ``[weights | Adagrad state]`` and their global ids) and ``ecsnap``'s copy into its reused
  buffer (``np.copyto``);
* ``cnr diff``: ``ChainTracker.take`` (the bitset's set rows, minus the padding slots) and the
  gather of those rows and ids (``cnr.ChainPart.save``);
* ``cnr quantize``: ``cnr.encode_rows`` per method and bit width (what the background writer
  does before it writes: quantize, pack, per-row error, the fp32 state columns);
* ``log spill``: ``LogStore``'s spill of one step's record (encode, checksum, append to a file in
  the page cache); ``log replay``: ``read_record`` of a spilled record plus the apply a replay
  runs (``Server.apply``'s kernels: unique, scatter-add, row-wise Adagrad);
* ``ecsnap encode``: a holder folding ``k`` members' shard copies into one parity block
  (``snapshot.mac_into``, the GF(2^8) multiply-accumulate).

Every figure is MB/s of the path's input bytes (the shard's rows or the record's bytes) per
second of this thread's CPU time (``time.thread_time``: MB/s per core, what a path costs the
core it runs on, kernel time of its system calls included; on a shared, oversubscribed machine
the wall clock also counts the time other processes held the core), the median over
``repeat`` rounds with the 10th and 90th percentile; ``x copy`` is the median over rounds of
the path's MB/s over that round's ``np.copyto`` of the shard's bytes (the reference, measured
in every round: only ratios within a round are compared). ``wall MB/s`` is the same median by
the wall clock. The cases run round-robin, the order rotated each round, every one warmed up
(numba compilation or cache load) first.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

SHARD_ROWS = 1 << 18  # a laptop server holds ~300 k rows (17.8 MB with dim 16 + Adagrad)
DIM = 16
CHANGED = 0.25  # share of the shard's rows a cnr diff holds (a laptop interval changes ~20-30 %)
RECORD_ROWS = 16384  # rows of one trainer's push on the laptop preset (1,024 samples x 26 tables)
QUANT = (("symmetric", (2, 3, 4, 8)), ("asymmetric", (2, 3, 4, 8)), ("adaptive", (2, 3, 4, 8)),
         ("kmeans", (2, 4)))


def _shard(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A shard as a server holds it: float32 rows ``[weights | Adagrad accumulator]`` (N(0, 0.05)
    weights, as trained laptop rows look) and int64 global ids, a few padding slots (-1)."""
    table = rng.normal(0, 0.05, (rows, DIM + 1)).astype(np.float32)
    table[:, DIM] = rng.uniform(0.0, 1.0, rows).astype(np.float32)
    gids = np.arange(rows, dtype=np.int64) * 2
    gids[-7:] = -1  # padding slots, as a shard's last stripe has
    return table, gids


def _old_module(rev: str, path: str) -> types.ModuleType:
    """The module at ``path`` as of git revision ``rev`` (compiled without numba's cache)."""
    root = Path(__file__).resolve().parents[2]
    src = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root, capture_output=True, text=True,
                         check=True).stdout.replace("cache=True", "cache=False")
    name = f"_ckptbench_before_{path.replace('/', '_').removesuffix('.py')}"
    mod = types.ModuleType(name)
    mod.__file__ = f"{rev}:{path}"
    sys.modules[name] = mod  # a dataclass looks its module up while it is built
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - this repository's own code
    return mod


def _before_cases(rev: str, table: np.ndarray, gids: np.ndarray, tracker_bits: np.ndarray,
                  block: np.ndarray, record: tuple[np.ndarray, np.ndarray, np.ndarray], tmp: Path,
                  seg_path: Path, offset: int) -> dict[str, Callable[[], object]]:
    """The same paths as the strategies called them at ``rev`` (the kernels and the call sequences
    there: the diff's ``bitset_rows``, filter and fancy indexing, ``encode_rows``' copy,
    quantize, dequantize and error, the spill's joined record and its copying read)."""
    oq = _old_module(rev, "kernels/quantize.py")
    ot = _old_module(rev, "kernels/tracking.py")
    osp = _old_module(rev, "mpiec/strategies/log/spill.py")
    out: dict[str, Callable[[], object]] = {}
    other = ot.bitset_new(table.shape[0])

    def diff() -> object:
        slots = ot.bitset_rows(tracker_bits)
        slots = slots[gids[slots] >= 0]
        ot.bitset_clear(other)  # take clears the since-last bitset
        return {"global_rows": gids[slots], "table": table[slots]}

    out["cnr diff"] = diff
    everything = np.flatnonzero(gids >= 0)
    out["snapshot: cnr baseline"] = lambda: {"global_rows": gids[everything], "table": table[everything]}

    def encode(method: str, bits: int) -> object:
        weights = np.ascontiguousarray(block[:, :DIM])
        q = oq.quantize(weights, method, bits)
        state = np.ascontiguousarray(block[:, DIM:])
        return q, state, oq.row_l2_error(weights, oq.dequantize(q))

    for method, widths in QUANT:
        for bits in widths:
            out[f"cnr quantize {method} {bits}b"] = functools.partial(encode, method, bits)
    path = tmp / "before.spill"
    step = [0]

    def spill() -> object:
        step[0] += 1
        data = osp.encode_record(step[0], *record)
        with open(path, "ab") as f:
            f.write(data)
        if step[0] % 64 == 0:
            path.unlink()
        return None

    out["log spill"] = spill
    out["log replay: read record"] = lambda: osp.read_record(seg_path, offset, 10**9)
    return out


def cases(rows: int, rng: np.random.Generator, tmp: Path,
          before: str = "") -> list[tuple[str, int, Callable[[], object]]]:
    """(name, input bytes, run) of every path; the first is the copy reference. ``before``: a git
    revision whose paths are measured too, each beside its current one (``... (before)``)."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:  # the strategy packages import mpi4py.MPI: never initialise it
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
    from mpiec.kernels.codes import make_code
    from mpiec.kernels.embedding import adagrad_apply, scatter_add_rows, unique_inverse
    from mpiec.strategies.checkpointing import ChainTracker
    from mpiec.strategies.cnr import encode_rows, snapshot_rows
    from mpiec.strategies.ecsnap import as_bytes, mac_into
    from mpiec.strategies.log import LogStore, read_record

    table, gids = _shard(rows, rng)
    shard_bytes = table.nbytes + gids.nbytes
    ref = np.empty_like(table)
    out: list[tuple[str, int, Callable[[], object]]] = [
        ("np.copyto (shard rows)", table.nbytes, lambda: np.copyto(ref, table))]

    # the snapshot copies
    state = {"table": table, "global_rows": gids}
    out.append(("snapshot: PartWriter copy", shard_bytes,
                lambda: {k: np.array(v, copy=True) for k, v in state.items()}))
    snap = np.empty(table.nbytes, np.uint8)
    out.append(("snapshot: ecsnap copyto", table.nbytes, lambda: np.copyto(snap, as_bytes(table))))

    # cnr's diff: a bitset of CHANGED of the rows, the rows and ids it selects
    changed = np.sort(rng.choice(rows, int(rows * CHANGED), replace=False))
    tracker = ChainTracker(rows, "one-shot")
    tracker.base = 0  # a baseline was written: the next checkpoint is a diff
    tracker.track(changed)  # one-shot: the rows since the baseline stay set, every take is the same

    def diff() -> object:
        slots, _ = tracker.take(1, CHANGED, gids)
        return snapshot_rows(table, gids, slots)

    diff_bytes = changed.size * (table.shape[1] * 4 + 8)
    out.append((f"cnr diff: bitset -> rows ({CHANGED:.0%})", diff_bytes, diff))
    baseline = ChainTracker(rows, "one-shot")

    def base() -> object:
        baseline.break_chain()  # no baseline to diff against: take selects every real row
        return snapshot_rows(table, gids, baseline.take(1, 1.0, gids)[0])

    out.append(("snapshot: cnr baseline", shard_bytes, base))

    # cnr's quantization of the diff's rows (the writer thread's encode)
    block = np.ascontiguousarray(table[changed])
    for method, widths in QUANT:
        for bits in widths:
            out.append((f"cnr quantize {method} {bits}b", block.nbytes,
                        functools.partial(encode_rows, block, DIM, method, bits)))

    # log: one trainer's push record, spilled to a file in the page cache and read back
    n = min(RECORD_ROWS, rows)
    rslots = rng.integers(0, rows, n).astype(np.int64)
    counts = np.array([n // 2, n - n // 2], np.int64)
    grads = rng.normal(0, 1e-2, (n, DIM)).astype(np.float32)
    rec_bytes = rslots.nbytes + counts.nbytes + grads.nbytes
    spill = LogStore(0, tmp / "log")
    step = [0]

    def spill_one() -> object:
        step[0] += 1
        spill.append(step[0], rslots, counts, grads)  # limit 0: spilled at once
        if step[0] % 64 == 0:
            spill.trim(step[0])  # keep the file (and the page cache) small
        return None

    out.append(("log spill (record -> file)", rec_bytes, spill_one))
    spill.append(10**9, rslots, counts, grads)
    seg, offset = spill.spilled[10**9]
    replay_table = table.copy()

    def replay() -> object:
        s, _c, g = read_record(seg.path, offset, 10**9)
        uniq, inv = unique_inverse(s)
        acc = np.zeros((uniq.size, DIM), dtype=np.float32)
        scatter_add_rows(g, inv, acc)
        adagrad_apply(replay_table, uniq, acc, 1e-9, 1e-8)  # tiny lr: the rows stay as they were
        return None

    out.append(("log replay: read record", rec_bytes, lambda: read_record(seg.path, offset, 10**9)))
    out.append(("log replay: read + apply", rec_bytes, replay))

    # ecsnap: a parity holder folds k = 4 members' shard copies into its block (rs, r = 2: row 0)
    code = make_code("rs", 4, 2)
    members = [as_bytes(table)] + [rng.integers(0, 256, table.nbytes, dtype=np.uint8) for _ in range(3)]
    parity = np.empty(table.nbytes, np.uint8)

    def encode() -> object:
        parity[...] = 0  # ParityExchange zeroes the block, then folds each member in
        for j, m in enumerate(members):
            mac_into(parity, m, int(code.parity_rows[0, j]))
        return None

    out.append(("ecsnap encode rs(4,2) (k blocks)", 4 * table.nbytes, encode))
    if not before:
        return out
    old = _before_cases(before, table, gids, tracker.since_base, block, (rslots, counts, grads), tmp,
                        seg.path, offset)
    paired: list[tuple[str, int, Callable[[], object]]] = []
    for name, nbytes, fn in out:
        paired.append((name, nbytes, fn))
        key = next((k for k in old if name.startswith(k)), None)
        if key is not None:
            paired.append((f"{name} (before)", nbytes, old.pop(key)))
    return paired


def run(repeat: int, rows: int = SHARD_ROWS, only: str = "", before: str = "") -> list[dict]:
    """Every case ``repeat`` times round-robin after a warm-up; one dict per case."""
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="mpiec-ckptbench-") as d:
        todo = cases(rows, rng, Path(d), before)
        if only:
            todo = [todo[0]] + [c for c in todo[1:] if only in c[0]]
        for _name, _n, fn in todo:
            fn()  # warm-up: compilation or cache load, page faults of the outputs
        cpu = np.empty((repeat, len(todo)))
        wall = np.empty((repeat, len(todo)))
        for r in range(repeat):
            order = list(range(len(todo)))
            k = r % len(order)  # rotate the order: no case always follows the same one
            for i in order[k:] + order[:k]:
                t, c = time.perf_counter(), time.thread_time()
                todo[i][2]()
                cpu[r, i] = max(time.thread_time() - c, 1e-9)
                wall[r, i] = time.perf_counter() - t
    nbytes = np.array([n for _, n, _ in todo])
    mbs = nbytes / cpu / 1e6  # (repeat, cases)
    ratio = mbs / mbs[:, :1]
    return [{"case": name, "bytes": n, "mb_s": float(np.median(mbs[:, i])),
             "p10": float(np.percentile(mbs[:, i], 10)), "p90": float(np.percentile(mbs[:, i], 90)),
             "x_copy": float(np.median(ratio[:, i])), "cpu_s": float(np.median(cpu[:, i])),
             "wall_mb_s": float(np.median(n / wall[:, i] / 1e6))}
            for i, (name, n, _) in enumerate(todo)]


def format_table(results: list[dict], repeat: int, rows: int) -> str:
    head = (f"{'checkpoint path, one core':<38}{'MB':>8}{'MB/s':>9}{'[p10, p90]':>18}{'x copy':>8}"
            f"{'wall MB/s':>11}")
    lines = [f"# checkpoint paths: a {rows}-row shard (dim {DIM} + Adagrad); MB/s per CPU second of "
             f"the thread, medians of {repeat} rounds beside np.copyto in each round", head, "-" * len(head)]
    for r in results:
        spread = f"[{r['p10']:.0f}, {r['p90']:.0f}]"
        lines.append(f"{r['case']:<38}{r['bytes'] / 1e6:>8.2f}{r['mb_s']:>9.0f}{spread:>18}"
                     f"{r['x_copy']:>8.3f}{r['wall_mb_s']:>11.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m mpiec.benchmarks.checkpoint_paths",
                                description="The checkpoint paths' MB/s beside a memory copy.")
    p.add_argument("--repeat", type=int, default=11)
    p.add_argument("--rows", type=int, default=SHARD_ROWS)
    p.add_argument("--only", default="", help="only the cases whose name contains this")
    p.add_argument("--before", metavar="REV", default="",
                   help="also measure the paths as of this git revision, each beside its current one")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    res = run(max(args.repeat, 1), max(args.rows, 64), args.only, args.before)
    print(format_table(res, args.repeat, args.rows))
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
