"""The kernels' micro-benchmark (``mpiec kernels`` prints it: ``mpiec.benchmarks.kernels_cli``).

Owns: timing of the hot kernels against an ``np.copyto`` reference measured in
the same run, at cache-resident and DRAM sizes. Every kernel is warmed up
(numba compilation or cache load) before timing; a figure is the best of
``--repeat`` runs (the machine is shared and noisy: the best is the least
disturbed). Columns:

* ``payload GB/s``: the kernel's useful bytes (parity-update: the delta bytes;
  encode: the data bytes) per second;
* ``traffic GB/s``: bytes the kernel must read plus write, counted like the
  copy (read src + write dst = 2x; write-allocate not counted);
* ``x copy``: traffic GB/s over the copy's traffic GB/s at the same size;
* ``x loop``: the same over a plain numba copy loop (``dst[i] = src[i]``,
  ordinary stores) measured in the same run.

Honesty of the traffic count: ``np.copyto`` is glibc ``memcpy``, which uses
non-temporal (streaming) stores above a few MiB, so at DRAM sizes the copy's
2x is its real traffic -- it does *not* pay a write-allocate read (a numba
copy loop with ordinary stores reaches only ~0.6x of it: its destination
lines are read before being written, 3x payload of real traffic counted as
2x). Both references are shown: ``np.copyto`` (streaming stores, no
write-allocate) and the ``numba copy loop`` (ordinary stores, pays the
write-allocate read, like any kernel that writes without streaming stores).
A parity delta
update reads parity and delta and writes parity back: 3x payload, real too
(the parity line is read anyway, so there is no extra write-allocate). So
``x copy`` compares real DRAM traffic rates; a one-core read-modify-write
stream reaches ~1.1-1.3x of the copy on the development machine.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable

import numpy as np
from numba import njit

_UNITS = {"": 1, "B": 1, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 10**3, "MB": 10**6,
          "GB": 10**9}


MIN_SIZE = 4 << 10  # 16 rows of 256 bytes: the smallest size every case can be built at
MAX_SIZE = 64 << 30


def parse_size(text: str) -> int:
    """'256MiB' -> 268435456; at least ``MIN_SIZE`` (4KiB), at most ``MAX_SIZE``."""
    m = re.fullmatch(r"\s*([0-9]{1,15})\s*([KMG]i?B|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 1MiB, 256MiB)")
    size = int(m.group(1)) * _UNITS[(m.group(2) or "").upper()]
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size {text.strip()!r} is out of range: each size must be at "
                                         f"least 4KiB and at most 64GiB")
    return size


def _fmt_size(n: int) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f and n % f == 0:
            return f"{n // f}{unit}"
    return f"{n}B"


def _best(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: compilation / cache load, page faults
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


@njit(cache=True)
def _copy_loop(dst, src):
    """The second reference: a plain copy loop with ordinary stores (pays write-allocate)."""
    for i in range(src.size):
        dst[i] = src[i]


def _size_cases(size: int, rng: np.random.Generator):
    from mpiec.kernels import gf256
    from mpiec.kernels.codes import make_code, sum_update_rows

    row_bytes = 256  # 64 float32
    n_rows = size // row_bytes
    size = n_rows * row_bytes
    rows = np.arange(n_rows, dtype=np.int64)
    src = rng.integers(0, 256, size, dtype=np.uint8)
    dst = rng.integers(0, 256, size, dtype=np.uint8)
    par2 = dst.reshape(n_rows, row_bytes)
    delta2 = src.reshape(n_rows, row_bytes)
    pf = np.zeros((n_rows, row_bytes // 4), np.float32)
    df = rng.normal(0, 1e-3, (n_rows, row_bytes // 4)).astype(np.float32)
    rs = make_code("rs", 4, 2)
    quarter = size // 4 // row_bytes
    data = [src[i * quarter * row_bytes:(i + 1) * quarter * row_bytes].reshape(quarter, row_bytes)
            for i in range(4)]
    parity = [np.empty((quarter, row_bytes), np.uint8) for _ in range(2)]
    rs.encode_into(data, parity)
    pay4 = 4 * quarter * row_bytes
    cases = [
        ("np.copyto", size, 2 * size, lambda: np.copyto(dst, src)),
        ("numba copy loop", size, 2 * size, lambda: _copy_loop(dst, src)),
        ("xor parity delta", size, 3 * size, lambda: gf256.gf_mac_rows(par2, rows, delta2, 1)),
        ("sum f32 parity delta", size, 3 * size, lambda: sum_update_rows(pf, rows, df)),
        (f"gf mac [{gf256.path_name()}]", size, 3 * size, lambda: gf256.gf_mac(dst, src, 0x8E)),
        ("gf mac portable", size, 3 * size, lambda: gf256.gf_mac_portable(dst, src, 0x8E)),
        ("rs(4,2) encode", pay4, pay4 * 3 // 2, lambda: rs.encode_into(data, parity)),
        ("rs(4,2) decode 2 lost", pay4, pay4 * 3 // 2,
         lambda: rs.decode([None, None, data[2], data[3]], parity, [0, 1])),
    ]
    return cases


def _adagrad_cases(n_table: int, n_rows: int, dim: int, rng: np.random.Generator):
    from mpiec.kernels.embedding import adagrad_apply_delta, unique_inverse

    table = rng.normal(0, 0.05, (n_table, dim + 1)).astype(np.float32)
    table[:, dim] = 0.01
    # the runtime hands the unique slots of unique_inverse (sorted ascending) to
    # the optimizer: that is the real pattern; a random order is shown for reference
    slots, _ = unique_inverse(rng.integers(0, n_table, int(n_rows * 1.2)))
    slots = np.sort(rng.choice(slots, n_rows, replace=False)) if slots.size > n_rows else slots
    shuffled = rng.permutation(slots)
    grads = rng.normal(0, 1, (slots.size, dim)).astype(np.float32)
    delta = np.empty((slots.size, (dim + 1) * 4), np.uint8)
    return slots.size, [
        ("sorted", lambda: adagrad_apply_delta(table, slots, grads, 0.01, 1e-8, delta)),
        ("shuffled", lambda: adagrad_apply_delta(table, shuffled, grads, 0.01, 1e-8, delta)),
    ]


def run(sizes: list[int], repeat: int, adagrad_table: int) -> list[dict]:
    """Measure every case; returns one dict per table line."""
    rng = np.random.default_rng(0)
    results = []
    for size in sizes:
        refs: dict[str, float] = {}
        for name, payload, traffic, fn in _size_cases(size, rng):
            t = _best(fn, repeat)
            gbs_t = traffic / t / 1e9
            if name in ("np.copyto", "numba copy loop"):
                refs[name] = gbs_t
            results.append({"kernel": name, "size": _fmt_size(size), "bytes": payload,
                            "seconds": t, "payload_gbs": payload / t / 1e9,
                            "traffic_gbs": gbs_t, "x_copy": gbs_t / refs["np.copyto"],
                            "x_loop": gbs_t / refs["numba copy loop"]
                            if "numba copy loop" in refs else None})
    n, fns = _adagrad_cases(adagrad_table, 65536, 64, rng)
    row_bytes = 65 * 4
    traffic = n * (2 * row_bytes + 64 * 4 + row_bytes)  # row r/w, grads, delta out
    for order, fn in fns:
        t = _best(fn, repeat)
        results.append({"kernel": f"adagrad+delta {order}", "size": f"{n} of {adagrad_table} rows",
                        "bytes": n * row_bytes, "seconds": t,
                        "payload_gbs": n * row_bytes / t / 1e9, "traffic_gbs": traffic / t / 1e9,
                        "x_copy": None, "x_loop": None, "mrows_s": n / t / 1e6})
    return results


def _median_spread(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile of ``repeat`` timed runs, after a warm-up run."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    a = np.asarray(times)
    return float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90))


PIPE_ROWS = 2400  # delta rows a laptop server stages per step (k = 4, r = 1, 6 servers)
PIPE_WIDTH = 68  # 16 fp32 weights + the Adagrad accumulator; 76 bytes with the 8-byte word
PIPE_PARITY = 20736  # parity rows a laptop holder keeps (k = 4, r = 1, 6 servers)


def pipeline_cases(repeat: int, rows: int = PIPE_ROWS) -> list[dict]:
    """The parity pipeline's row loops in this process, per delta row, beside a copy of the same
    wire bytes: ``route_pack`` (stage), ``gf_apply_wire`` for xor and rs (drain's apply)."""
    from mpiec.kernels import gf256
    from mpiec.kernels.codes import make_code
    from mpiec.kernels.parity import gf_apply_wire, route_pack

    rng = np.random.default_rng(1)
    S, k = 6, 4
    # a rotated placement's tables (``ecrm.pipeline.Routing``): member i of stripe s on server
    # (s + k + i) % S; slots numbered by stripe so every routed row lands in one parity array
    holder = np.array([[(c + k + i) % S for c in range(S)] for i in range(2)], np.int64)
    base = np.array([list(range(S))] * 2, np.int64)
    n_rows = PIPE_PARITY * k
    ids = np.sort(rng.choice(n_rows, rows, replace=False)).astype(np.int64)
    payload = rng.integers(0, 256, (rows, PIPE_WIDTH), dtype=np.uint8)
    parity = rng.integers(0, 256, (PIPE_PARITY, PIPE_WIDTH), dtype=np.uint8)
    _, wire1, _ = route_pack(ids, payload, k, holder[:1], base[:1], S, S)
    _, wire2, _ = route_pack(ids, payload, k, holder, base, S, S)
    dst = np.empty_like(wire1)
    xor, rs = make_code("xor", k, 1), make_code("rs", k, 2)
    cases = [
        ("np.copyto (same bytes)", rows, lambda: np.copyto(dst, wire1)),
        ("stage: route+pack r=1", rows, lambda: route_pack(ids, payload, k, holder[:1], base[:1], S, S)),
        ("stage: route+pack r=2", 2 * rows, lambda: route_pack(ids, payload, k, holder, base, S, S)),
        ("drain: apply xor", rows, lambda: gf_apply_wire(parity, wire1, xor.parity_rows)),
        (f"drain: apply rs r=2 [{gf256.path_name()}]", 2 * rows,
         lambda: gf_apply_wire(parity, wire2, rs.parity_rows)),
    ]
    out = []
    for name, n, fn in cases:
        med, lo, hi = _median_spread(fn, max(repeat, 20))
        out.append({"case": name, "rows": n, "ns_per_row": med / n * 1e9, "p10": lo / n * 1e9,
                    "p90": hi / n * 1e9})
    return out


def format_pipeline(cases: list[dict], mpi: dict | None) -> str:
    """The pipeline table: ns per delta row, median [p10, p90], and its ratio to the copy."""
    head = f"{'parity pipeline, per delta row':<38}{'rows':>7}{'ns/row':>9}{'[p10, p90]':>16}{'x copy':>8}"
    lines = [head, "-" * len(head)]

    def line(label: str, rows: int, med: float, lo: float, hi: float, copy: float) -> str:
        spread = f"[{lo:.1f}, {hi:.1f}]"
        return f"{label:<38}{rows:>7}{med:>9.1f}{spread:>16}{med / copy:>8.1f}"

    for c in cases:
        lines.append(line(c["case"], c["rows"], c["ns_per_row"], c["p10"], c["p90"], cases[0]["ns_per_row"]))
    if mpi is not None:
        copy = mpi["copy_ns"]["median"]
        for key, label in (("copy_ns", "2 ranks: np.copyto (same bytes)"),
                           ("stage_ns", "2 ranks: stage (route, pack, post)"),
                           ("drain_ns", "2 ranks: drain (exchange, apply)"),
                           ("total_ns", "2 ranks: stage + drain")):
            f = mpi[key]
            lines.append(line(label, mpi["rows"], f["median"], f["p10"], f["p90"], copy))
        lines.append(f"2 ranks: medians over samples of {mpi['block']} steps ({mpi['steps']} steps) of the "
                     f"pipeline's own CPU clocks (a run's parity_stage/drain_cpu), {mpi['wire_bytes']}-byte "
                     f"wire rows, {mpi['code']}; parity exact after the run: {mpi['parity_exact']}")
    return "\n".join(lines)


def format_table(results: list[dict]) -> str:
    head = f"{'kernel':<24}{'size':>20}{'time ms':>10}{'payload GB/s':>14}" \
           f"{'traffic GB/s':>14}{'x copy':>8}{'x loop':>8}"
    lines = [head, "-" * len(head)]
    for r in results:
        xc = f"{r['x_copy']:.2f}" if r["x_copy"] is not None else f"{r['mrows_s']:.1f}M/s"
        xl = f"{r['x_loop']:.2f}" if r.get("x_loop") is not None else ""
        lines.append(f"{r['kernel']:<24}{r['size']:>20}{r['seconds'] * 1e3:>10.2f}"
                     f"{r['payload_gbs']:>14.2f}{r['traffic_gbs']:>14.2f}{xc:>8}{xl:>8}")
    return "\n".join(lines)
