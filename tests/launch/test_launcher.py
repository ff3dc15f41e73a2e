"""Launcher, before and after the ranks: result names owned by one run, writable outputs, messages."""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path

import pytest

from mpiec.errors import MpiecError
from mpiec.launch.launcher import (
    _written_by_us,
    check_output_dir,
    claim_result_path,
    fmt_seconds,
    launch,
    no_result_message,
)
from mpiec.launch.resolve import load_config
from mpiec.results import read_result


def test_a_name_is_claimed_by_exactly_one_of_many_concurrent_runs(tmp_path):
    got, errors = [], []

    def claim():
        try:
            got.append(claim_result_path(tmp_path, "shared", unique=False))
        except MpiecError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 1 and len(errors) == 15
    assert all("claimed by another run" in e and "\n" not in e for e in errors)
    path, lock = got[0]
    assert path == (tmp_path / "shared.h5").resolve() and lock.name == ".shared.h5.lock"
    assert lock.exists() and not path.exists()  # the writer still creates the target itself


def test_unique_names_get_a_suffix(tmp_path):
    paths = [claim_result_path(tmp_path, "tiny-none-s1", unique=True)[0] for _ in range(3)]
    assert [p.name for p in paths] == ["tiny-none-s1.h5", "tiny-none-s1-2.h5", "tiny-none-s1-3.h5"]
    (tmp_path / "done.h5").write_bytes(b"x")
    assert claim_result_path(tmp_path, "done", unique=True)[0].name == "done-2.h5"
    with pytest.raises(MpiecError, match="already exists"):
        claim_result_path(tmp_path, "done", unique=False)
    assert not (tmp_path / ".done.h5.lock").exists()  # a refused claim leaves no lock behind


def test_launch_refuses_a_claimed_name_before_starting_anything(tmp_path):
    cfg = load_config("tiny", sets=["output.name='mine'"])
    _, lock = claim_result_path(tmp_path, "mine", unique=False)
    with pytest.raises(MpiecError, match="claimed by another run"):
        launch(cfg, tmp_path)
    assert lock.exists()  # the other run's lock is left alone


@pytest.mark.parametrize("where", ["/proc/self", "/sys/kernel", "/proc/self/status/x"])
def test_unwritable_output_directories_are_one_line(where):
    with pytest.raises(MpiecError) as info:
        check_output_dir(Path(where))
    assert "\n" not in str(info.value) and where.split("/x")[0] in str(info.value)


def test_the_probe_leaves_nothing_behind(tmp_path):
    check_output_dir(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir() and not list((tmp_path / "new" / "dir").iterdir())


def test_names_too_long_for_the_file_system_are_refused_before_the_run(tmp_path):
    with pytest.raises(MpiecError, match="too long"):
        claim_result_path(tmp_path, "n" * 246, unique=False)
    assert not list(tmp_path.iterdir())
    claim_result_path(tmp_path, "n" * 200, unique=False)  # the longest a config may give


def test_a_file_written_by_someone_else_is_not_claimed(tmp_path):
    from mpiec.results import ResultWriter

    cfg = load_config("tiny")
    other = load_config("tiny", sets=["training.seed=2"])
    path = tmp_path / "r.h5"
    attrs = {"config": other.to_json(), "strategy": "none", "seed": 2, "failure_mode": "emulated",
             "ulfm": False}
    ResultWriter(path, attrs).close({"lost": False})
    assert not _written_by_us(path, cfg, 0.0)
    assert _written_by_us(path, other, 0.0)
    assert not _written_by_us(path, other, path.stat().st_mtime + 60)  # older than the run


def test_messages():
    assert "a rank failed" in no_result_message(0) and "code 0" not in no_result_message(0)
    assert "code 3" in no_result_message(3)
    assert "signal 9" in no_result_message(-9)
    assert fmt_seconds(1e-9) == "1e-09" and fmt_seconds(0.25) == "0.25" and fmt_seconds(260.0) == "260"


@pytest.mark.parametrize("script, needle", [
    ("exit 0", "the ranks ended without writing a result file: a rank failed"),
    ("exit 3", "mpiexec exited with code 3 and no result file was written"),
    ("kill -9 $$", "mpiexec was killed by signal 9"),
])
def test_ranks_that_end_without_a_result_are_reported_as_such(tmp_path, monkeypatch, script, needle):
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEC_MPIEXEC", str(fake))
    outcome = launch(load_config("tiny"), tmp_path / "out", quiet=True)
    assert outcome.code == 3 and outcome.path is None and needle in outcome.message
    assert "code 0" not in outcome.message
    assert not list((tmp_path / "out").iterdir())  # lock released, nothing left


_PMIX_BOX = ("-" * 74 + "\nThe PMIx server's listener thread failed to start. We cannot\ncontinue.\n"
             + "-" * 74 + "\n")


@pytest.mark.parametrize("first, calls", [
    (f"cat <<'END'\n{_PMIX_BOX}END\nexit 213", 2),  # mpiexec's start-up failure: started once more
    ("echo 'some other failure'; exit 213", 1),  # any other: reported, not retried
])
def test_an_mpiexec_that_could_not_start_is_started_once_more(tmp_path, monkeypatch, capsys, first, calls):
    count = tmp_path / "calls"
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho x >> {count}\n"
                    f"if [ $(wc -l < {count}) -eq 1 ]; then\n{first}\nfi\nexit 5\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEC_MPIEXEC", str(fake))
    outcome = launch(load_config("tiny"), tmp_path / "out", quiet=False)
    assert len(count.read_text().splitlines()) == calls
    said = capsys.readouterr()
    assert ("starting the run once more" in said.err) == (calls == 2)
    # the second start's own outcome is the run's (this fake then exits 5 without a result)
    assert outcome.code == 3 and f"code {5 if calls == 2 else 213}" in outcome.message
    assert not list((tmp_path / "out").iterdir())


def test_a_file_someone_else_put_at_the_target_is_not_reported(tmp_path, monkeypatch):
    """A writer that ignores the lock (a hand-started worker): its file is not this run's."""
    target = tmp_path / "out" / "mine.h5"
    other = load_config("tiny", sets=["training.seed=7"])
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"
                    f"{sys.executable} -c \"import sys; sys.path[:0] = {sys.path!r}; "
                    "from mpiec.results import ResultWriter; from mpiec.launch.resolve import load_config; "
                    "c = load_config('tiny', sets=['training.seed=7']); "
                    f"ResultWriter('{target}', {{'config': c.to_json(), 'strategy': 'none', 'seed': 7, "
                    "'failure_mode': 'emulated', 'ulfm': False}).close({'lost': False})\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEC_MPIEXEC", str(fake))
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), tmp_path / "out", quiet=True)
    assert target.exists() and _written_by_us(target, other, 0.0)
    assert outcome.code == 3 and outcome.path is None and "is not this run's" in outcome.message


def test_a_tiny_time_limit_is_printed_as_given(tmp_path, monkeypatch):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEC_MPIEXEC", str(fake))
    outcome = launch(load_config("tiny"), tmp_path / "out", timeout=1e-3, quiet=True)
    # the limit fired (the fake mpiexec would sleep 30 s): the message says so; no wall-time bound
    assert outcome.code == 3 and "time limit of 0.001 s" in outcome.message


def test_a_run_on_one_host_leaves_out_the_ofi_btl_and_a_multi_node_job_keeps_it(tmp_path, monkeypatch):
    from mpiec.launch.launcher import mpi_flavour, mpiexec_command, multi_node_allocation

    for var in ("OMPI_MCA_btl", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "PBS_NODEFILE", "LSB_HOSTS",
                "LSB_MCPU_HOSTS", "PE_HOSTFILE"):
        monkeypatch.delenv(var, raising=False)
    cfg = load_config("tiny")
    cmd, env = mpiexec_command(cfg, tmp_path / "c.json", tmp_path / "r.h5")
    if mpi_flavour(cmd[0]) != "openmpi":
        pytest.skip("the ofi btl is Open MPI's; this mpiexec is another MPI")
    assert env["OMPI_MCA_btl"] == "^ofi"
    monkeypatch.setenv("OMPI_MCA_btl", "tcp,self")  # the user's choice wins
    assert mpiexec_command(cfg, tmp_path / "c.json", tmp_path / "r.h5")[1]["OMPI_MCA_btl"] == "tcp,self"
    monkeypatch.delenv("OMPI_MCA_btl")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "4")  # mpiexec spans the allocation's nodes
    assert "OMPI_MCA_btl" not in mpiexec_command(cfg, tmp_path / "c.json", tmp_path / "r.h5")[1]
    assert multi_node_allocation({"SLURM_NNODES": "2"}) and multi_node_allocation({"PBS_NODEFILE": "/x"})
    assert not multi_node_allocation({"SLURM_JOB_NUM_NODES": "1"}) and not multi_node_allocation({})


def test_the_launching_process_never_initialises_mpi(tmp_path):
    import subprocess

    args = ["config", "--preset", "tiny", "--strategy", "ecrm", "--write", str(tmp_path / "c.json")]
    code = ("from mpiec.cli import main\n"
            f"main({args!r})\n"
            "import mpi4py.MPI as MPI\n"
            "print(MPI.Is_initialized())\n")
    # a bound, not a timing: the imports alone took ~60 s at load 60
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "False"


def test_open_mpi_noise_after_a_peer_dies_is_not_relayed(capsys):
    import io

    from mpiec.launch.launcher import relay_output

    text = ("[mpiec] step 10\n"
            "NBC_Progress: an error 75 was found during schedule 0x55 at row-offset 0 - aborting\n"
            "[warn] Epoll MOD(1) on fd 32 failed. Old events were 6; read change was 0 (none); write change "
            "was 2 (del); close change was 0 (none): Bad file descriptor\n"
            "[warn] something else\n")
    relay_output(io.StringIO(text), quiet=False)
    assert capsys.readouterr().out.splitlines() == ["[mpiec] step 10", "[warn] something else"]


# -- issue 12: checkpoint and log folders, --resume, leftovers, what the console shows ---------------

def _fake_mpiexec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """An ``mpiexec`` running ``body`` (sh; ``$out`` = the run's result path, ``$stem`` its stem)."""
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"
                    "while [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n"
                    "stem=$(basename \"$out\" .h5)\n" + body + "\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEC_MPIEXEC", str(fake))
    return fake


def test_a_folder_that_is_a_file_or_under_one_is_one_line(tmp_path):
    from mpiec.launch.launcher import check_writable_dir

    (tmp_path / "f").write_text("x")
    with pytest.raises(MpiecError) as info:
        check_writable_dir(tmp_path / "f", "checkpoint directory (strategy.dir)", keep=False)
    assert str(info.value) == f"checkpoint directory (strategy.dir) {tmp_path / 'f'} is a file"
    with pytest.raises(MpiecError) as info:
        check_writable_dir(tmp_path / "f" / "a" / "b", "log directory (strategy.log_dir)", keep=False)
    assert str(info.value) == (f"log directory (strategy.log_dir) {tmp_path / 'f' / 'a' / 'b'} cannot be "
                               f"created: {tmp_path / 'f'} is a file")
    assert (tmp_path / "f").read_text() == "x" and sorted(tmp_path.iterdir()) == [tmp_path / "f"]


def test_a_checked_folder_the_ranks_create_is_not_left_behind(tmp_path):
    from mpiec.launch.launcher import check_writable_dir

    check_writable_dir(tmp_path / "a" / "b" / "c", "checkpoint directory", keep=False)
    assert not list(tmp_path.iterdir())
    (tmp_path / "kept").mkdir()
    check_writable_dir(tmp_path / "kept", "checkpoint directory", keep=False)
    assert (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder no one may write into: a read-only tmpfs (root), else a chmod'd folder."""
    import os
    import subprocess

    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)],
                             capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("root, and no read-only file system can be mounted here")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], capture_output=True)


def test_a_read_only_folder_is_one_line(read_only_dir):
    from mpiec.launch.launcher import check_writable_dir

    for target, verb in ((read_only_dir, "write into"), (read_only_dir / "sub" / "dir", "create")):
        with pytest.raises(MpiecError) as info:
            check_writable_dir(target, "checkpoint directory (strategy.dir)", keep=False)
        assert str(info.value).startswith(f"cannot {verb} the checkpoint directory (strategy.dir) {target}: ")
        assert "\n" not in str(info.value)


def test_the_folders_a_strategy_writes_into(tmp_path):
    from mpiec.launch.launcher import strategy_dirs

    path = tmp_path / "out" / "run.h5"
    assert strategy_dirs(load_config("tiny"), path) == []
    assert strategy_dirs(load_config("tiny", strategy="ckpt"), path) == [
        ("checkpoint directory", tmp_path / "out" / "run.ckpt")]
    assert strategy_dirs(load_config("tiny", strategy="cnr", sets=["strategy.dir='/x/ck'"]), path) == [
        ("checkpoint directory (strategy.dir)", Path("/x/ck"))]
    assert strategy_dirs(load_config("tiny", strategy="log", sets=["strategy.log_dir='/x/lg'"]), path) == [
        ("checkpoint directory", tmp_path / "out" / "run.ckpt"),
        ("log directory (strategy.log_dir)", Path("/x/lg"))]
    assert strategy_dirs(load_config("tiny", strategy="ecsnap", sets=["strategy.dir='/x/ck'"]), path) == []
    assert strategy_dirs(load_config("tiny", strategy="ecsnap", sets=["strategy.dir='/x/ck'",
                                                                      "strategy.disk_every=5"]), path) == [
        ("checkpoint directory (strategy.dir)", Path("/x/ck"))]
    assert strategy_dirs(load_config("tiny", strategy="ckpt"), path, resume="/x/old.ckpt") == [
        ("--resume checkpoint directory", Path("/x/old.ckpt"))]


@pytest.mark.parametrize("strategy, sets", [
    ("ckpt", ["strategy.dir='{file}'"]),
    ("cpr", ["strategy.dir='{file}/sub'"]),
    ("cnr", ["strategy.dir='{file}'"]),
    ("log", ["strategy.log_dir='{file}'", "strategy.log_memory_mb=0"]),
    ("ecsnap", ["strategy.disk_every=5", "strategy.dir='{file}'"]),
])
def test_an_unusable_checkpoint_or_log_folder_is_refused_before_any_rank_starts(tmp_path, monkeypatch,
                                                                                 strategy, sets):
    """Issue 12, item 6: a file as strategy.dir ended rc 3 with a traceback from every rank."""
    started = tmp_path / "started"
    _fake_mpiexec(tmp_path, monkeypatch, f"touch {started}")
    (tmp_path / "FILE").write_text("mine")
    cfg = load_config("tiny", strategy=strategy, sets=[s.format(file=tmp_path / "FILE") for s in sets])
    with pytest.raises(MpiecError) as info:
        launch(cfg, tmp_path / "out", quiet=True)
    assert str(tmp_path / "FILE") in str(info.value) and "\n" not in str(info.value)
    assert not started.exists() and (tmp_path / "FILE").read_text() == "mine"
    assert not list((tmp_path / "out").iterdir())  # no lock, no empty checkpoint folder


def _checkpoint(root: Path, step: int, **sets: object) -> Path:
    import numpy as np

    from mpiec.storage.checkpoint import CheckpointStore

    store = CheckpointStore(root)
    cfg = load_config("tiny", strategy="ckpt", sets=[f"{k}={v}" for k, v in sets.items()])
    store.commit(step, [store.write_part(step, "trainer", {"params": np.zeros(3, np.float32)})],
                 {"config": cfg.to_dict(), "servers": cfg.layout.servers})
    return root


def test_resume_refuses_another_model_and_names_every_key(tmp_path):
    """Issue 12, item 8: --set model.dim=16 on a dim-8 checkpoint: rc 3, five lines naming no cause."""
    from mpiec.launch.launcher import check_resume

    root = _checkpoint(tmp_path / "ck", 29)
    cfg = load_config("tiny", strategy="ckpt", sets=["model.dim=16", "training.dense_optimizer='sgd'"])
    with pytest.raises(MpiecError) as info:
        check_resume(cfg, root)
    assert str(info.value) == (f"--resume {root}: the checkpoint of step 29 holds another model: "
                               "model.dim: 8 in the checkpoint, 16 now; training.dense_optimizer: 'adagrad' "
                               "in the checkpoint, 'sgd' now (these keys cannot change on --resume; the "
                               "layout can)")
    check_resume(load_config("tiny", strategy="ckpt", sets=["layout.servers=3", "layout.trainers=3"]), root)


@pytest.mark.parametrize("steps", [20, 29, 30])
def test_resume_past_the_end_is_refused(tmp_path, steps):
    """Issue 12, item 9: a step-29 checkpoint with training.steps = 20 'completed' 0 steps, nan throughput."""
    from mpiec.launch.launcher import check_resume

    root = _checkpoint(tmp_path / "ck", 29)
    with pytest.raises(MpiecError, match=f"checkpoint is of step 29, so training.steps = {steps} leaves no "
                                         "step to train; give training.steps > 30"):
        check_resume(load_config("tiny", strategy="ckpt", sets=[f"training.steps={steps}"]), root)
    check_resume(load_config("tiny", strategy="ckpt", sets=["training.steps=31"]), root)


def test_resume_refuses_a_kill_it_would_never_reach(tmp_path):
    """Issue 12, item 17: a kill before the resumed run's first step never fired, silently."""
    from mpiec.launch.launcher import check_resume

    root = _checkpoint(tmp_path / "ck", 29)
    cfg = load_config("tiny", strategy="ckpt", kill=["server:1@step=10", "trainer:0@step=30",
                                                    "server:0@step=29+5ms", "trainer:1@time=3"])
    with pytest.raises(MpiecError) as info:
        check_resume(cfg, root)
    assert "kill server:1@step=10, server:0@step=29+5ms is planned before step 30" in str(info.value)
    check_resume(load_config("tiny", strategy="ckpt", kill=["server:1@step=30", "trainer:1@time=3"]), root)


def test_a_stopped_run_leaves_no_kill_notes(tmp_path, monkeypatch):
    """Issue 12, item 17: a timed-out run left .STEM.<run>.kills beside its output."""
    _fake_mpiexec(tmp_path, monkeypatch, 'd="$(dirname "$out")/.$stem.0123456789ab.kills"\n'
                  'mkdir -p "$d" && echo "{}" > "$d/3.json"\nexec sleep 30')
    out = tmp_path / "out"
    out.mkdir()
    (out / ".other.0123456789ab.kills").mkdir()  # another run's: left alone
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), out, timeout=2, quiet=True)
    assert outcome.code == 3 and "time limit" in outcome.message
    assert sorted(p.name for p in out.iterdir()) == [".other.0123456789ab.kills"]


_SPAWN_EXIT = """\
--------------------------------------------------------------------------
prterun has exited due to process rank 0 with PID 12374 on node vm exiting
improperly. There are three reasons this could occur:

1. this process did not call "init" before exiting, but others in the
job did.
You can avoid this message by specifying -quiet on the prterun command
line.
--------------------------------------------------------------------------
LAUNCHER JOB OBJECT NOT FOUND
"""


def test_the_report_on_a_spawned_replacements_exit_is_held_back(capsys):
    """Issue 12, item 17: a run that recovered by spawn ended with PRRTE's 20-line block."""
    import io
    from collections import deque

    from mpiec.launch.launcher import relay_output

    other = ("--------------------------------------------------------------------------\n"
             "There are not enough slots available in the system to satisfy the 9\n"
             "--------------------------------------------------------------------------\n")
    held: deque[str] = deque()
    relay_output(io.StringIO("[mpiec] step 10\n" + _SPAWN_EXIT + other + "[mpiec] done\n"), quiet=False,
                 held=held)
    shown = capsys.readouterr().out.splitlines()
    assert shown == ["[mpiec] step 10", *other.splitlines(), "[mpiec] done"]
    assert list(held) == [line for line in _SPAWN_EXIT.splitlines() if line]


def test_quiet_holds_everything_back(capsys):
    import io
    from collections import deque

    from mpiec.launch.launcher import relay_output

    held: deque[str] = deque()
    relay_output(io.StringIO("[mpiec] step 10\nTraceback (most recent call last):\n"), quiet=True, held=held)
    assert capsys.readouterr().out == ""
    assert list(held) == ["[mpiec] step 10", "Traceback (most recent call last):"]


def test_a_crashed_quiet_run_still_shows_its_error(tmp_path, monkeypatch, capsys):
    """Issue 12, item 16: under --quiet the crashed rank's traceback was hidden, while the message
    said "its error is above"."""
    _fake_mpiexec(tmp_path, monkeypatch, "echo '[mpiec] step 10'\necho 'Traceback (most recent call last):'\n"
                  "echo 'ValueError: boom'\nexit 0")
    outcome = launch(load_config("tiny"), tmp_path / "out", quiet=True)
    assert outcome.code == 3 and "its error is above" in outcome.message
    assert capsys.readouterr().out.splitlines()[-2:] == ["Traceback (most recent call last):",
                                                         "ValueError: boom"]


def test_a_stop_request_ends_the_whole_job_at_once(tmp_path, monkeypatch):
    """Issue 36, item 1: a rank that asks for the end (the monitor, when a death cut a spawn) gets
    the job ended from outside: mpiexec and everything in its process group, whatever they do
    (here a rank that never ends and an mpiexec that would wait for it), with the request's reason.
    Before, the launcher waited for the time limit."""
    marker = tmp_path / "rank-alive"
    _fake_mpiexec(tmp_path, monkeypatch, f'(trap "" TERM; while :; do touch {marker}; sleep 0.2; done) &\n'
                  'sleep 1\nprintf \'{"reason": "a spawn was cut", "result": ""}\' '
                  '> "$(dirname "$out")/.$stem.h5.stop"\nexec sleep 300')
    out = tmp_path / "out"
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), out, timeout=200, quiet=True)
    assert outcome.code == 1 and outcome.message == "a spawn was cut", outcome.message
    assert "time limit" not in outcome.message
    assert [p.name for p in out.iterdir()] == ["mine.h5"]  # the request and the lock removed
    # the monitor wrote no result (here it never does): the launcher's says lost, why, and by whom
    summary = read_result(out / "mine.h5").summary
    assert summary["lost"] and summary["written_by"] == "launcher"
    assert summary["abort_reason"].startswith("written by the launcher")
    assert "a spawn was cut" in summary["abort_reason"]
    marker.unlink()
    threading.Event().wait(1.0)  # the rank would touch its marker again within 0.2 s
    assert not marker.exists()  # the rank that ignored SIGTERM went with the group


def test_a_stop_request_a_killed_launcher_left_does_not_stop_the_next_run(tmp_path, monkeypatch):
    _fake_mpiexec(tmp_path, monkeypatch, "sleep 1\nexit 0")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".mine.h5.stop").write_text('{"reason": "an old request", "result": ""}')
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), out, timeout=200, quiet=True)
    assert outcome.code == 3 and "old request" not in outcome.message
    assert "the ranks ended without writing a result file" in outcome.message


def test_a_monitor_that_died_while_it_watched_a_spawn_ends_the_job_at_once(tmp_path, monkeypatch):
    """Issue 36, item 1: Open MPI can crash every survivor of a death inside MPI_Comm_spawn, the
    monitor too, and then nobody writes a stop request; its spawn marker names a dead process."""
    _fake_mpiexec(tmp_path, monkeypatch, 'sh -c "exit 0" & dead=$!; wait $dead\n'
                  f'printf \'{{"pid": %d, "host": "{socket.gethostname()}"}}\' "$dead" '
                  '> "$(dirname "$out")/.$stem.h5.spawn"\nexec sleep 300')
    out = tmp_path / "out"
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), out, timeout=200, quiet=True)
    assert outcome.code == 1, outcome.message
    assert "died during a recovery by MPI_Comm_spawn" in outcome.message, outcome.message
    assert [p.name for p in out.iterdir()] == ["mine.h5"]  # written by the launcher, labelled so
    summary = read_result(out / "mine.h5").summary
    assert summary["lost"] and summary["written_by"] == "launcher" and summary["kills_fired"] == 0
    assert "died during a recovery by MPI_Comm_spawn" in summary["abort_reason"]


def test_a_job_that_ended_itself_after_its_monitor_died_in_a_spawn_has_a_result(tmp_path, monkeypatch):
    """Issue 36, item 1 (1 of 10 runs of its command): every survivor, the monitor too, segfaulted
    in ompi_comm_revoke_local inside the spawn and mpiexec exited on its own before the launcher's
    poll saw the marker: exit 3, no result file. Now the marker still tells, and the run is lost."""
    _fake_mpiexec(tmp_path, monkeypatch, 'sh -c "exit 0" & dead=$!; wait $dead\n'
                  f'printf \'{{"pid": %d, "host": "{socket.gethostname()}"}}\' "$dead" '
                  '> "$(dirname "$out")/.$stem.h5.spawn"\nexit 0')
    out = tmp_path / "out"
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), out, timeout=200, quiet=True)
    assert outcome.code == 1, outcome.message
    assert "died during a recovery by MPI_Comm_spawn" in outcome.message, outcome.message
    summary = read_result(out / "mine.h5").summary
    assert summary["lost"] and summary["written_by"] == "launcher"


def test_the_launchers_result_of_a_stopped_run_counts_the_noted_kills(tmp_path, monkeypatch):
    """Issue 36, item 1: a segfault inside a spawn left no result file at all; the launcher's
    minimal one carries the kills the victims noted, so the run reads as lost to those kills."""
    note = '{"step": 10, "at_end": false, "time": 1.5, "rank": 3, "role": "server", "index": 0, ' \
           '"plan": "server:0@step=10+800ms", "seq": 1}'
    _fake_mpiexec(tmp_path, monkeypatch, 'd="$(dirname "$out")/.$stem.0123456789ab.kills"; mkdir "$d"\n'
                  f"printf '%s' '{note}' > \"$d/3.json\"\n"
                  'printf \'{"reason": "cut", "result": ""}\' > "$(dirname "$out")/.$stem.h5.stop"\n'
                  "exec sleep 300")
    out = tmp_path / "out"
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), out, timeout=200, quiet=True)
    assert outcome.code == 1, outcome.message
    result = read_result(out / "mine.h5")
    assert result.summary["kills_fired"] == 1 and result.summary["lost"]
    assert [e["detail"] for e in result.event_list() if e["kind"] == "kill"] == ["server:0@step=10+800ms"]
    assert [p.name for p in out.iterdir()] == ["mine.h5"]  # the notes removed


def test_a_stopped_run_whose_rank_crashed_stays_a_crash(tmp_path, monkeypatch):
    """A rank that died of an exception left a crash note: the launcher writes no lost result."""
    _fake_mpiexec(tmp_path, monkeypatch, 'd="$(dirname "$out")/.$stem.0123456789ab.crash"; mkdir "$d"\n'
                  'printf \'{"rank": 2, "slot": "server:0", "error": "ValueError: x"}\' > "$d/9.json"\n'
                  'printf \'{"reason": "cut", "result": ""}\' > "$(dirname "$out")/.$stem.h5.stop"\n'
                  "exec sleep 300")
    out = tmp_path / "out"
    outcome = launch(load_config("tiny", sets=["output.name='mine'"]), out, timeout=200, quiet=True)
    assert outcome.code == 3 and outcome.path is None, outcome.message
    assert not (out / "mine.h5").exists()


def test_an_mpiexec_that_outlives_its_result_file_is_ended_and_the_run_judged_by_it(tmp_path, monkeypatch):
    """Issue 36, item 1: after a recovery by spawn, PRRTE once stayed up to the time limit after the
    ranks had written the result and ended (exit 3 for a run that succeeded)."""
    target = tmp_path / "out" / "mine.h5"
    _fake_mpiexec(tmp_path, monkeypatch, f"{sys.executable} -c \"import sys; sys.path[:0] = {sys.path!r}; "
                  "from mpiec.results import ResultWriter; from mpiec.launch.resolve import load_config; "
                  "c = load_config('tiny', sets=[\\\"output.name='mine'\\\"]); "
                  f"ResultWriter('{target}', {{'config': c.to_json(), 'strategy': 'none', 'seed': 1, "
                  "'failure_mode': 'ulfm', 'ulfm': True}).close({'lost': False})\"\nexec sleep 300")
    monkeypatch.setattr("mpiec.launch.launcher.LINGER_S", 2.0)
    cfg = load_config("tiny", sets=["output.name='mine'"])
    outcome = launch(cfg, tmp_path / "out", timeout=200, quiet=True)
    assert outcome.code == 0 and outcome.path == target, outcome.message
    assert "did not exit 2 s after the result file was written" in outcome.message


def test_a_run_past_its_time_limit_shows_where_each_rank_was(tmp_path, monkeypatch, capsys):
    """Issue 36 (a replica run hung to its limit twice, never reproduced): at the time limit every
    rank dumps its stacks (mpiexec forwards SIGUSR1; here the fake one writes a rank's dump) and
    the launcher prints them before it reports the limit."""
    _fake_mpiexec(tmp_path, monkeypatch, 'trap \'printf "  File \\"x.py\\", line 1 in waits_here\\n" '
                  '> "$MPIEC_STACKS_DIR/00002-42.txt"; exit 0\' USR1\nwhile :; do sleep 0.1; done')
    cfg = load_config("tiny", sets=["output.name='mine'"])
    outcome = launch(cfg, tmp_path / "out", timeout=2, quiet=True)
    assert outcome.code == 3 and "time limit" in outcome.message, outcome.message
    err = capsys.readouterr().err
    assert "[mpiec] where each rank was at the time limit (1 dumped" in err
    assert "--- rank 2 (pid 42)" in err and "waits_here" in err
