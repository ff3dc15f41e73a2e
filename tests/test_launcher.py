"""Launcher, before and after the ranks: result names owned by one run, writable outputs, messages."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from mpiec.config import load_config
from mpiec.errors import MpiecError
from mpiec.launcher import (
    _written_by_us,
    check_output_dir,
    claim_result_path,
    fmt_seconds,
    launch,
    no_result_message,
)


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


def test_a_file_someone_else_put_at_the_target_is_not_reported(tmp_path, monkeypatch):
    """A writer that ignores the lock (a hand-started worker): its file is not this run's."""
    target = tmp_path / "out" / "mine.h5"
    other = load_config("tiny", sets=["training.seed=7"])
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"
                    f"{sys.executable} -c \"import sys; sys.path[:0] = {sys.path!r}; "
                    "from mpiec.results import ResultWriter; from mpiec.config import load_config; "
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
    assert outcome.code == 3 and "time limit of 0.001 s" in outcome.message
    assert outcome.seconds < 20


def test_a_run_on_one_host_leaves_out_the_ofi_btl_and_a_multi_node_job_keeps_it(tmp_path, monkeypatch):
    from mpiec.launcher import mpi_flavour, mpiexec_command, multi_node_allocation

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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "False"


def test_open_mpi_noise_after_a_peer_dies_is_not_relayed(capsys):
    import io

    from mpiec.launcher import relay_output

    text = ("[mpiec] step 10\n"
            "NBC_Progress: an error 75 was found during schedule 0x55 at row-offset 0 - aborting\n"
            "[warn] Epoll MOD(1) on fd 32 failed. Old events were 6; read change was 0 (none); write change "
            "was 2 (del); close change was 0 (none): Bad file descriptor\n"
            "[warn] something else\n")
    relay_output(io.StringIO(text), quiet=False)
    assert capsys.readouterr().out.splitlines() == ["[mpiec] step 10", "[warn] something else"]
