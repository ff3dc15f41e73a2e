"""The simulator's calibrate → predict pipeline on real runs: what it computes, not how close it is.

Real runs (tiny preset, ULFM kills; the plan is ``validation_runs.PLAN``, about 30 s on 2 idle
cores), launched one after the other: calibrated on the ``seen`` runs, the model predicts the
``unseen`` ones (another number of servers, other kill steps, three kills).

How close the predictions come (issue 9's acceptance: the median of repetitions within ±20 %) is a
measurement, not a test: on shared cores one recovery's latency swings by tens of percent with the
other jobs' load (a loaded machine, load ~20, gave "unseen-ecrm time lost −86 %"), so no assertion
on an error can be green on a busy machine and still mean something. It is printed by the
benchmark script ``python tests/simulate/validation_runs.py OUTDIR --repeat 3`` (each repetition's
table, then every accepted quantity's errors, median and whether it is within ±20 %), and its
figures are in docs/simulate.md. The test below runs the plan once and asserts what holds on any
machine: every accepted quantity is predicted and measured, the total time lost is the model's sum
of its recoveries, a prediction never reads the quantity it predicts, and the ``--predict`` command
line prints the same figures. (The model's arithmetic on given costs is test_simulate_model.py's.)
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from validation_runs import ACCEPTED, PLAN, run_plan, table, validate

from mpiec.results import read_result
from mpiec.simulate.calibrate import calibrate, measure
from mpiec.simulate.predict import predict

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def validation(tmp_path_factory):
    """(the plan's result files, its comparisons by (run, quantity), the printed table)."""
    files = run_plan(tmp_path_factory.mktemp("validation"))
    _, comparisons = validate(files)
    text = table(comparisons)
    print("\n" + text)  # the errors, for the record: not asserted
    return files, {(c.run.removesuffix(".h5"), c.quantity): c for c in comparisons}, text


def test_every_accepted_quantity_is_predicted_and_measured(validation):
    _, by, text = validation
    assert set(ACCEPTED) <= set(by), text
    for key in ACCEPTED:
        c = by[key]
        assert math.isfinite(c.predicted) and math.isfinite(c.measured), f"{key}\n{text}"
        assert c.measured > 0 and c.predicted > 0, f"{key}\n{text}"


def test_the_total_time_lost_is_the_sum_of_each_recovery(validation):
    _, by, text = validation
    for p in PLAN:
        if p.seen or not p.kills:
            continue
        each = [by[(p.name, f"time lost, recovery {i + 1}")] for i in range(len(p.kills))]
        total = by[(p.name, "time lost, total")]
        assert total.predicted == pytest.approx(sum(c.predicted for c in each)), text
        assert total.measured == pytest.approx(sum(c.measured for c in each)), text


def test_a_prediction_never_reads_the_quantity_it_predicts(validation):
    """The measured time lost and rebuild slowdown of the unseen runs, doubled: the same predictions
    (it would not be a prediction if it changed)."""
    files, _, _ = validation
    costs = calibrate([read_result(files[p.name]) for p in PLAN if p.seen])
    unseen = [measure(read_result(files[p.name])) for p in PLAN if not p.seen]
    doubled = [dataclasses.replace(m, recoveries=[
        dataclasses.replace(r, time_lost_s=2 * r.time_lost_s, window_slowdown=2 * r.window_slowdown + 1)
        for r in m.recoveries]) for m in unseen]
    kept = ("time lost", "throughput in rebuild")
    before = [(c.run, c.quantity, c.predicted) for c in predict(costs, unseen) if c.quantity.startswith(kept)]
    after = [(c.run, c.quantity, c.predicted) for c in predict(costs, doubled) if c.quantity.startswith(kept)]
    assert before and after == before


def test_the_command_line_prints_the_same_predictions(validation, capsys):
    from mpiec.simulate.cli import main

    files, by, _ = validation
    seen = [str(files[p.name]) for p in PLAN if p.seen]
    unseen = [str(files[p.name]) for p in PLAN if not p.seen]
    assert main(["--calibrate", *seen, "--predict", *unseen]) == 0
    out = capsys.readouterr().out
    for run, quantity in (("unseen-ckpt", "time lost, total"), ("unseen-ecrm", "throughput in rebuild")):
        c = by[(run, quantity)]
        line = next(x for x in out.splitlines() if x.startswith(run) and quantity in x)
        assert f"{c.predicted:.4g}" in line and f"{c.measured:.4g}" in line, line
