"""mpiec bench's inputs, refused or bounded before the first run: storage figures no checkpoint fits,
silly --repeat, path-valued strategy keys in run names, spares for kills that are never planned,
and Ctrl-C during the warm-up (issue 36, items 3, 11, 15, 16). No MPI: ``launch`` is replaced."""

from __future__ import annotations

import pytest

from mpiec.cli_args import bench_parser
from mpiec.errors import ConfigError, MpiecError
from mpiec.launch import launcher
from mpiec.launch.bench import Bench, run_label
from mpiec.launch.launcher import EXIT_CRASH, RunOutcome, default_timeout
from mpiec.launch.resolve import check_storage_time, load_config


def bench(tmp_path, *argv: str) -> Bench:
    return Bench(bench_parser().parse_args(["--preset", "tiny", "--out", str(tmp_path / "out"), *argv]))


@pytest.fixture
def launches(monkeypatch):
    """Every launch of the bench, recorded (config, output dir, quiet); none starts a rank."""
    monkeypatch.setenv("OMPI_MCA_hwloc_base_binding_policy", "none")  # bind() leaves it
    calls: list[tuple] = []

    def fake(cfg, out, timeout=None, quiet=False, unique_name=None, **kw):
        calls.append((cfg, out, quiet))
        return RunOutcome(0, None, 0.0)

    monkeypatch.setattr(launcher, "launch", fake)
    return calls


# -- item 3: figures that cannot finish ----------------------------------------------------------

@pytest.mark.parametrize("key, needle", [
    ("write_mb_s", "writing one server's shard"),
    ("read_mb_s", "restoring one server's shard"),
    ("aggregate_mb_s", "writing the 2 servers' shards through the job's shared budget"),
])
def test_storage_no_checkpoint_fits_is_refused_before_any_run(key, needle, tmp_path, launches):
    # Before: storage.write_mb_s = 1e-12 ran until the time limit.
    with pytest.raises(ConfigError, match=rf"^storage\.{key}: at 1e-12 MB/s, {needle} .* no "):
        bench(tmp_path, "--strategies", "ckpt", "--set", f"storage.{key}=1e-12")
    assert not launches and not (tmp_path / "out").exists()
    cfg = load_config("tiny", strategy="ckpt", sets=[f"storage.{key}=1e-12"])
    with pytest.raises(ConfigError, match=needle):
        check_storage_time(cfg, 260.0)


def test_storage_figures_that_fit_or_a_strategy_without_checkpoints_pass():
    check_storage_time(load_config("tiny", strategy="ckpt", sets=["storage.write_mb_s=1"]), 260.0)
    check_storage_time(load_config("tiny", strategy="none", sets=["storage.write_mb_s=1e-12"]), 260.0)
    # the profile's figures against a limit no checkpoint fits: the profile is named
    cfg = load_config("tiny", strategy="ckpt", sets=["storage.profile='object-store'"])
    with pytest.raises(ConfigError, match="^storage.profile 'object-store': at 80 MB/s"):
        check_storage_time(cfg, 1e-6)


def test_the_derived_time_limit_is_at_most_a_day():
    # Before: 180 s + 2 s x 1e9 steps, a 63-year limit.
    assert default_timeout(load_config("tiny", steps=10**9)) == 86400.0
    assert default_timeout(load_config("tiny")) == 180.0 + 2.0 * 40


def test_silly_repeats_are_refused(tmp_path, launches):
    for n in ("0", "1000"):
        with pytest.raises(MpiecError, match=rf"--repeat must be in \[1, 100\], got {n}"):
            bench(tmp_path, "--strategies", "none", "--repeat", n)
    assert not launches


def test_the_bench_says_how_long_it_may_take_before_it_starts(tmp_path, launches, capsys):
    b = bench(tmp_path, "--strategies", "none", "--repeat", "3", "--timeout", "30", "--scenario", "none",
              "--no-report")
    b.run()
    out = capsys.readouterr().out
    before = out.split("warm-up run")[0]  # printed before the first launch
    assert "duration: at most 2m00s (3 runs + the warm-up, each within its time limit of 30s" in before
    assert len(launches) == 4


# -- item 11: path-valued strategy keys in run names ------------------------------------------------

@pytest.mark.parametrize("value", ["/some/dir", "/../outside", "a b\tc", "é/" * 200])
def test_run_names_are_plain_file_names_whatever_the_variant_holds(value, tmp_path):
    label = run_label(f"ckpt:dir={value}")
    assert "/" not in label and "\\" not in label and label.isprintable() and " " not in label
    assert not label.startswith(".") and len(label.encode()) <= 120
    assert run_label("ckpt:dir=/a/b") != run_label("ckpt:dir=/a_b")  # never one name for two variants
    assert run_label("ckpt:interval=10") == "ckpt-interval10"  # plain variants keep their names


def test_a_pinned_checkpoint_directory_is_refused_before_the_first_run(tmp_path, launches):
    # Before: the run name held the path's slashes, and the second run failed ("cannot write into
    # the output directory"); with a plain name, a second run into the same strategy.dir would be
    # refused at its launch (it holds the first run's checkpoints).
    b = bench(tmp_path, "--strategies", "ckpt", "--set", f"strategy.dir='{tmp_path}/../ck'")
    with pytest.raises(MpiecError, match=r"^ckpt: its 2 runs in this bench would all write their"):
        b.run()
    assert not launches


def test_a_variant_that_runs_once_may_pin_its_directory_and_its_file_stays_in_out(tmp_path, launches):
    b = bench(tmp_path, "--strategies", "ckpt", "--no-failure-free", "--scenario", "trainer",
              "--set", f"strategy.dir='{tmp_path}/../ck'", "--no-report")
    b.run()
    (cfg, out, _), = launches
    assert "/" not in cfg.output.name and out == tmp_path / "out"
    assert cfg.strategy.params["dir"] == f"{tmp_path}/../ck"


# -- item 15: spares for the kills planned ------------------------------------------------------

def test_a_bench_without_failure_runs_gets_no_spares(tmp_path, launches):
    # Before: --scenario none gave every run 3 idle spare ranks.
    bench(tmp_path, "--strategies", "none,ckpt", "--scenario", "none", "--no-report").run()
    assert len(launches) == 2 and all(cfg.layout.spares == 0 for cfg, _, _ in launches)
    launches.clear()
    bench(tmp_path / "b", "--strategies", "ckpt", "--scenario", "two-servers", "--no-report").run()
    assert launches and all(cfg.layout.spares == 2 for cfg, _, _ in launches)


# -- item 16: Ctrl-C during the warm-up ---------------------------------------------------------

def test_ctrl_c_in_the_warm_up_stops_the_bench_non_zero(tmp_path, monkeypatch, capsys):
    # Before: the warm-up's "interrupted" was printed and the bench went on, exit 0.
    monkeypatch.setenv("OMPI_MCA_hwloc_base_binding_policy", "none")
    calls = []

    def interrupted(cfg, out, timeout=None, quiet=False, unique_name=None, **kw):
        calls.append(cfg)
        return RunOutcome(EXIT_CRASH, None, 0.0, "interrupted")

    monkeypatch.setattr(launcher, "launch", interrupted)
    code = bench(tmp_path, "--strategies", "none", "--repeat", "2", "--no-report").run()
    assert code != 0 and len(calls) == 1
    assert "interrupted during the warm-up" in capsys.readouterr().out
    assert not (tmp_path / "out" / "bench.json").exists()
