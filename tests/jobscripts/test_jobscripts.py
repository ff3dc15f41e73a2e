"""SLURM job scripts: syntax, shellcheck, CLI surface, and their plumbing.

The scripts are run for real with stub ``mpiec``/``mpirun``/``srun``/``sbatch``
commands on PATH that log their arguments; the stub launcher writes a genuine
result file, and the stub ``mpiec report`` is the real report, so the "valid
result file" check of run.sbatch is exercised end to end. No SLURM, no MPI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobscripts"
SCRIPTS = sorted([*JOBS.glob("*.sbatch"), *JOBS.glob("*.sh")])
ALLOWED_SUBCOMMANDS = {"config", "report", "reproduce"}
ALLOWED_MODULES = {"mpiec.worker"}

STUB_MPIEC = r"""#!/bin/bash
set -euo pipefail
echo "mpiec $*" >>"$STUB_LOG"
case $1 in
  config)
    if [[ " $* " == *" --ranks "* ]]; then echo "${STUB_RANKS:-5}"; exit 0; fi
    while (($#)); do [[ $1 == --write ]] && { echo '{}' >"$2"; exit 0; }; shift; done
    echo "stub: config without --write" >&2; exit 3 ;;
  report) shift; exec "$PYTHON" -m mpiec.analysis.report "$@" ;;
  reproduce) exit 0 ;;
  *) echo "stub mpiec: unknown subcommand $1" >&2; exit 4 ;;
esac
"""

# A launcher stub: logs, writes a real result file into --out (unless told not
# to) and exits with STUB_RC (137 = a rank was SIGKILLed).
STUB_LAUNCHER = r"""#!/bin/bash
set -euo pipefail
if [[ ${1:-} == --version ]]; then echo "${STUB_MPI_VERSION:-mpirun (Open MPI) 5.0.8}"; exit 0; fi
echo "$(basename "$0") $*" >>"$STUB_LOG"
out=""
while (($#)); do [[ $1 == --out ]] && out=$2; shift; done
if [[ ${STUB_WRITE:-1} == 1 ]]; then
  "$PYTHON" - "$out" <<'EOF'
import sys
from pathlib import Path
from mpiec.results import ResultWriter
out = Path(sys.argv[1])  # a result file, or a directory to write <dir name>.h5 into
path = out if out.suffix == ".h5" else out / f"{out.name}.h5"
path.parent.mkdir(parents=True, exist_ok=True)
w = ResultWriter(path, {"config": {}, "strategy": "none", "seed": 1,
                        "failure_mode": "ulfm", "ulfm": True})
w.close({"lost": False})
EOF
fi
exit "${STUB_RC:-0}"
"""

STUB_SBATCH = r"""#!/bin/bash
echo "sbatch $*" >>"$STUB_LOG"
echo "$((RANDOM + 100));cluster"
"""


@pytest.fixture
def stubs(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in [("mpiec", STUB_MPIEC), ("mpirun", STUB_LAUNCHER),
                       ("srun", STUB_LAUNCHER), ("sbatch", STUB_SBATCH)]:
        p = bindir / name
        p.write_text(text)
        p.chmod(0o755)
    log = tmp_path / "log"
    log.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH=f"{bindir}:{env['PATH']}", STUB_LOG=str(log), PYTHON=sys.executable,
               MPIEC_JOBSCRIPTS=str(JOBS), SLURM_SUBMIT_DIR=str(tmp_path))
    for k in ("PRESET", "STRATEGY", "KILL", "SETS", "SEED", "OUT", "RUN_NAME", "CONFIG",
              "STRATEGIES", "SEEDS", "MPIEC_LAUNCH", "MPIEC_FT", "KILL_PLANS_FILE"):
        env.pop(k, None)
    return env, log


def bash(script: str | Path, env: dict, *args: str, **extra: str):
    return subprocess.run(["bash", str(script), *args], env={**env, **extra},
                          capture_output=True, text=True, timeout=120, cwd=env["SLURM_SUBMIT_DIR"])


def logged(log: Path, prefix: str) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith(prefix + " ")]


# -- static checks -------------------------------------------------------------

def test_expected_scripts_exist():
    names = {p.name for p in SCRIPTS}
    assert {"run.sbatch", "sweep.sbatch", "kill.sbatch", "analyze.sbatch",
            "submit_sweep.sh"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_strict_mode_and_header(script):
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "set -euo pipefail" in text
    if script.suffix == ".sbatch":
        assert re.search(r"^#SBATCH --time=", text, re.M)
        assert re.search(r"^#SBATCH --job-name=mpiec-", text, re.M)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_only_known_cli_subcommands(script):
    text = script.read_text()
    used = set()
    for line in text.splitlines():
        code = "" if line.lstrip().startswith("#") else line
        # mpiec used as a command word in code
        for m in re.finditer(r"(?:^\s*|\$\(|\brun\s+|[|;&]\s*)mpiec\s+(\S+)", code):
            if not m.group(1).startswith(('"$', "$")):
                used.add(m.group(1))
        # `mpiec X` quoted in comments / docs
        used.update(re.findall(r"`mpiec (\w+)", line))
    assert used <= ALLOWED_SUBCOMMANDS, used - ALLOWED_SUBCOMMANDS
    modules = set(re.findall(r"-m\s+(mpiec[\w.]*)", text))
    assert modules <= ALLOWED_MODULES, modules - ALLOWED_MODULES
    # array-built subcommands (args=(report ...)) must be allowed ones too
    for m in re.finditer(r"\b\w*args=\((\w+)", text):
        assert m.group(1) in ALLOWED_SUBCOMMANDS | {"report", "config"}


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not installed (apt-get install shellcheck)")
def test_shellcheck():
    r = subprocess.run(["shellcheck", "-S", "warning", *map(str, SCRIPTS)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# -- run.sbatch ----------------------------------------------------------------

def test_run_mpirun_ulfm_and_config_args(stubs, tmp_path):
    env, log = stubs
    out = tmp_path / "res"
    r = bash(JOBS / "run.sbatch", env, PRESET="tiny", STRATEGY="ecrm",
             KILL="server:1@step=30; trainer:0@time=2.5", SETS="layout.spares=1 training.steps=50",
             SEED="7", OUT=str(out), RUN_NAME="r1", STUB_RC="137")
    assert r.returncode == 0, r.stdout + r.stderr
    cfg = out / "r1" / "config.json"
    (config_call,) = [c for c in logged(log, "mpiec") if "--write" in c]
    assert "--preset tiny --strategy ecrm" in config_call
    assert "--kill server:1@step=30 --kill trainer:0@time=2.5" in config_call
    assert "--set layout.spares=1 --set training.steps=50" in config_call
    assert "--set training.seed=7" in config_call and "--set output.name=r1" in config_call
    assert f"--write {cfg}" in config_call
    (ranks_call,) = [c for c in logged(log, "mpiec") if c.endswith(" --ranks")]
    assert ranks_call == config_call.replace(f" --write {cfg}", " --ranks")
    (launch,) = logged(log, "mpirun")
    worker = f"{sys.executable} -m mpiec.worker {cfg} --out {out / 'r1' / 'r1.h5'}"
    assert launch == f"mpirun -n 5 --with-ft ulfm {worker}"
    assert "launcher exited with status 137" in r.stdout  # reported, not fatal
    assert "+ mpirun -n 5" in r.stdout  # prints what it runs
    assert (out / "r1" / "r1.h5").exists()


def committed(root: Path, step: int) -> Path:
    """A complete checkpoint of ``step`` in ``root`` (what a run's store commits)."""
    import numpy as np

    from mpiec.storage.checkpoint import CheckpointStore

    store = CheckpointStore(root)
    store.commit(step, [store.write_part(step, "trainer", {"params": np.ones(3)})])
    return root


def test_run_resumes_from_its_checkpoint_when_requeued(stubs, tmp_path):
    env, log = stubs
    out = tmp_path / "res"
    committed(out / "r2" / "r2.ckpt", 40)
    r = bash(JOBS / "run.sbatch", env, PRESET="tiny", STRATEGY="ckpt", OUT=str(out), RUN_NAME="r2",
             SLURM_RESTART_COUNT="1", KILL="server:1@step=30")
    assert r.returncode == 0, r.stdout + r.stderr
    (launch,) = logged(log, "mpirun")
    restart_cfg = out / "r2" / "config-restart1.json"
    assert launch.endswith(f"{restart_cfg} --out {out / 'r2' / 'r2-restart1.h5'} "
                           f"--resume {out / 'r2' / 'r2.ckpt'}")
    assert "resuming from the newest checkpoint" in r.stdout
    # the resumed attempt drops the first attempt's kills (as `mpiec run --resume` does)
    (config_call,) = [c for c in logged(log, "mpiec") if "--write" in c]
    assert "--kill" not in config_call and f"--write {restart_cfg}" in config_call
    assert "runs without the kill plans (server:1@step=30)" in r.stdout
    # its validity check reads its own result file only
    assert logged(log, "mpiec")[-1] == f"mpiec report {out / 'r2' / 'r2-restart1.h5'} --no-events"
    # a first start (no restart) does not resume, even with a checkpoint there
    bash(JOBS / "run.sbatch", env, PRESET="tiny", STRATEGY="ckpt", OUT=str(out), RUN_NAME="r3")
    assert "--resume" not in logged(log, "mpirun")[-1]
    # a restart without a complete checkpoint starts over, kills included, into its own file
    r = bash(JOBS / "run.sbatch", env, PRESET="tiny", STRATEGY="ckpt", OUT=str(out), RUN_NAME="r4",
             SLURM_RESTART_COUNT="2", KILL="server:1@step=30")
    assert r.returncode == 0 and "no complete checkpoint" in r.stdout
    assert "--resume" not in logged(log, "mpirun")[-1]
    assert logged(log, "mpirun")[-1].endswith(f"--out {out / 'r4' / 'r4-restart2.h5'}")
    assert "--kill server:1@step=30" in [c for c in logged(log, "mpiec") if "--write" in c][-1]


def test_a_requeue_resumes_from_what_a_restart_that_started_over_wrote(stubs, tmp_path):
    """Before: restart 1 found no checkpoint and started over, writing r-restart1.ckpt; restart 2
    looked only in r.ckpt and started from step 0 again."""
    env, log = stubs
    out = tmp_path / "res"
    run_dir = out / "r"
    run_dir.mkdir(parents=True)
    torn = run_dir / "r.ckpt" / "step-000000060"  # a manifest cut by the kill: not complete
    torn.mkdir(parents=True)
    (torn / "MANIFEST.json").write_text("{")
    committed(run_dir / "r-restart1.ckpt", 40)
    r = bash(JOBS / "run.sbatch", env, PRESET="tiny", STRATEGY="ckpt", OUT=str(out), RUN_NAME="r",
             SLURM_RESTART_COUNT="2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert logged(log, "mpirun")[-1].endswith(f"--out {run_dir / 'r-restart2.h5'} "
                                              f"--resume {run_dir / 'r-restart1.ckpt'}")
    # the newest of several: the highest committed step, wherever it is
    committed(run_dir / "r.ckpt", 20)
    committed(run_dir / "r-restart1.ckpt", 80)
    bash(JOBS / "run.sbatch", env, PRESET="tiny", STRATEGY="ckpt", OUT=str(out), RUN_NAME="r",
         SLURM_RESTART_COUNT="3")
    assert logged(log, "mpirun")[-1].endswith(f"--resume {run_dir / 'r-restart1.ckpt'}")


def test_a_requeue_resumes_from_the_strategy_dir_the_run_wrote_into(stubs, tmp_path):
    """Before: a strategy.dir given in SETS was never looked at: the requeue started over."""
    from mpiec.launch.resolve import load_config

    env, log = stubs
    out, elsewhere = tmp_path / "res", tmp_path / "scratch" / "ck"
    run_dir = out / "r"
    run_dir.mkdir(parents=True)
    # the first attempt's config, as `mpiec config ... --write` wrote it (the stub writes '{}')
    cfg = load_config("tiny", strategy="ckpt", sets=[f"strategy.dir='{elsewhere}'", "output.name='r'"])
    (run_dir / "config.json").write_text(cfg.to_json())
    committed(elsewhere, 30)
    r = bash(JOBS / "run.sbatch", env, PRESET="tiny", STRATEGY="ckpt", OUT=str(out), RUN_NAME="r",
             SETS=f"strategy.dir='{elsewhere}'", SLURM_RESTART_COUNT="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert logged(log, "mpirun")[-1].endswith(f"--resume {elsewhere}")
    assert f"resuming from the newest checkpoint in {elsewhere}" in r.stdout


def test_run_fails_without_valid_result(stubs, tmp_path):
    env, log = stubs
    r = bash(JOBS / "run.sbatch", env, OUT=str(tmp_path / "o"), RUN_NAME="x",
             STUB_WRITE="0", STUB_RC="3")
    assert r.returncode == 3
    assert "left no valid result file" in r.stderr
    (tmp_path / "o" / "x" / "x.h5").write_text("junk")
    r = bash(JOBS / "run.sbatch", env, OUT=str(tmp_path / "o"), RUN_NAME="x",
             STUB_WRITE="0", STUB_RC="0")
    assert r.returncode != 0 and "not an HDF5 file" in r.stderr


def test_run_no_ulfm_for_other_mpis(stubs, tmp_path):
    env, log = stubs
    r = bash(JOBS / "run.sbatch", env, OUT=str(tmp_path / "o"), RUN_NAME="m",
             STUB_MPI_VERSION="HYDRA build details:", MPIEC_MPIRUN_ARGS="--bind-to core")
    assert r.returncode == 0, r.stderr
    (launch,) = logged(log, "mpirun")
    assert "--with-ft" not in launch and "-n 5 --bind-to core" in launch
    r = bash(JOBS / "run.sbatch", env, OUT=str(tmp_path / "o"), RUN_NAME="m4",
             STUB_MPI_VERSION="mpirun (Open MPI) 4.1.6")
    assert "--with-ft" not in logged(log, "mpirun")[-1]


def test_run_srun_emulates_failures(stubs, tmp_path):
    env, log = stubs
    r = bash(JOBS / "run.sbatch", env, OUT=str(tmp_path / "o"), RUN_NAME="s",
             MPIEC_LAUNCH="srun", KILL="server:0@step=3")
    assert r.returncode == 0, r.stderr
    (launch,) = logged(log, "srun")
    assert launch.startswith("srun --mpi=pmix -n 5 --kill-on-bad-exit=0 --wait=0 ")
    assert "--set failures.mode=emulated" in logged(log, "mpiec")[0]
    assert "emulated" in r.stdout


def test_run_checks_task_count(stubs, tmp_path):
    env, log = stubs
    r = bash(JOBS / "run.sbatch", env, OUT=str(tmp_path / "o"), SLURM_NTASKS="4",
             STUB_RANKS="6")
    assert r.returncode == 2
    assert "needs 6 ranks but the job has 4 tasks" in r.stderr
    assert not logged(log, "mpirun")


def test_run_rejects_bad_launcher(stubs, tmp_path):
    env, _ = stubs
    r = bash(JOBS / "run.sbatch", env, OUT=str(tmp_path / "o"), MPIEC_LAUNCH="aprun")
    assert r.returncode == 2 and "MPIEC_LAUNCH" in r.stderr


# -- arrays ----------------------------------------------------------------------

@pytest.mark.parametrize("index, strategy, seed", [(3, "ckpt", "2"), (4, "cpr", "1")])
def test_sweep_index_mapping(stubs, tmp_path, index, strategy, seed):
    env, log = stubs
    r = bash(JOBS / "sweep.sbatch", env, STRATEGIES="none ckpt;cpr", SEEDS="1 2",
             SLURM_ARRAY_TASK_ID=str(index), SLURM_ARRAY_JOB_ID="77", SLURM_JOB_ID="78")
    assert r.returncode == 0, r.stderr
    (config_call,) = [c for c in logged(log, "mpiec") if "--write" in c]
    assert f"--strategy {strategy} " in config_call
    assert f"--set training.seed={seed}" in config_call
    run_dir = tmp_path / "results" / "77" / f"sweep-{strategy}-s{seed}"
    assert (run_dir / f"{run_dir.name}.h5").exists()


def test_sweep_index_out_of_range(stubs):
    env, log = stubs
    r = bash(JOBS / "sweep.sbatch", env, STRATEGIES="none ecrm", SEEDS="1",
             SLURM_ARRAY_TASK_ID="2")
    assert r.returncode == 2 and "--array=0-1" in r.stderr
    assert not log.read_text()


def test_kill_plan_mapping(stubs, tmp_path):
    env, log = stubs
    plans = tmp_path / "plans.txt"
    plans.write_text("# comment\nserver:0@step=5\n\n  server:0@step=5; trainer:1@step=9  # two\n")
    r = bash(JOBS / "kill.sbatch", env, STRATEGIES="none ecrm", KILL_PLANS_FILE=str(plans),
             SLURM_ARRAY_TASK_ID="3", OUT=str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    (config_call,) = [c for c in logged(log, "mpiec") if "--write" in c]
    assert "--strategy ecrm " in config_call
    assert "--kill server:0@step=5 --kill trainer:1@step=9" in config_call
    assert (tmp_path / "o" / "kill-ecrm-p1").is_dir()


def test_kill_default_plans_file_is_valid(stubs):
    env, log = stubs
    r = bash(JOBS / "kill.sbatch", env, STRATEGIES="ecrm", SLURM_ARRAY_TASK_ID="99")
    assert r.returncode == 2
    n_plans = int(re.search(r"× (\d+) plans", r.stderr).group(1))
    assert n_plans >= 2


# -- analysis and submission -------------------------------------------------------

def test_analyze_writes_report_and_csv(stubs, tmp_path):
    env, log = stubs
    out = tmp_path / "o"
    assert bash(JOBS / "run.sbatch", env, OUT=str(out), RUN_NAME="a").returncode == 0
    r = bash(JOBS / "analyze.sbatch", env, OUT=str(out), REPORT_ARGS="--no-events")
    assert r.returncode == 0, r.stderr
    assert "samples/s" in (out / "report.txt").read_text()
    assert (out / "summary.csv").read_text().startswith("run,")
    assert logged(log, "mpiec")[-1].startswith(f"mpiec report {out} --csv {out}/summary.csv")


def test_reproduce_passes_its_inputs_to_mpiec_reproduce(stubs, tmp_path):
    env, log = stubs
    r = bash(JOBS / "reproduce.sbatch", env, PAPERS="cpr", SCALE="quick", OUT=str(tmp_path / "r"),
             PAGE="docs/x.md", SLURM_RESTART_COUNT="1")
    assert r.returncode == 0, r.stderr
    expected = f"mpiec reproduce cpr --out {tmp_path / 'r'} --quick --page docs/x.md --reuse"
    assert logged(log, "mpiec")[-1] == expected
    r = bash(JOBS / "reproduce.sbatch", env)
    assert r.returncode == 0, r.stderr
    assert logged(log, "mpiec")[-1] == f"mpiec reproduce all --out {tmp_path}/results/reproduce-local"


@pytest.mark.parametrize("bad", [{"PAPERS": "dlrm"}, {"SCALE": "huge"}])
def test_reproduce_rejects_bad_inputs(stubs, bad):
    env, log = stubs
    r = bash(JOBS / "reproduce.sbatch", env, **bad)
    assert r.returncode == 2 and "expected" in r.stderr
    assert not logged(log, "mpiec")


def test_analyze_fails_on_bad_file(stubs, tmp_path):
    env, _ = stubs
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "junk.h5").write_text("x")
    r = bash(JOBS / "analyze.sbatch", env, OUT=str(tmp_path / "o"))
    assert r.returncode != 0 and "junk.h5" in r.stderr


def test_submit_sweep_chains_jobs(stubs, tmp_path):
    env, log = stubs
    r = bash(JOBS / "submit_sweep.sh", env, str(tmp_path / "study"),
             STRATEGIES="none ecrm", SEEDS="1 2 3")
    assert r.returncode == 0, r.stderr
    calls = logged(log, "sbatch")
    assert len(calls) == 3
    sweep, kill, analyze = calls
    assert "--array=0-5" in sweep and sweep.endswith("sweep.sbatch")
    assert kill.endswith("kill.sbatch")
    ids = re.findall(r"-> job (\d+)", r.stdout)
    assert f"--dependency=afterok:{ids[0]}:{ids[1]}" in analyze
    assert analyze.endswith("analyze.sbatch")


def test_submit_sweep_dry_run_submits_nothing(stubs, tmp_path):
    env, log = stubs
    r = bash(JOBS / "submit_sweep.sh", env, "--dry-run", str(tmp_path / "s"),
             SKIP_KILL="1", ANALYZE_AFTER="afterany")
    assert r.returncode == 0, r.stderr
    assert not logged(log, "sbatch") and not (tmp_path / "s").exists()
    assert "--dependency=afterany:" in r.stdout and "kill.sbatch" not in r.stdout
