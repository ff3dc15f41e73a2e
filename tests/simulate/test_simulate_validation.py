"""The simulator predicts measured runs it was not calibrated on (issue 9's acceptance: ±20 %).

Real runs (tiny preset, ULFM kills; the plan is ``validation_runs.PLAN``), launched one after the
other: calibrated on the ``seen`` runs, the model predicts the ``unseen`` ones (another number of
servers, other kill steps, three kills) — time lost over the three recoveries of each, and the
``ckpt`` run's protection overhead.

The plan runs ``REPETITIONS`` times (about 30 s each on 2 idle cores); each repetition calibrates on
its own seen runs and predicts its own unseen runs. The acceptance figure is the **median** error of
the repetitions, asserted strictly within ±20 %: one recovery's latency swings by ±20 % from run to
run with the machine's scheduling, and a repetition is a measurement like any other (docs/simulate.md
has twelve repetitions: every error within ±16 %, the median of three within ±10 %). Each
repetition's prediction must also be within a factor of 3 (a broken rollback count, interval or
bandwidth fit misses by far more), and the ``--predict`` command line prints the same figures.

``ecrm``'s failure-free overhead is predicted for a failure-free run on 3 servers from one on 2 (a
failure run's parity stage also holds its rebuild windows' work, ``predict.measured_overhead``), and
its throughput while rebuilding (``throughput in rebuild``) for the 3-server kill run.
"""

from __future__ import annotations

import statistics

import pytest
from validation_runs import PLAN, run_plan, table, validate

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(1200)]

TOLERANCE = 0.20
REPETITIONS = 3
ACCEPTED = [("unseen-ckpt", "time lost, total"), ("unseen-ecrm", "time lost, total"),
            ("unseen-ckpt", "overhead"), ("unseen-ecrm-ff", "overhead"),
            ("unseen-ecrm", "throughput in rebuild")]


@pytest.fixture(scope="module")
def validation(tmp_path_factory):
    """Per repetition: (its files, its comparisons by (run, quantity)); and the printed tables."""
    reps, text = [], []
    for i in range(REPETITIONS):
        files = run_plan(tmp_path_factory.mktemp(f"validation{i + 1}"))
        _, comparisons = validate(files)
        text.append(f"repetition {i + 1}\n{table(comparisons)}")
        reps.append((files, {(c.run.removesuffix(".h5"), c.quantity): c for c in comparisons}))
    print("\n" + "\n\n".join(text))
    return reps, "\n\n".join(text)


@pytest.mark.parametrize(("run", "quantity"), ACCEPTED)
def test_unseen_run_is_predicted_within_20_percent(validation, run, quantity):
    reps, text = validation
    errors = [by[(run, quantity)].error for _, by in reps]
    median = statistics.median(errors)
    assert abs(median) <= TOLERANCE, (f"{run} {quantity}: median {100 * median:+.0f} % of "
                                      f"{', '.join(f'{100 * e:+.0f} %' for e in errors)}\n{text}")


def test_predictions_are_within_a_factor_of_three(validation):
    reps, text = validation
    for _, by in reps:
        assert set(ACCEPTED) <= set(by), text
        for key in ACCEPTED:
            c = by[key]
            assert c.measured > 0 and c.predicted > 0, f"{key}\n{text}"
            assert 1 / 3 <= c.predicted / c.measured <= 3.0, f"{key}: {100 * c.error:+.0f} %\n{text}"


def test_the_command_line_prints_the_same_predictions(validation, capsys):
    from mpiec.simulate.cli import main

    (files, by), _ = validation[0][0], validation[1]
    seen = [str(files[p.name]) for p in PLAN if p.seen]
    unseen = [str(files[p.name]) for p in PLAN if not p.seen]
    assert main(["--calibrate", *seen, "--predict", *unseen]) == 0
    out = capsys.readouterr().out
    c = by[("unseen-ckpt", "time lost, total")]
    line = next(x for x in out.splitlines() if x.startswith("unseen-ckpt") and "time lost, total" in x)
    assert f"{c.predicted:.4g}" in line and f"{c.measured:.4g}" in line
