"""What a checkpoint costs on this machine.

``python -m mpiec.benchmarks.checkpoint_cost [--size-mb N] [--dir D]``, measured in one run, all in D:

1. the disk's sequential write throughput (``dd ... conv=fsync``, or a Python write+fsync loop
   where there is no ``dd``);
2. the checksum candidates (crc32, sha256, blake2b) and ``CheckpointStore.write_part`` on an
   N MiB float32 array;
3. a training-like loop in the main thread (512x512 float32 matmuls on one BLAS thread, which
   release the GIL, plus small numpy operations, which hold it, like the numba kernels of a real
   step): its median iteration time while a ``BackgroundWriter`` writes N MiB, against the same
   loop with no write; the same while another *process* writes N MiB (CPU, memory and disk
   contention without the GIL, the control); and the stall of the same write done synchronously
   inside the loop.

Figures in MB/s are 10^6 bytes per second.
"""

from __future__ import annotations

import os

# One BLAS thread, as every rank of a run (set before numpy is imported).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from mpiec.storage.checkpoint import CHUNK, BackgroundWriter, CheckpointStore  # noqa: E402

MB = 1e6
MiB = 1 << 20


def disk_write_throughput(d: Path, size_mb: int) -> tuple[float, str]:
    """(MB/s, how) of a sequential write of ~size_mb MiB with fsync."""
    target = d / "ddtest"
    count = max(1, round(size_mb / 4))
    try:
        if shutil.which("dd"):
            proc = subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=4M", f"count={count}",
                                   "conv=fsync"], capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "LC_ALL": "C"})
            m = re.search(r"^(\d+) bytes.*copied, ([0-9.]+) s", proc.stderr, re.MULTILINE)
            if proc.returncode == 0 and m and float(m.group(2)) > 0:
                return int(m.group(1)) / float(m.group(2)) / MB, f"dd bs=4M count={count} conv=fsync"
        buf = bytes(4 * MiB)
        t0 = time.perf_counter()
        with open(target, "wb", buffering=0) as f:
            for _ in range(count):
                f.write(buf)
            os.fsync(f.fileno())
        return count * 4 * MiB / (time.perf_counter() - t0) / MB, f"python write+fsync, {count} x 4 MiB"
    finally:
        target.unlink(missing_ok=True)


def checksum_speeds(data: np.ndarray) -> dict[str, float]:
    """MB/s of each checksum candidate over ``data`` in CHUNK-sized pieces."""
    mv = data.reshape(-1).view(np.uint8).data

    def crc32() -> None:
        c = 0
        for i in range(0, len(mv), CHUNK):
            c = zlib.crc32(mv[i:i + CHUNK], c)

    def hashed(name: str) -> Callable[[], None]:
        def run() -> None:
            h = hashlib.new(name)
            for i in range(0, len(mv), CHUNK):
                h.update(mv[i:i + CHUNK])
        return run

    out = {}
    for name, fn in (("crc32", crc32), ("sha256", hashed("sha256")), ("blake2b", hashed("blake2b"))):
        t0 = time.perf_counter()
        fn()
        out[name] = len(mv) / (time.perf_counter() - t0) / MB
    return out


class Step:
    """One iteration of a training-like loop: ``k`` matmuls (GIL released in BLAS) and ``m``
    small numpy operations (GIL held), calibrated to ~12 ms with ~20% of it holding the GIL."""

    def __init__(self, target_s: float = 0.012, gil_share: float = 0.2):
        rng = np.random.default_rng(0)
        self.a = rng.random((512, 512), dtype=np.float32)
        self.b = rng.random((512, 512), dtype=np.float32) / 512
        self.small = np.zeros(64, dtype=np.float32)
        self.k, self.m = 1, 100
        mm, small = self._time(lambda: self._matmuls(1)), self._time(lambda: self._small(100)) / 100
        self.k = max(1, round(target_s * (1 - gil_share) / mm))
        self.m = max(1, round(target_s * gil_share / small))
        self.matmul_s, self.small_s = mm * self.k, small * self.m

    @staticmethod
    def _time(fn: Callable[[], None], reps: int = 20) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    def _matmuls(self, k: int) -> None:
        c: np.ndarray = self.a
        for _ in range(k):
            c = c @ self.b

    def _small(self, m: int) -> None:
        x = self.small
        for _ in range(m):
            x += 1.0
            x *= 0.5

    def __call__(self) -> None:
        self._matmuls(self.k)
        self._small(self.m)


class Times(list):
    """Wall-clock seconds per iteration, with the training thread's CPU seconds in ``cpu``."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: list[float] = []

    def __add__(self, other: Times) -> Times:  # type: ignore[override]
        out = Times()
        out.extend(list(self) + list(other))
        out.cpu = self.cpu + other.cpu
        return out


def run_loop(step: Step, iterations: int = 0, until: Callable[[], bool] | None = None,
             min_iterations: int = 5, max_s: float = 30.0) -> Times:
    """Iteration times of ``step``: a fixed count, or until ``until()`` is true (at least min_iterations)."""
    times = Times()
    t_end = time.perf_counter() + max_s
    while True:
        if until is None and len(times) >= iterations:
            break
        if until is not None and len(times) >= min_iterations and until():
            break
        if time.perf_counter() > t_end:
            break
        t0, c0 = time.perf_counter(), time.thread_time()
        step()
        times.append(time.perf_counter() - t0)
        times.cpu.append(time.thread_time() - c0)
    return times


_CHILD = """
import sys, numpy as np
from mpiec.storage.checkpoint import CheckpointStore
store, data = CheckpointStore(sys.argv[1]), np.ones(int(sys.argv[2]) // 4, dtype=np.float32)
print("ready", flush=True)
store.write_part(int(sys.argv[3]), "bench", {"table": data})
"""


def loop_during_process_write(step: Step, store: CheckpointStore, s: int, nbytes: int) -> Times:
    """Iteration times while another *process* writes the same amount (CPU and disk contention
    without the GIL): the control for the thread's figure."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(store.root), str(nbytes), str(s)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None  # stdout=PIPE
    try:
        proc.stdout.readline()
        return run_loop(step, until=lambda: proc.poll() is not None)
    finally:
        proc.wait()
        if proc.returncode != 0:
            raise SystemExit(f"checkpoint_bench: the writer process failed (exit code {proc.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpiec.benchmarks.checkpoint_cost",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=256, help="checkpoint size in MiB (default 256)")
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="directory on the disk to measure (default: the system temp dir)")
    parser.add_argument("--reps", type=int, default=3,
                        help="repetitions of the loop measurements (default 3)")
    parser.add_argument("--nice", type=int, default=0,
                        help="BackgroundWriter(nice=N): lower the writer thread's CPU priority (default 0)")
    args = parser.parse_args(argv)
    if args.size_mb < 1 or args.reps < 1:
        parser.error("--size-mb and --reps must be >= 1")
    base = Path(args.dir)
    if not base.is_dir():
        parser.error(f"--dir {base}: no such directory")
    work = Path(tempfile.mkdtemp(prefix="mpiec-ckpt-bench-", dir=base))
    n = args.size_mb
    t_start = time.perf_counter()
    try:
        print(f"checkpoint benchmark: {n} MiB in {work} (python {sys.version.split()[0]}, "
              f"numpy {np.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})")

        mb_s, how = disk_write_throughput(work, n)
        print(f"(1) disk sequential write:       {mb_s:6.0f} MB/s  ({how})")

        data = np.random.default_rng(1).random(n * MiB // 4, dtype=np.float32)
        speeds = checksum_speeds(data)
        print("    checksums in memory:         " + ", ".join(f"{k} {v:.0f} MB/s" for k, v in speeds.items()))

        store = CheckpointStore(work / "store")
        steps = iter(range(1, 1_000_000))

        def write(arrays: dict[str, np.ndarray]) -> float:
            s = next(steps)
            info = store.write_part(s, "bench", arrays)
            shutil.rmtree(store.step_dir(s))
            return info.bytes / info.seconds / MB

        rates = [write({"table": data}) for _ in range(2)]
        print(f"(2) write_part of {n} MiB f32:   {max(rates):6.0f} MB/s  (best of 2: "
              f"{', '.join(f'{r:.0f}' for r in rates)} MB/s; temp file, crc32, fsync, rename)")

        step = Step()
        run_loop(step, 20)  # warm-up
        print(f"(3) training-like loop: {step.k} matmuls 512x512 f32 ({step.matmul_s * 1e3:.1f} ms, "
              f"GIL released) + {step.m} small numpy ops ({step.small_s * 1e3:.1f} ms, GIL held); "
              f"writer nice +{args.nice}")
        rows = []
        with BackgroundWriter(store, nice=args.nice) as writer:
            for i in range(args.reps):
                # baselines right before and after each write, so that drift in the machine's load
                # (other processes) is not taken for the write's cost
                before = run_loop(step, 40)
                t0 = time.perf_counter()
                snap = {"table": data.copy()}  # the snapshot a strategy takes before submitting
                t_snap = time.perf_counter() - t0
                s = next(steps)
                t0 = time.perf_counter()
                writer.submit(s, "bench", snap)
                del snap
                during = run_loop(step, until=lambda: not writer.busy)
                writer.wait()
                t_bg = time.perf_counter() - t0
                shutil.rmtree(store.step_dir(s))
                mid = run_loop(step, 40)

                s = next(steps)
                in_proc = loop_during_process_write(step, store, s, data.nbytes)
                shutil.rmtree(store.step_dir(s), ignore_errors=True)
                after = run_loop(step, 40)

                t0 = time.perf_counter()
                step()
                write({"table": data})
                t_sync_iter = time.perf_counter() - t0

                base = statistics.median(before + mid)
                r = {"base": base, "with": statistics.median(during), "n": len(during), "t_bg": t_bg,
                     "proc": statistics.median(in_proc), "base_p": statistics.median(mid + after),
                     "extra": sum(during) - len(during) * base, "snap": t_snap,
                     "stall": t_sync_iter - statistics.median(after)}
                r["ratio"], r["ratio_p"] = r["with"] / base, r["proc"] / r["base_p"]
                r["ratio_cpu"] = statistics.median(during.cpu) / statistics.median((before + mid).cpu)
                rows.append(r)
                print(f"    rep {i + 1}: median step {base * 1e3:.2f} ms without a write, "
                      f"{r['with'] * 1e3:.2f} ms during a background write (x{r['ratio']:.2f}, "
                      f"{r['n']} steps, {r['t_bg']:.2f} s; CPU time per step x{r['ratio_cpu']:.2f}); "
                      f"write from another process: x{r['ratio_p']:.2f}")
                print(f"           background: {r['snap'] * 1e3:.0f} ms snapshot copy + "
                      f"{r['extra'] * 1e3:.0f} ms of slower steps; synchronous: a {r['stall']:.2f} s stall")

        def med(key: str) -> float:
            return statistics.median(r[key] for r in rows)

        print(f"=> median over {len(rows)} reps: step time x{med('ratio'):.2f} during a background write "
              f"of {n} MiB (x{med('ratio_p'):.2f} while another process writes the same: contention without "
              f"the GIL; the loop's CPU time per step x{med('ratio_cpu'):.2f}); the training thread "
              f"loses {med('snap') + med('extra'):.2f} s ({med('snap'):.2f} s "
              f"snapshot + {med('extra'):.2f} s slower steps) against {med('stall'):.2f} s for a synchronous "
              f"write")
        print(f"    load average {os.getloadavg()[0]:.1f} at the end; other processes on the machine "
              f"move these figures")
        print(f"total {time.perf_counter() - t_start:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
