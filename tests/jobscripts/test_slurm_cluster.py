"""The job scripts on a real single-node SLURM: sweep and kill arrays, the chained analysis, requeue.

Installs Debian's slurm-wlm and munge when missing (as root, with apt-get; skips saying why
otherwise), starts a throw-away cluster on this machine (``slurm_cluster.py``), submits the
scripts exactly as a user would (``submit_sweep.sh``, ``sbatch --requeue run.sbatch``) and
checks what they leave: the result files (read with ``read_result``), the report of the
analysis job, the job states SLURM records. Every job runs the tiny preset for a few seconds;
the node runs one job at a time. Set ``MPIEC_SLURM_KEEP=1`` to keep the scratch directory
(logs, results, slurm.conf) for a look after a failure.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from slurm_cluster import ClusterError, SlurmCluster, SlurmUnavailable, ensure_installed

from mpiec.errors import ResultFileError
from mpiec.results import read_result


def on_cluster(test):
    """The tests that submit jobs: they launch mpirun, kill ranks, and are bounded."""
    return pytest.mark.mpirun(pytest.mark.kill(pytest.mark.timeout(600)(test)))

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobscripts"
STEPS = 300  # long enough for a requeue to land mid-run, short enough for CI (3-5 s of training)
SETS = f"layout.spares=1 training.steps={STEPS}"
KILL_PLAN = "server:1@step=20"
JOB_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("a SLURM node (slurmd) has to be started as root; run this test as root")
    try:
        ensure_installed()
    except SlurmUnavailable as exc:
        pytest.skip(f"no SLURM here: {exc}")
    scratch = Path(tempfile.mkdtemp(prefix="mpiec-slurm-"))
    c = SlurmCluster(scratch)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        if os.environ.get("MPIEC_SLURM_KEEP") == "1":
            print(f"kept the SLURM scratch directory {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def job_env(c: SlurmCluster, **extra: str) -> dict[str, str]:
    """What a user's shell would hold at submission: this Python's mpiec and mpirun first on
    PATH, root allowed to run mpirun, the scripts' inputs. ``--bind-to none``: the node declares
    8 CPUs on fewer cores, and Open MPI refuses to bind 6 ranks to cores it does not have."""
    env = c.env()
    for k in ("PRESET", "STRATEGY", "STRATEGIES", "KILL", "SETS", "SEED", "SEEDS", "OUT", "RUN_NAME",
              "CONFIG", "MPIEC_LAUNCH", "MPIEC_FT", "KILL_PLANS_FILE", "MPIEC_JOBSCRIPTS"):
        env.pop(k, None)
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHON=sys.executable, MPIEC_MPIRUN_ARGS="--bind-to none",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **extra)
    return env


def job_logs(c: SlurmCluster) -> str:
    parts = []
    for f in sorted(c.dir.glob("*.out")):
        parts.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-40:]))
    return "\n".join(parts)


def assert_completed(c: SlurmCluster, records: list[dict[str, str]]) -> None:
    for rec in records:
        assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", \
            f"job {rec['JobId']} ({rec['JobName']}): {rec['JobState']} exit {rec['ExitCode']}\n{job_logs(c)}"


@pytest.fixture(scope="module")
def study(cluster):
    """submit_sweep.sh: a sweep array (none, ckpt; seed 1), a kill array (the same strategies
    under one server kill, one spare) and the analysis chained with --dependency=afterok."""
    c = cluster
    plans = c.dir / "plans.txt"
    plans.write_text(f"# one experiment\n{KILL_PLAN}\n")
    out = c.dir / "study"
    env = job_env(c, PRESET="tiny", STRATEGIES="none ckpt", SEEDS="1", SETS=SETS,
                  KILL_PLANS_FILE=str(plans))
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(JOBS / "submit_sweep.sh"), str(out)], env=env, cwd=c.dir,
                       capture_output=True, text=True, timeout=120)
    ids = re.findall(r"-> job (\d+)", r.stdout)
    c.track(ids)
    assert r.returncode == 0 and len(ids) == 3, r.stdout + r.stderr
    sweep, kill, analyze = ids
    assert f"--dependency=afterok:{sweep}:{kill}" in r.stdout
    records = c.wait(ids, JOB_TIMEOUT, n_expected={sweep: 2, kill: 2})
    print(f"study: 4 runs and the analysis in {time.monotonic() - t0:.1f} s")
    return out, records, ids


def result(run_dir: Path):
    return read_result(run_dir / f"{run_dir.name}.h5")


@on_cluster
def test_study_runs_complete_with_the_failure_free_checksum(cluster, study):
    out, records, (sweep, kill, analyze) = study
    assert_completed(cluster, records[sweep] + records[kill])
    assert sorted(r["ArrayTaskId"] for r in records[sweep]) == ["0", "1"]
    ref = {}
    for strategy in ("none", "ckpt"):
        res = result(out / f"sweep-{strategy}-s1")
        assert res.complete and not res.summary["lost"] and res.summary["kills_fired"] == 0
        assert res.summary["steps_completed"] == STEPS
        ref[strategy] = res.summary["param_checksum"]
    assert ref["none"] == ref["ckpt"]  # the same training, whatever the strategy

    killed = result(out / "kill-ckpt-p0")
    assert killed.attrs["failure_mode"] == "ulfm" and killed.attrs["ulfm"]  # a real SIGKILL
    assert killed.summary["kills_fired"] == 1 and killed.summary["recoveries"] == 1
    assert killed.complete and not killed.summary["lost"]
    assert killed.summary["param_checksum"] == ref["ckpt"]  # ckpt is lossless
    assert killed.config["failures"]["kill"] == [KILL_PLAN]

    lost = result(out / "kill-none-p0")  # 'none' loses the job: an outcome, and the job succeeds
    assert lost.summary["kills_fired"] == 1 and lost.summary["lost"]


@on_cluster
def test_analysis_runs_after_the_arrays_and_reports_every_run(cluster, study):
    out, records, (sweep, kill, analyze) = study
    (rec,) = records[analyze]
    assert rec["Dependency"] in ("(null)", "") or "afterok" in rec["Dependency"]
    assert_completed(cluster, [rec])
    last_end = max(r["EndTime"] for r in records[sweep] + records[kill])
    assert rec["StartTime"] >= last_end  # ISO timestamps: string order is time order
    report = (out / "report.txt").read_text()
    names = ["sweep-none-s1", "sweep-ckpt-s1", "kill-none-p0", "kill-ckpt-p0"]
    for name in names:
        assert name in report, report
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert sorted(r["run"] for r in rows) == sorted(names)
    by_run = {r["run"]: r for r in rows}  # the report says what the result files say
    assert by_run["kill-none-p0"]["lost"] == "True" and by_run["kill-ckpt-p0"]["lost"] == "False"
    assert by_run["kill-ckpt-p0"]["param_checksum"] == by_run["sweep-ckpt-s1"]["param_checksum"] \
        == result(out / "sweep-ckpt-s1").summary["param_checksum"]
    if importlib.util.find_spec("matplotlib") is not None:  # analyze.sbatch plots only with it
        assert list((out / "plots").glob("*.png")), job_logs(cluster)
        helptext = subprocess.run([sys.executable, "-m", "mpiec", "report", "--help"],
                                  capture_output=True, text=True, timeout=60).stdout
        if "--html" in helptext:
            assert (out / "report.html").stat().st_size > 0, job_logs(cluster)


@on_cluster
def test_requeued_run_resumes_from_its_last_checkpoint(cluster, study):
    c = cluster
    out = c.dir / "requeue"
    run_dir = out / "rq"
    env = job_env(c, PRESET="tiny", STRATEGY="ckpt", SETS=f"{SETS} strategy.interval=20",
                  OUT=str(out), RUN_NAME="rq")
    job = c.sbatch("--requeue", "--open-mode=append", f"--output={c.dir}/requeue-%j.out",
                   str(JOBS / "run.sbatch"), env=env, cwd=c.dir)
    deadline = time.monotonic() + JOB_TIMEOUT
    while not list(run_dir.glob("rq.ckpt/step-*/MANIFEST.json")):
        state = c.records(job)[0]["JobState"]
        if state not in ("PENDING", "RUNNING") or time.monotonic() > deadline:
            raise ClusterError(f"no checkpoint before the requeue (job {state})\n{job_logs(c)}")
        time.sleep(0.1)
    first = sorted(run_dir.glob("rq.ckpt/step-*/MANIFEST.json"))[0].parent.name
    c.scontrol("requeue", job)
    (rec,) = c.wait([job], JOB_TIMEOUT)[job]
    # the first attempt really was cut short (SLURM also requeues a job that has just ended)
    if (run_dir / "rq.h5").exists():
        with contextlib.suppress(ResultFileError):
            assert not read_result(run_dir / "rq.h5").complete, "the run ended before the requeue"
    log = (c.dir / f"requeue-{job}.out").read_text()
    assert_completed(c, [rec])
    assert rec["Restarts"] == "1", rec
    assert "requeued (restart 1): resuming from the newest checkpoint" in log, log
    res = read_result(run_dir / "rq-restart1.h5")
    resumed = res.summary["resumed_from_step"]
    assert res.complete and res.summary["steps_completed"] == STEPS - (resumed + 1)
    assert resumed > 0 and resumed >= int(first.split("-")[1]), (resumed, first)
    assert resumed < STEPS - 1  # the requeue really interrupted the run
    # lossless: the resumed run ends where the uninterrupted one did
    ref = result(study[0] / "sweep-ckpt-s1").summary["param_checksum"]
    assert res.summary["param_checksum"] == ref


def test_install_refused_without_root_says_why(monkeypatch):
    import slurm_cluster

    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda name: None)
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 1000)
    with pytest.raises(SlurmUnavailable, match=r"slurmctld.*missing.*needs root"):
        ensure_installed()
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 0)
    with pytest.raises(SlurmUnavailable, match="no apt-get"):
        ensure_installed()

