"""``mpiec simulate --corruption``: the chance that a job's final model keeps a silently corrupted
embedding row, from the published prevalence and an assumed band, per strategy declaration."""

from __future__ import annotations

import math

import pytest

from mpiec.errors import MpiecError
from mpiec.simulate.cli import main
from mpiec.simulate.corruption import PER_DEFECTIVE_H, PREVALENCE, corruption_row, parse_band
from mpiec.strategies.api.cover import CorruptionCover

SEEN = CorruptionCover(rows_within=3, how="a check")
REPAIRED = CorruptionCover(rows_within=3, rows_repaired=True, how="a code")


def test_the_chance_is_that_of_one_defective_node_corrupting_its_shard_in_the_job():
    row = corruption_row("x", CorruptionCover(), 1000, 24.0, 1e-3, (1e-3, 1.0))
    assert row.expected == pytest.approx((1000 * 1e-3 * 1e-3 * 24, 1000 * 1e-3 * 24))
    one = 1e-3 * (1 - math.exp(-24.0))  # a node is defective and corrupts within the job
    assert row.p_carried[1] == pytest.approx(1 - (1 - one) ** 1000)
    assert row.p_carried[0] < 0.05 < 0.5 < row.p_carried[1]
    assert row.verdict == "flips inside the band: clean .. corrupted" and not row.detected


def test_a_strategy_that_repairs_keeps_no_corrupted_row_and_one_that_only_detects_does():
    assert corruption_row("rs", REPAIRED, 10_000, 24.0, 1e-3, (1.0, 1.0)).p_carried == (0.0, 0.0)
    seen = corruption_row("xor", SEEN, 10_000, 24.0, 1e-3, (1.0, 1.0))
    assert seen.detected and not seen.repaired and seen.p_carried[0] > 0.99 and seen.verdict == "corrupted"
    assert corruption_row("x", CorruptionCover(), 2, 1.0, 1e-3, (1e-3, 1e-3)).verdict == "clean"


@pytest.mark.parametrize("text", ["0,1", "1,0.5", "a", "1,2,3", "nan", "inf"])
def test_a_bad_band_is_refused(text):
    with pytest.raises(MpiecError, match="--sdc-per-defective-h"):
        parse_band(text)


def test_the_default_band_and_one_value():
    assert parse_band(None) == PER_DEFECTIVE_H and parse_band("0.5") == (0.5, 0.5)


def test_the_table_groups_what_the_variants_declare_and_states_its_assumptions(capsys):
    argv = ["--nodes", "8,10000", "--trials", "1", "--hours", "2", "--strategies", "none,ckpt",
            "--corruption", "none,ckpt,ecrm:code=rs:k=2:r=2:verify_every=10,ecrm:verify_every=10"]
    assert main(argv) == 0
    out = capsys.readouterr().out.split("silent corruption (embedding rows at rest", 1)[1]
    rows = [line.split() for line in out.splitlines() if line.startswith(("8 ", "10,000"))]
    assert [r[1] for r in rows[:3]] == ["none,", "ecrm:code=rs:k=2:r=2:verify_every=10",
                                        "ecrm:verify_every=10"]
    assert rows[0][2] == "ckpt"
    assert len(rows) == 6
    assert f"prevalence {PREVALENCE:g}" in out and "ASSUMED, not published" in out
    assert "arXiv:2203.08989" in out
