"""CLI: bad input is one clear line and exit code 2, before any rank starts."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from mpiec.cli import build_parser, main
from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.params import param


def mpiec_process(*args: str) -> subprocess.CompletedProcess:
    """``python -m mpiec ARGS`` in a process of its own: the entry point itself."""
    return subprocess.run([sys.executable, "-P", "-m", "mpiec", *args], capture_output=True, text=True,
                          timeout=60)


def mpiec(*args: str) -> subprocess.CompletedProcess:
    """``mpiec ARGS`` in this process: ``mpiec.cli.main``, which ``python -m mpiec`` exits with (an
    argparse exit, ``--help`` or a usage error, is its ``SystemExit`` code). A new interpreter per
    call cost ~0.4 s of start-up and imports each, most of this file's time; what the process adds
    (``sys.exit(main())``, an uncaught exception's traceback) is checked by ``mpiec_process``.

    numba is imported first, so ``main`` leaves the kernel modules as they are: its deferral
    (``mpiec.kernels.defer``, lazy modules for the command's own process) would stay in pytest's
    process for the tests after this one, some of which run kernels in threads."""
    import numba  # noqa: F401

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as shown:
        # the filters a new interpreter starts with (pytest's own would hide a warning the command
        # prints on stderr, which the one-line checks count)
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
            warnings.simplefilter("ignore", category)  # in front of "default"
        try:
            code = main(list(args))
        except SystemExit as e:  # as the interpreter exits: an int, None (0), else printed and 1
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            if not isinstance(e.code, int | None):
                print(e.code, file=sys.stderr)
    text = err.getvalue() + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                                    for w in shown)
    return subprocess.CompletedProcess(["mpiec", *args], code, out.getvalue(), text)


@pytest.mark.parametrize("args, needle", [
    (["run", "--preset", "tiny", "--set", "training.stesp=3"], "unknown config key 'training.stesp'"),
    (["run", "--preset", "tiny", "--kill", "server:1@stp=3"], "malformed kill plan 'server:1@stp=3'"),
    (["run", "--preset", "tiny", "--kill", "server:7@step=3"], "server:7 does not exist"),
    (["run", "--preset", "tiny", "--strategy", "magic"], "unknown strategy 'magic'"),
    (["bench", "--preset", "tiny", "--strategies", "none,magic"], "unknown strategy 'magic'"),
    (["report", "/nonexistent/dir"], "/nonexistent/dir"),
    (["run", "--preset", "tiny", "--kill", "random:mtbf=1s,max=-1"], "max must be >= 1"),
    (["run", "--preset", "tiny", "--set", "output.name='../x'"], "output.name must be a file name"),
    (["run", "--preset", "tiny", "--kill", ""], "empty plan"),
    (["run", "--preset", "tiny", "--kill", ";;"], "empty plan"),
    (["run", "--preset", "tiny", "--kill", "trainer:0@time=1e"], "time must be a number of seconds"),
    (["run", "--preset", "tiny", "--kill", "random:mtbf=e"], "is not a duration"),
    (["run", "--preset", "tiny", "--kill", "random:mtbf=5s,seed=-1"], "seed must be a whole number"),
    (["run", "--preset", "tiny", "--kill", "random:mtbf=5s,max=1000000000"], "max must be <= 40"),
    (["run", "--preset", "tiny", "--set", "training.lr=inf"], "training.lr must be a finite number"),
    (["run", "--preset", "tiny", "--set", "layout.trainers=100000"], "at most 4096 ranks"),
    (["run", "--preset", "tiny", "--set", "training.batch_size=1000000000000"], "not enough memory"),
    (["run", "--preset", "tiny", "--set", "output.name=\"a\\u0000b\""], "no control characters"),
    (["run", "--preset", "tiny", "--set", f"output.name='{'n' * 246}'"], "at most 200 bytes"),
    (["run", "--preset", "tiny", "--config", "/"], "config file '/' is a directory"),
    (["run", "--preset", "tiny", "--set", "data.source='criteo-tsv'", "--set", "data.path='/'"],
     "data.path '/' is a directory"),
])
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path):
    proc = mpiec(*args, "--out", str(tmp_path)) if args[0] in ("run", "bench") else mpiec(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.h5"))


@pytest.mark.parametrize("args", [
    ["simulate", "--trace", "{f}"], ["simulate", "--costs", "{f}"],
    ["bench", "--preset", "tiny", "--trace", "{f}"], ["run", "--preset", "tiny", "--hostfile", "{f}"],
])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_input_that_is_not_a_regular_file_is_one_line_exit_2(args, kind, tmp_path):
    # Before: a named pipe hung the command (TimeoutExpired here), /dev/zero ended in a MemoryError.
    f = tmp_path / "pipe"
    if kind == "fifo":
        os.mkfifo(f)
    path = str(f) if kind == "fifo" else "/dev/zero"
    args = [a.replace("{f}", path) for a in args]
    proc = mpiec(*args, *(["--out", str(tmp_path / "out")] if args[0] in ("run", "bench") else []))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"{path} is not a regular file" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


def test_malformed_criteo_line_names_the_line(tmp_path):
    good = "\t".join(["1"] + ["3"] * 13 + ["68fd1e64"] * 26)
    bad = "\t".join(["1"] + ["x"] * 13 + ["68fd1e64"] * 26)
    f = tmp_path / "day.tsv"
    f.write_text("\n".join([good, good, bad, good]) + "\n")
    proc = mpiec("run", "--preset", "tiny", "--set", "data.source='criteo-tsv'", "--set", f"data.path='{f}'",
                 "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"{f}:3" in lines[0], proc.stderr


def test_help_and_config_commands():
    """In processes of their own: ``python -m mpiec`` exits with what ``main`` returns."""
    proc = mpiec_process("run", "--help")
    assert proc.returncode == 0 and "--kill" in proc.stdout and "server:2@step=300" in proc.stdout
    proc = mpiec_process("config", "--preset", "tiny", "--ranks")
    assert proc.returncode == 0 and proc.stdout.strip() == "5"
    proc = mpiec_process("strategies")
    assert proc.returncode == 0 and proc.stdout.startswith("none")


@pytest.mark.parametrize("args, needle", [
    (["run", "--preset", "tiny", "--set", "training.stesp=3"], "unknown config key 'training.stesp'"),
    (["run", "--preset", "tiny", "--timeout", "0"], "must be a number of seconds > 0"),
])
def test_bad_input_in_a_process_of_its_own_is_exit_2_without_a_traceback(args, needle, tmp_path):
    """The process's exit status and stderr, for a config error (``main``'s) and a usage error
    (argparse's); the other bad-input tests call ``main`` in this process."""
    proc = mpiec_process(*args, "--out", str(tmp_path))
    assert proc.returncode == 2 and needle in proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and not list(tmp_path.glob("*.h5"))


def test_too_small_criteo_file_is_caught_before_ranks_start(tmp_path):
    good = "\t".join(["1"] + ["3"] * 13 + ["68fd1e64"] * 26)
    f = tmp_path / "small.tsv"
    f.write_text("\n".join([good] * 300) + "\n")  # 30 held-out samples; tiny wants 2000
    proc = mpiec("run", "--preset", "tiny", "--set", "data.source='criteo-tsv'", "--set", f"data.path='{f}'",
                 "--out", str(tmp_path))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
    assert "data.eval_samples = 2000" in lines[0] and "only 30 held-out samples" in lines[0]


def test_unwritable_output_is_one_line(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    proc = mpiec("run", "--preset", "tiny", "--out", str(blocker / "sub"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(blocker) in lines[0]


@pytest.mark.parametrize("value", ["-1", "0", "inf", "nan", "1e10", "x"])
def test_timeout_must_be_positive(value):
    proc = mpiec("run", "--preset", "tiny", "--timeout", value)
    assert proc.returncode == 2 and "must be a number of seconds > 0 and <= 1e9" in proc.stderr


@pytest.mark.parametrize("where", ["/proc/self", "/sys/kernel"])
def test_unwritable_output_found_before_any_rank_starts(where):
    proc = mpiec("run", "--preset", "tiny", "--out", where)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"cannot write into the output directory {where}" in lines[0]
    assert "launching" not in proc.stdout


def test_config_write_never_overwrites_a_result_or_its_input(tmp_path):
    import h5py

    result = tmp_path / "old.json"  # an HDF5 file under another name
    with h5py.File(result, "w") as f:
        f.attrs["x"] = 1
    before = result.read_bytes()
    for target, needle in [(tmp_path / "new.h5", ".h5 names are for result files"),
                           (result, "existing HDF5 (result) file")]:
        proc = mpiec("config", "--preset", "tiny", "--write", str(target))
        assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert result.read_bytes() == before and not (tmp_path / "new.h5").exists()
    cfg = tmp_path / "run.json"
    assert mpiec("config", "--preset", "tiny", "--write", str(cfg)).returncode == 0
    proc = mpiec("config", "--config", str(cfg), "--set", "training.steps=3", "--write", str(cfg))
    assert proc.returncode == 2 and "is an input of this command" in proc.stderr
    assert mpiec("config", "--preset", "tiny", "--write", str(cfg)).returncode == 0  # a config: rewritten


def test_report_csv_never_overwrites_an_input(tmp_path):
    proc = mpiec("report", str(tmp_path), "--csv", str(tmp_path / "b.h5"))
    assert proc.returncode == 2 and ".h5 names are for result files" in proc.stderr, proc.stderr
    assert not (tmp_path / "b.h5").exists()


def test_every_command_has_a_description_and_run_help_says_what_matters():
    for command in ("run", "bench", "config", "strategies"):
        proc = mpiec(command, "--help")
        head = proc.stdout.split("options:")[0]
        assert proc.returncode == 0 and len(head.split("\n\n", 1)[-1].strip()) > 40, (command, proc.stdout)
    text = mpiec("run", "--help").stdout
    for needle in ["exit codes:", "0  the run completed", "1  the run was lost", "2  bad input",
                   "3  a crash, the time limit, or an interruption", "180 s + 2 s x training.steps",
                   "separate plans with ';'", "seed=N", "targets=", "max=N", '"results"',
                   "units: ms, s, m, min, h"]:
        assert needle in text, needle


def test_cluster_preset_resolves_here_and_is_refused_only_at_run_time(tmp_path):
    """mlperf-dlrmv2 does not fit a workstation: config prints it, run refuses it before any rank."""
    import json

    proc = mpiec("config", "--preset", "mlperf-dlrmv2")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert sum(cfg["data"]["multi_hot"]) == 214 and cfg["model"]["dim"] == 128
    ranks = mpiec("config", "--preset", "mlperf-dlrmv2", "--ranks")
    assert ranks.returncode == 0 and ranks.stdout.strip() == "17"
    from mpiec.config import mem_total, memory_estimate
    from mpiec.launch.resolve import load_config

    need = sum(b for _, b in memory_estimate(load_config("mlperf-dlrmv2", memory=False))["server"])
    if (mem_total() or 0) < need:
        run = mpiec("run", "--preset", "mlperf-dlrmv2", "--out", str(tmp_path))
        assert run.returncode == 2 and "not enough memory" in run.stderr, run.stderr
        assert not list(tmp_path.glob("*.h5"))


def test_resume_from_an_older_checkpoint_is_refused_with_the_way_out(tmp_path):
    import numpy as np

    from mpiec.launch.resolve import load_config
    from mpiec.storage.checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path / "ck")
    meta = {"config": load_config(preset="tiny", sets=["strategy.name='ckpt'"]).to_dict()}
    for step in (9, 19):
        store.commit(step, [store.write_part(step, "trainer", {"params": np.zeros(3, np.float32)})], meta)
    r = mpiec("run", "--resume", str(store.step_dir(9)))
    assert r.returncode == 2 and "holds a newer checkpoint (step 19)" in r.stderr
    assert "Traceback" not in r.stderr


# -- issue 12: --resume refuses what its checkpoint cannot continue into, before any rank starts ------

def _tiny_checkpoint(tmp_path, step: int = 29):
    import numpy as np

    from mpiec.launch.resolve import load_config
    from mpiec.storage.checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path / "run.ckpt")
    cfg = load_config(preset="tiny", strategy="ckpt")
    store.commit(step, [store.write_part(step, "trainer", {"params": np.zeros(3, np.float32)})],
                 {"config": cfg.to_dict(), "servers": 2})
    return store.root


def _no_launch(tmp_path, monkeypatch) -> None:
    """An mpiexec (``$MPIEC_MPIEXEC``, read when a run launches) that leaves a mark if anything gets
    as far as starting ranks."""
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && exit 0\ntouch {tmp_path / 'launched'}\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEC_MPIEXEC", str(fake))


@pytest.mark.parametrize("args, needle", [
    (["--set", "model.dim=16"], "holds another model: model.dim: 8 in the checkpoint, 16 now"),
    (["--set", "data.cardinalities=[10, 10]"], "data.cardinalities: 26 values in the checkpoint, 2 now"),
    (["--set", "training.steps=20"], "the checkpoint is of step 29, so training.steps = 20 leaves no step"),
    (["--preset", "laptop"], "the checkpoint's run used preset 'tiny', not 'laptop'; leave --preset out"),
    (["--kill", "server:1@step=10"], "kill server:1@step=10 is planned before step 30"),
])
def test_resume_conflicts_are_one_line_exit_2(tmp_path, args, needle, monkeypatch):
    """Issue 12, items 8, 9, 10, 17: each ran (rc 3 with five lines naming no cause, 0 steps and nan
    throughput, another preset's label, a kill that never fired)."""
    root = _tiny_checkpoint(tmp_path)
    _no_launch(tmp_path, monkeypatch)
    proc = mpiec("run", "--resume", str(root), *args, "--out", str(tmp_path / "out"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stdout + proc.stderr
    assert not (tmp_path / "launched").exists() and not (tmp_path / "out").exists()


def test_resume_keeps_the_checkpoints_config_and_preset_under_a_config_file(tmp_path):
    """--config FILE on --resume is a layer over the checkpoint's config (it replaced it before), and
    the preset it names (or --preset, if the same) labels the run as the checkpoint's."""
    import argparse

    from mpiec.cli import resume_config

    root = _tiny_checkpoint(tmp_path)
    f = tmp_path / "more.toml"
    f.write_text("[training]\nsteps = 60\n")
    args = argparse.Namespace(resume=str(root), preset="tiny", config=str(f), sets=["layout.servers=3"],
                              strategy=None, kill=[], steps=None)
    cfg, resume = resume_config(args)
    assert resume == str(root) and cfg.preset == "tiny" and cfg.model.dim == 8
    assert cfg.training.steps == 60 and cfg.layout.servers == 3 and cfg.strategy.name == "ckpt"


def _strategies_output(capsys, *argv: str) -> dict[str, list[str]]:
    """``mpiec strategies ARGV`` in this process: each listed strategy's key lines, by name."""
    args = build_parser().parse_args(["strategies", *argv])
    assert args.func(args) == 0
    blocks: dict[str, list[str]] = {}
    for line in capsys.readouterr().out.splitlines():
        if line and not line[0].isspace():
            blocks[line.split()[0]] = []
            current = blocks[line.split()[0]]
        elif line.strip():
            current.append(line.strip())
    return blocks


def test_strategies_keys_lists_every_strategys_keys(capsys):
    from mpiec.strategies import STRATEGIES

    plain = _strategies_output(capsys)
    assert list(plain) == list(STRATEGIES) and not any(plain.values())  # one line each, no keys
    listed = _strategies_output(capsys, "--keys")
    assert list(listed) == list(STRATEGIES)
    assert listed["none"] == ["(no keys of its own)"]
    ckpt = {line.split()[0]: line for line in listed["ckpt"]}
    assert "interval" in ckpt and set(ckpt) == STRATEGIES["ckpt"].param_keys()
    for name, lines in listed.items():
        if STRATEGIES[name].param_keys():
            assert all(line.split()[0] in STRATEGIES[name].param_keys() for line in lines), name


@dataclass(frozen=True)
class _ReplicaParams:  # module level: the type hints resolve in this module's namespace
    interval: int | Literal["auto"] = param("auto", "steps between copies", ge=1)
    mode: Literal["sync", "async"] = param("sync", "who waits")
    verify: bool = param(False, "")


class _Replica(Strategy):
    name = "replica"
    description = "a copy of every row on the next server"
    Params = _ReplicaParams


class _PlugInRegistry(dict):
    problems = ["plug-in 'none' of package evil ignored: the name is taken by the built-in strategy"]

    def origin(self, name: str) -> str:
        return "plug-in (mpiec-replica)"


def test_strategies_keys_show_typed_params_plug_ins_and_problems(capsys, monkeypatch):
    import mpiec.strategies

    monkeypatch.setattr(mpiec.strategies, "STRATEGIES", _PlugInRegistry(replica=_Replica))
    assert _strategies_output(capsys, "--keys")["replica"] == [
        "interval  int|auto = auto (>= 1)  steps between copies",
        "mode      sync|async = sync       who waits",
        "verify    bool = false            (no help yet)",
    ]
    args = build_parser().parse_args(["strategies"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("replica") and lines[0].endswith(" [plug-in (mpiec-replica)]")
    assert lines[-2:] == ["left out:", "  " + _PlugInRegistry.problems[0]]


@pytest.mark.parametrize("argv", [
    [],
    ["--preset", "tiny", "--strategies", "none,ckpt:interval=5", "--kill", "server:1@step=5", "--repeat", "3",
     "--set", "layout.servers=3", "--steps", "20", "--timeout", "30", "--no-report", "--quiet", "--out", "x"],
])
def test_bench_parser_is_the_bench_command(argv):
    """``mpiec.reproduce`` parses its benches with ``cli_args.bench_parser``: the command's options,
    defaults and checks, without importing ``mpiec.cli``."""
    from mpiec.cli_args import bench_parser

    command = vars(build_parser().parse_args(["bench", *argv]))
    assert command.pop("func") is not None
    assert vars(bench_parser().parse_args(argv)) == command


def test_bench_parser_checks_like_the_command(capsys):
    from mpiec.cli_args import bench_parser

    for parse in (lambda a: build_parser().parse_args(["bench", *a]), bench_parser().parse_args):
        with pytest.raises(SystemExit) as exc:
            parse(["--timeout", "0"])
        assert exc.value.code == 2 and "must be a number of seconds > 0" in capsys.readouterr().err


#: the pages whose fenced blocks hold the documented commands: the README's tour and the reference
DOCUMENTED = ("README.md", "docs/running.md", "docs/bench.md")


def documented_commands() -> list[str]:
    """Every ``mpiec COMMAND ...`` of the pages' fenced blocks, with continuation lines joined and
    the trailing ``# comment`` dropped (``pip install -e . && mpiec bench`` counts from ``mpiec``)."""
    root = Path(__file__).resolve().parents[1]
    out = []
    for page in DOCUMENTED:
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", (root / page).read_text(), re.S | re.M):
            joined = re.sub(r"\\\s*(#[^\n]*)?\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.split(" #", 1)[0].strip()
                if ("mpiec " in line and not line.startswith(("pip ", "python "))) or "&& mpiec " in line:
                    out.append(line[line.index("mpiec "):])
    return out


def test_documented_commands_are_found():
    cmds = documented_commands()
    assert any(c.startswith("mpiec bench --repeat 5") for c in cmds)  # the README's main command
    assert {c.split()[1] for c in cmds} >= {"run", "bench", "config", "report", "simulate", "reproduce"}


@pytest.mark.parametrize("command", documented_commands())
def test_every_documented_command_parses(command):
    """A command the README or a reference page shows is one its command's parser accepts
    (``report``, ``simulate`` and ``reproduce`` have parsers of their own; ``kernels`` takes none)."""
    argv = shlex.split(command)[1:]
    own = {"report": "mpiec.analysis.report", "simulate": "mpiec.simulate.cli",
           "reproduce": "mpiec.reproduce.cli"}
    if argv[0] == "kernels":
        assert argv == ["kernels"]
        return
    try:
        if argv[0] in own:
            importlib.import_module(own[argv[0]]).build_parser().parse_args(argv[1:])
        else:
            build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{command!r} does not parse (exit {e.code})")
