"""Runs across hosts: ``mpiec run --hostfile`` on three emulated hosts (network namespaces, see
``emulated_hosts.py``), ``ecrm`` and ``ckpt`` surviving a rank kill on another host and a node kill
to the failure-free checksum. Skipped, saying why, where namespaces cannot be made (not root,
no ``ip``); ``.ci/run`` runs as root.

The unit tests at the top (hostfile parsing, rank placement, the mpiexec command, the launcher's
kill of a stuck mpiexec) need neither MPI nor namespaces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from emulated_hosts import EmulatedHosts, unavailable
from run_helpers import mpiec, worker_processes

from mpiec.errors import MpiecError
from mpiec.launch.launcher import Host, kill_group, mpiexec_command, place_on_hosts, read_hostfile
from mpiec.launch.resolve import load_config
from mpiec.results import decode

# -- unit tests ------------------------------------------------------------------------------------


def test_hostfiles_are_read_or_refused_in_one_line(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# cluster\nh1 slots=4\n\nh2   # no slots\nh1 slots=2 max_slots=8\n")
    assert read_hostfile(f) == [Host("h1", 6), Host("h2", 0)]
    for bad, needle in (("h1 slots=x\n", r"line 1: expected 'HOST \[slots=N\]', got 'h1 slots=x'"),
                        ("# nothing\n", "names no host")):
        f.write_text(bad)
        with pytest.raises(MpiecError, match=needle):
            read_hostfile(f)
    with pytest.raises(MpiecError, match="missing does not exist"):
        read_hostfile(tmp_path / "missing")


def test_ranks_are_placed_by_node_and_the_config_records_it():
    hosts = [Host("a", 2), Host("b", 2), Host("c", 2)]
    cfg = load_config("tiny", sets=["layout.spares=2"])  # 7 ranks: monitor + 6 in blocks of 2
    assert place_on_hosts(cfg, hosts) == ["a", "a", "a", "b", "b", "c", "c"]
    assert cfg.layout.ranks_per_node == 2  # node j is host j: a node kill is a host's ranks
    cfg = load_config("tiny", sets=["layout.servers=6", "layout.spares=2", "layout.ranks_per_node=2"])
    # 5 nodes of 2 on 3 hosts in turn; the monitor with node 0 on the first host
    assert place_on_hosts(cfg, hosts) == ["a", "a", "a", "b", "b", "c", "c", "a", "a", "b", "b"]
    # a derived node size that ecrm cannot spread is refused before launch
    cfg = load_config("tiny", strategy="ecrm", sets=["strategy.k=2", "layout.servers=6", "layout.spares=2"])
    with pytest.raises(MpiecError, match="stripe 0 .* one failure of node 0"):
        place_on_hosts(cfg, hosts)


def test_the_mpiexec_command_maps_ranks_in_sequence_over_tcp(tmp_path):
    cfg = load_config("tiny")
    hosts = [Host("a", 1), Host("b", 8)]
    rank_hosts = place_on_hosts(cfg, hosts)
    cmd, _ = mpiexec_command(cfg, tmp_path / "c.json", tmp_path / "r.h5", rank_hosts=rank_hosts,
                             seqfile=tmp_path / "seq", hosts=hosts)
    text = " ".join(cmd)
    assert f"--hostfile {tmp_path / 'seq'} --map-by seq" in text and " -n " not in text
    if "--with-ft" in text:  # Open MPI (the wheel)
        assert "--mca btl tcp,sm,self" in text or "OMPI_MCA_btl" in os.environ
        assert "--oversubscribe --mca mpi_yield_when_idle 1" in text  # host a: 3 ranks on 1 slot


def test_the_heartbeat_detector_and_its_bounds(tmp_path):
    cfg = load_config("tiny", sets=["failures.detector='heartbeat'", "failures.heartbeat_period_s=0.5",
                                    "failures.heartbeat_timeout_s=4"])
    cmd, _ = mpiexec_command(cfg, tmp_path / "c.json", tmp_path / "r.h5")
    text = " ".join(cmd)
    if "--with-ft" in text:
        assert ("--mca mpi_ft_detector true --mca mpi_ft_detector_period 0.5 "
                "--mca mpi_ft_detector_timeout 4") in text
        assert "--prtemca oob_tcp_keepalive_time 2" in text
    plain, _ = mpiexec_command(load_config("tiny"), tmp_path / "c", tmp_path / "r")
    assert "mpi_ft_detector" not in " ".join(plain)
    with pytest.raises(MpiecError, match="heartbeat_timeout_s must be > 3 x failures.heartbeat_period_s"):
        load_config("tiny", sets=["failures.detector='heartbeat'", "failures.heartbeat_timeout_s=5"])
    with pytest.raises(MpiecError, match="failures.detector must be 'runtime' or 'heartbeat', got 'ring'"):
        load_config("tiny", sets=["failures.detector='ring'"])


def test_a_lost_daemon_is_reported_as_a_partition():
    """PRRTE 3.0.x's message when mpiexec loses a daemon (copied from a run whose host was cut off)."""
    import io

    from mpiec.launch.launcher import daemon_lost_message, relay_output

    text = ("-" * 74 + "\nPRTE has lost communication with a remote daemon.\n"
            "  HNP daemon   : [prterun-vm-16427@0,0] on node vm\n"
            "  Remote daemon: [prterun-vm-16427@0,2] on node mh146h2\n"
            "This is usually due to either a failure of the TCP network\n")
    lost: list[str] = []
    relay_output(io.StringIO(text), quiet=True, lost_daemons=lost)
    assert lost == ["", "mh146h2"]
    message = daemon_lost_message(lost)
    assert "lost: partition" in message and "mh146h2" in message and "\n" not in message


def test_a_stuck_mpiexec_is_killed_after_the_grace_period(tmp_path):
    """A process (and its child, in its session) that ignores SIGTERM is gone ``grace`` seconds later."""
    script = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    time.sleep(0.5)
    t0 = time.monotonic()
    kill_group(proc, grace=0.5)
    # SIGKILL (the script ignores SIGTERM and would sleep 60 s) after the grace period, not before
    assert proc.poll() == -signal.SIGKILL and time.monotonic() - t0 >= 0.4
    for _ in range(50):  # the child went with the session (a zombie awaiting its reaper is dead)
        ps = subprocess.run(["ps", "-o", "stat=", "-s", str(proc.pid)], capture_output=True, text=True)
        if all(state.startswith("Z") for state in ps.stdout.split()):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"processes of the session live on: {ps.stdout}")


# -- three emulated hosts ----------------------------------------------------------------------------

REASON = unavailable() if sys.platform.startswith("linux") else "emulated hosts need Linux"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    if REASON:
        pytest.skip(f"multi-host tests skipped: {REASON}")
    emulated = EmulatedHosts(tmp_path_factory.mktemp("hosts"))
    try:
        emulated.open()
        yield emulated
    finally:
        emulated.close()
        left = emulated.leftovers()
        assert not left, f"emulated hosts not cleaned up: {left}"


@pytest.fixture(scope="module")
def reference(failure_free):
    return failure_free("--preset", "tiny")["param_checksum"]  # shared: tests/runs/conftest.py


def across(hosts: EmulatedHosts, args: list[str], out: Path, timeout: float = 400):
    old = dict(os.environ)
    os.environ.update(hosts.env())
    try:
        return mpiec(["run", "--hostfile", str(hosts.hostfile), "--preset", "tiny", *args], out=out,
                     timeout=timeout)
    finally:
        os.environ.clear()
        os.environ.update(old)


def kill_events(res) -> list[tuple[str, int, str, str]]:
    host = {int(r["rank"]): decode(r["host"]) for r in res.ranks}
    return [(decode(e["role"]), int(e["role_index"]), decode(e["detail"]), host.get(int(e["rank"]), "?"))
            for e in res.events if decode(e["kind"]) == "kill"]


CASES = [
    # ecrm: 5 nodes of 2 on 3 hosts in turn (monitor and trainers on host 1, servers 0-1 on host 2,
    # 2-3 on host 3, 4-5 on host 1, spares 0-1 on host 2, spare 2 on host 3); server 2 dies alone on
    # host 3, then node 1 (servers 0 and 1) at once
    ("ecrm", ["--set", "strategy.k=2", "--set", "layout.servers=6", "--set", "layout.spares=3",
              "--set", "layout.ranks_per_node=2", "--kill", "server:2@step=12;node:1@step=28"],
     {"server:2@step=12": 1, "node:1@step=28": 2}),
    # ckpt: node 0 = trainers (host 1), node 1 = servers (host 2), node 2 = spares 0-1 (host 3),
    # node 3 = spare 2 (host 1); server 1 dies alone on host 2 (spare 0 takes it), then node 2 —
    # the promoted spare and spare 1 — at once
    ("ckpt", ["--set", "strategy.interval=5", "--set", "layout.spares=3", "--set", "layout.ranks_per_node=2",
              "--kill", "server:1@step=12;node:2@step=28"],
     {"server:1@step=12": 1, "node:2@step=28": 2}),
]


@pytest.mark.mpirun
@pytest.mark.kill
@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy,args,fired", CASES, ids=[c[0] for c in CASES])
def test_rank_and_node_kills_across_hosts_recover_to_the_failure_free_checksum(strategy, args, fired, hosts,
                                                                              reference, tmp_path):
    run = across(hosts, ["--strategy", strategy, *args], tmp_path)
    assert run.code == 0, run.stdout + run.stderr
    res = run.result()
    assert res.attrs["hosts"] == sorted(hosts.names)  # three hosts for real (the ranks' processor names)
    assert {decode(r["host"]) for r in res.ranks} <= set(hosts.names)
    s = res.summary
    assert s["param_checksum"] == reference and s["recoveries"] >= 2 and not s["lost"]
    kills = kill_events(res)
    assert {plan: sum(1 for k in kills if k[2] == plan) for plan in fired} == fired, kills
    monitor_host = next(decode(r["host"]) for r in res.ranks if decode(r["role"]) == "monitor")
    assert all(k[3] != monitor_host for k in kills)  # every victim on another host than the monitor
    assert time.sleep(0.5) or worker_processes(str(tmp_path)) == []
    assert hosts.pids() == []  # the hosts' daemons ended with the run


@pytest.mark.mpirun
@pytest.mark.kill
@pytest.mark.timeout(600)
def test_a_partition_ends_within_its_bound_with_a_clear_outcome(hosts, tmp_path):
    """Host 2 (the servers) loses its link mid-run. Open MPI 5.0.x cannot continue without a daemon:
    the outcome is the run lost with the reason "partition", within seconds of the cut (the keepalive
    on mpiexec's links), or recovered; never a hang, and no process of the run left on any host (the
    cut-off ranks find themselves without the monitor and stop)."""
    env = {**os.environ, **hosts.env()}
    cmd = [sys.executable, "-P", "-m", "mpiec", "run", "--hostfile", str(hosts.hostfile), "--preset", "tiny",
           "--strategy", "ckpt", "--set", "strategy.interval=10", "--set", "layout.spares=2",
           "--steps", "2000", "--set", "training.log_every=10", "--set", "failures.detector='heartbeat'",
           "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines, cut_at = [], None
    try:
        for line in proc.stdout:  # bounded by the test's timeout and the run's own time limit
            lines.append(line)
            if cut_at is None and "step      30/" in line:
                hosts.cut(1)
                cut_at = time.monotonic()
        proc.wait(timeout=30)
        ended = time.monotonic() - (cut_at or time.monotonic())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        hosts.heal(1)
    out = "".join(lines)
    assert cut_at is not None, out
    assert ended < 90, f"the run ended {ended:.0f} s after the cut\n{out}"
    if proc.returncode == 1:
        assert "the run was lost: partition" in out, out
    else:
        assert proc.returncode == 0 and "lost no" in out, out
    deadline = time.monotonic() + 40  # cut-off ranks stop once their heartbeat detector notices
    while (hosts.pids() or worker_processes(str(tmp_path))) and time.monotonic() < deadline:
        time.sleep(1)
    assert worker_processes(str(tmp_path)) == [] and hosts.pids() == [], hosts.pids()
    print(f"partition: exit {proc.returncode} {ended:.1f} s after the cut")
