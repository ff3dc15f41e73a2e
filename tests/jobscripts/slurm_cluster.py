"""A throw-away single-node SLURM cluster (Debian's slurm-wlm + munge) for tests, run as root.

Owns: installing the packages when they are missing (``apt-get``), one scratch directory
holding every file the cluster writes (munge key and socket, ``slurm.conf``, state, spool,
logs), the three daemons it starts (``munged``, ``slurmctld``, ``slurmd``, each in the
foreground so its pid is the one we hold), and stopping them.

Invariants:

* nothing outside the scratch directory is written except by ``apt-get``: the daemons get
  their key, socket, pid, log and state paths on the command line or in our ``slurm.conf``,
  and they listen on free ports picked at start, so a system SLURM or a second test cluster
  is not disturbed;
* ``stop()`` ends exactly what this cluster started, also after a failure: it cancels the
  jobs, waits for them (bounded), terminates the daemons by pid, then kills by pid any
  leftover process that carries this cluster's unique token in its environment (job steps
  and ``slurmstepd``, which inherit it from the daemons or from ``sbatch``). The daemons
  also die with the process that started them (``PR_SET_PDEATHSIG``), so a test killed
  hard leaves no daemon behind;
* every wait is bounded and says what it waited for when it gives up.

The node declares more CPUs than the machine has (``SlurmdParameters=config_overrides``)
so that jobs asking for 8 tasks fit on a 2-core machine; the partition does not
oversubscribe, so jobs run one after the other, as on a real node.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "sinfo", "scancel")
PACKAGES = ("slurm-wlm", "munge")
# Job states after which a job never runs again (an array task pending a requeue is not one).
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
TOKEN_VAR = "MPIEC_TEST_SLURM_TOKEN"


class SlurmUnavailable(Exception):
    """SLURM is not installed and cannot be installed here (the reason is the message)."""


class ClusterError(RuntimeError):
    """The cluster did not come up, or a job did not end, within its bound."""


def missing_programs() -> list[str]:
    return [p for p in (*DAEMONS, *CLIENTS) if shutil.which(p) is None]


def ensure_installed(timeout: float = 300.0) -> None:
    """Install slurm-wlm and munge with apt-get if they are missing; ``SlurmUnavailable`` if
    that is impossible here (not root, no apt-get, the install failed)."""
    missing = missing_programs()
    if not missing:
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"SLURM is not installed ({', '.join(missing)} missing) and installing "
                               "it needs root (apt-get install slurm-wlm munge)")
    if shutil.which("apt-get") is None:
        raise SlurmUnavailable(f"SLURM is not installed ({', '.join(missing)} missing) and there is no "
                               "apt-get to install Debian's slurm-wlm and munge")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait_lock = ["-o", "DPkg::Lock::Timeout=120"]  # another apt-get may be running (CI setup)
    for cmd in (["apt-get", *wait_lock, "update", "-qq"],
                ["apt-get", *wait_lock, "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"'{' '.join(cmd)}' did not finish in {timeout:.0f} s") from None
        if proc.returncode != 0:
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise SlurmUnavailable(f"'{' '.join(cmd)}' failed (exit {proc.returncode}): {tail}")
    still = missing_programs()
    if still:
        raise SlurmUnavailable(f"apt-get installed {', '.join(PACKAGES)} but {', '.join(still)} "
                               "is still not on PATH")


def _die_with_parent() -> None:
    """preexec_fn: the daemon gets SIGTERM when the process that started it dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """One controller and one compute node on this machine, all state under ``scratch``."""

    def __init__(self, scratch: Path, cpus: int = 8, real_memory_mb: int = 4000) -> None:
        self.dir = Path(scratch)
        self.cpus = cpus
        self.real_memory_mb = real_memory_mb
        self.node = socket.gethostname().split(".")[0]
        self.token = secrets.token_hex(8)
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.logs = self.dir / "log"
        self.procs: dict[str, subprocess.Popen] = {}
        self.jobs: list[str] = []  # every job id submitted through sbatch(), for stop()

    # -- environment ---------------------------------------------------------------
    def env(self, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
        """An environment for SLURM clients (and, via sbatch's export, for the jobs): our
        slurm.conf, the token that marks our processes, no SLURM_* leaking in from outside."""
        env = {k: v for k, v in (base if base is not None else os.environ).items()
               if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}
        env.update(SLURM_CONF=str(self.conf), **{TOKEN_VAR: self.token}, **extra)
        return env

    # -- start -------------------------------------------------------------------------
    def write_config(self) -> None:
        for d in ("munge", "state", "spool", "log"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir / "munge", 0o755)  # munged wants the socket directory searchable
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        d = self.dir
        self.conf.write_text("\n".join([
            "ClusterName=mpiectest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire is also how long a requeued job waits before it may start again
            # (default 120 s); the scheduler's periodic pass (default every 60 s) starts it then.
            f"AuthInfo=socket={self.munge_socket},cred_expire=10",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd.pid",
            f"SlurmctldLogFile={self.logs}/slurmctld.log",
            f"SlurmdLogFile={self.logs}/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "KillWait=5",  # a requeued or cancelled job gets SIGKILL 5 s after SIGTERM
            "MinJobAge=600",  # finished jobs stay visible to 'scontrol show job'
            "InactiveLimit=0",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} Sockets=1 "
            f"CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory={self.real_memory_mb} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.logs / f"{name}.out", "ab")  # the daemon keeps its own copy of the fd
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                            stdin=subprocess.DEVNULL, cwd=self.dir,
                                            preexec_fn=_die_with_parent)
        log.close()

    def start(self, timeout: float = 60.0) -> None:
        """Write the config, start munged, slurmctld and slurmd, wait until the node is idle."""
        self.write_config()
        m = self.dir / "munge"
        self._spawn("munged", ["munged", "--foreground", "--force", f"--key-file={m / 'munge.key'}",
                               f"--socket={self.munge_socket}", f"--pid-file={m / 'munged.pid'}",
                               f"--log-file={self.logs / 'munged.log'}", f"--seed-file={m / 'seed'}"])
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged's socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
        self._wait(lambda: self._client_ok(["scontrol", "ping"], "UP"), timeout, "slurmctld to answer")
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(lambda: self.node_state() == "idle", timeout, f"node {self.node} to be idle")

    def _client_ok(self, cmd: list[str], expect: str) -> bool:
        r = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=30)
        return r.returncode == 0 and expect in r.stdout

    def node_state(self) -> str:
        r = subprocess.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%T"], env=self.env(),
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip()

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise ClusterError(f"{name} exited with status {p.returncode} while waiting for "
                                       f"{what}\n{self.diagnostics()}")
            if ready():
                return
            time.sleep(0.2)
        raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.diagnostics()}")

    # -- jobs ----------------------------------------------------------------------------
    def sbatch(self, *args: str, env: dict[str, str], cwd: Path) -> str:
        """Submit; returns the job id (of the array, for an array)."""
        r = subprocess.run(["sbatch", "--parsable", *args], env=env, cwd=cwd,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise ClusterError(f"sbatch {' '.join(args)} failed: {r.stderr.strip()}")
        job = r.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def track(self, job_ids: list[str]) -> None:
        """Jobs submitted by other means (a script calling sbatch) that stop() must cancel."""
        self.jobs.extend(job_ids)

    def records(self, job_id: str) -> list[dict[str, str]]:
        """``scontrol show job -o`` of a job: one dict per job (one per task of an array)."""
        r = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=self.env(),
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise ClusterError(f"scontrol show job {job_id}: {r.stderr.strip()}")
        out = []
        for line in r.stdout.splitlines():
            rec = {}
            for field in line.split():
                key, sep, value = field.partition("=")
                if sep:
                    rec[key] = value
            if rec:
                out.append(rec)
        return out

    def wait(self, job_ids: list[str], timeout: float, n_expected: dict[str, int] | None = None
             ) -> dict[str, list[dict[str, str]]]:
        """Wait until every job (every task of an array; ``n_expected`` tasks for arrays whose
        tasks are not all split out yet) is in a terminal state; their records."""
        deadline = time.monotonic() + timeout
        n_expected = n_expected or {}
        while True:
            recs = {j: self.records(j) for j in job_ids}
            done = all(len(r) >= n_expected.get(j, 1) and all(x.get("JobState") in TERMINAL for x in r)
                       for j, r in recs.items())
            if done:
                return recs
            if time.monotonic() > deadline:
                states = {j: [(x.get("JobId"), x.get("ArrayTaskId"), x.get("JobState"), x.get("Reason"))
                              for x in r] for j, r in recs.items()}
                raise ClusterError(f"jobs not finished after {timeout:.0f} s: {states}\n"
                                   f"{self.diagnostics()}")
            time.sleep(0.5)

    def scontrol(self, *args: str) -> str:
        r = subprocess.run(["scontrol", *args], env=self.env(), capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            raise ClusterError(f"scontrol {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    # -- stop ----------------------------------------------------------------------------------
    def diagnostics(self, lines: int = 25) -> str:
        """The tails of the daemons' logs, for an assertion message."""
        parts = []
        for f in sorted(self.logs.glob("*")) if self.logs.is_dir() else []:
            tail = f.read_text(errors="replace").splitlines()[-lines:]
            if tail:
                parts.append(f"--- {f.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def _ours(self) -> list[int]:
        """Pids of live processes whose environment carries this cluster's token."""
        marker = f"{TOKEN_VAR}={self.token}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours to read
        return pids

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel our jobs, stop our daemons, kill any process left with our token. Idempotent."""
        if self.jobs and self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", *sorted(set(self.jobs))], env=self.env(), capture_output=True,
                           timeout=30)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    recs = [x for j in set(self.jobs) for x in self.records(j)]
                except (ClusterError, subprocess.TimeoutExpired):
                    break
                if all(x.get("JobState") in TERMINAL | {"PENDING"} for x in recs):
                    break
                time.sleep(0.5)
        for name in reversed(DAEMONS):  # slurmd, slurmctld, then munged
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=15)
        for pid in self._ours():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
