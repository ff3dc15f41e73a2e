"""Where a rank is in training: the step counters the step driver and the recovery move.

Owns ``Progress``. Invariants: ``completed`` is the last step this rank completed (its state holds
it and its agent's ``after_step`` may run); ``applied`` the newest step whose update the rank's
state holds (a server's table holds step s from its apply on, before its agent's ``after_apply``
lets s complete, so ``applied`` may be ``completed + 1``); ``current_step`` the step (or the
evaluation after it) in progress, which a kill note records; a recovery sets them all to the step
it restored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Progress:
    completed: int = -1  # last step this rank fully completed
    applied: int = -1  # newest step whose update this rank's state holds
    current_step: int = 0  # the step (or evaluation after it) in progress
    steps_run: int = 0  # steps this rank executed in the step loop (re-executions included)


__all__ = ["Progress"]
