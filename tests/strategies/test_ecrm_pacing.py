"""The pacing of ``ecrm``'s background rounds (``member.round_gap``): within the budget, one slow
round ignored, never more than ``MAX_GAP`` steps apart."""

from __future__ import annotations

from mpiec.strategies.ecrm.member import MAX_GAP, round_gap

STEP_S, BUDGET = 0.015, 0.1  # a laptop step; the default rebuild_budget


def test_a_round_is_spread_over_enough_steps_to_stay_within_the_budget():
    cost = 0.004  # 4 ms of CPU a round: 1.5 ms a step allowed, so 3 steps
    assert round_gap(cost, cost, STEP_S, BUDGET) == 3
    assert round_gap(0.001, 0.001, STEP_S, BUDGET) == 1


def test_one_slow_round_does_not_space_the_next_ones():
    assert round_gap(0.3, 0.002, STEP_S, BUDGET) == round_gap(0.002, 0.002, STEP_S, BUDGET) == 2


def test_the_gap_is_capped_whatever_the_rounds_measured():
    assert round_gap(5.0, 0.0, STEP_S, BUDGET) == MAX_GAP  # a slow first round: nothing to compare
    assert round_gap(5.0, 4.0, STEP_S, BUDGET) == MAX_GAP  # a sustained slowdown
    assert round_gap(0.01, 0.01, 0.0, BUDGET) == MAX_GAP  # a step measured as no time


def test_no_cost_measured_means_the_next_step():
    assert round_gap(0.0, 0.0, STEP_S, BUDGET) == 1
