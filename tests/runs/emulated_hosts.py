"""Several hosts on one machine, for the multi-host tests: network namespaces on a bridge.

Owns the emulated hosts (docs/runtime.md "Nodes, hosts and partitions"): a Linux bridge, one network
namespace per host joined to it by a veth pair, the host names in ``/etc/hosts`` (marked lines),
and the launch agent Open MPI's launcher calls instead of ``ssh`` (``PRTE_MCA_plm_ssh_agent``):
it starts the host's daemon inside the namespace, in a UTS namespace of its own whose host name
is the host's (so ``MPI.Get_processor_name`` tells the hosts apart), detached like a remote
daemon.

Invariants: every name is unique to this process (a tag from the pid: two test sessions on one
machine do not collide); ``close`` removes everything ``EmulatedHosts`` made — the processes
still inside the namespaces (SIGKILL), the namespaces, the bridge and its links, the
``/etc/hosts`` lines — whatever state setup reached, and never raises; ``unavailable()`` says in
one line why this machine cannot do it (not root, no ``ip``, namespaces refused).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

HOSTS_FILE = Path("/etc/hosts")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def unavailable() -> str:
    """Why emulated hosts cannot be built here ("" when they can)."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, a bridge, /etc/hosts)"
    for tool in ("ip", "unshare", "setsid"):
        if not shutil.which(tool):
            return f"emulated hosts need the '{tool}' command"
    probe = f"mpiec-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"this machine refuses network namespaces ('ip netns add': {made.stderr.strip()[:120]})"
    _ip("netns", "del", probe, check=False)
    if not os.access(HOSTS_FILE, os.W_OK):
        return f"{HOSTS_FILE} is not writable"
    return ""


class EmulatedHosts:
    """``n`` emulated hosts (``names``) on a private /24; ``env()`` is what mpiexec needs to reach them."""

    def __init__(self, workdir: Path, n: int = 3) -> None:
        tag = 20 + os.getpid() % 200
        self.tag = tag
        self.subnet = f"10.213.{tag}.0/24"
        self.bridge = f"mpbr{tag}"
        self.names = [f"mh{tag}h{i}" for i in range(1, n + 1)]
        self.addrs = [f"10.213.{tag}.{10 + i}" for i in range(1, n + 1)]
        self.outer = [f"mpv{tag}h{i}" for i in range(1, n + 1)]  # the bridge's end of each host's link
        self.marker = f"# mpiec-test-{tag}"
        self.workdir = Path(workdir)
        self.agent = self.workdir / "agent.sh"
        self.hostfile = self.workdir / "hostfile"

    # -- building --------------------------------------------------------------------------
    def open(self) -> EmulatedHosts:
        """Build everything; on any error clean up what was made and raise."""
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        self.close()  # leftovers of an earlier session with the same tag
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"10.213.{self.tag}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for name, addr, outer in zip(self.names, self.addrs, self.outer, strict=True):
            inner = f"mpe{self.tag}{name[-2:]}"
            _ip("netns", "add", name)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", outer, "master", self.bridge, "up")
            _ip("link", "set", inner, "netns", name)
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
        with HOSTS_FILE.open("a") as f:
            for name, addr in zip(self.names, self.addrs, strict=True):
                f.write(f"{addr} {name} {self.marker}\n")
        self.workdir.mkdir(parents=True, exist_ok=True)
        cases = "\n".join(f"  {name}|{addr}) NS={name};;" for name, addr in zip(self.names, self.addrs,
                                                                                   strict=True))
        # PRRTE calls it as: agent [options] HOST "<daemon command>"
        self.agent.write_text(f"""#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
HOST="$1"; shift
case "$HOST" in
{cases}
  *) echo "emulated hosts: unknown host $HOST" >&2; exit 1;;
esac
setsid ip netns exec "$NS" unshare --uts sh -c "hostname $NS; exec sh -c \\"\\$0\\"" "$*" \\
   </dev/null >>"{self.workdir}/prted.$NS.log" 2>&1 &
exit 0
""")
        self.agent.chmod(0o755)
        self.hostfile.write_text("".join(f"{name} slots=2\n" for name in self.names))

    def env(self) -> dict[str, str]:
        """Environment for ``mpiec run --hostfile``: the launch agent, and TCP on this subnet only."""
        return {"PRTE_MCA_plm_ssh_agent": str(self.agent), "PRTE_MCA_oob_tcp_if_include": self.subnet,
                "OMPI_MCA_btl_tcp_if_include": self.subnet}

    # -- faults ----------------------------------------------------------------------------
    def cut(self, host: int) -> None:
        """A network partition: host ``host`` (0-based) loses its link; its processes keep running."""
        _ip("link", "set", self.outer[host], "down")

    def heal(self, host: int) -> None:
        _ip("link", "set", self.outer[host], "up")

    def pids(self, host: int | None = None) -> list[int]:
        """Processes inside the namespaces (of one host, or of all)."""
        out = []
        for name in self.names if host is None else [self.names[host]]:
            res = _ip("netns", "pids", name, check=False)
            out += [int(p) for p in res.stdout.split() if p.isdigit()]
        return out

    # -- cleaning up -----------------------------------------------------------------------
    def close(self) -> None:
        """Remove everything this tag made. Never raises: every step is tried."""
        for _ in range(3):  # daemons may start children while we kill: repeat until none is left
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for name in self.names:
            _ip("netns", "del", name, check=False)
        for outer in self.outer:  # gone with their namespace's end, unless that never moved
            _ip("link", "del", outer, check=False)
        _ip("link", "del", self.bridge, check=False)
        with contextlib.suppress(OSError):
            lines = HOSTS_FILE.read_text().splitlines(keepends=True)
            kept = [line for line in lines if not line.rstrip("\n").endswith(self.marker)]
            if kept != lines:
                with HOSTS_FILE.open("w") as f:  # in place: /etc/hosts may be a bind mount
                    f.writelines(kept)

    def leftovers(self) -> list[str]:
        """What ``close`` should have removed and did not (empty when clean)."""
        out = [f"namespace {n}" for n in self.names if _ip("netns", "pids", n, check=False).returncode == 0]
        out += [f"link {link}" for link in [self.bridge, *self.outer]
                if _ip("link", "show", link, check=False).returncode == 0]
        with contextlib.suppress(OSError):
            out += [f"/etc/hosts line {line.strip()}" for line in HOSTS_FILE.read_text().splitlines()
                    if line.endswith(self.marker)]
        return out

    def __enter__(self) -> EmulatedHosts:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
