"""The reference calibration ``mpiec simulate`` uses when it is given no result files.

Owns the shipped costs and their provenance: fitted by ``calibrate.py`` from measured runs of this
suite (listed in ``REFERENCE["sources"]``, described in ``NOTE`` and docs/simulate.md,
which gives the commands that reproduce them), then frozen here so that ``mpiec simulate`` prints a
table on a fresh machine. They are one machine's figures — a laptop-class disk and two shared cores —
not a cluster's: pass ``--calibrate`` with your own result files (or ``--costs``) for yours.

Invariant: ``reference_costs()`` passes ``Costs.check`` (every figure finite and >= 0).
"""

from __future__ import annotations

import json
from pathlib import Path

from .costs import Costs

__all__ = ["NOTE", "REFERENCE", "reference_costs"]

NOTE = ("mpiec's runs on an idle 2-core machine (load average below 5), 2026-11-27, after the ecrm parity "
        "path, rebuild and trainer step changes of that day: "
        "scripts/simulate_reference.py (laptop preset: none and ecrm failure-free at 2 servers x batch 1024 "
        "and 4 servers x batch 256, 300 steps; every modelled strategy with server:1 killed at step 240 of "
        "400, a checkpoint every 50 steps; tiny preset, server:1 killed at step 53 of 120, every 10 steps)")

#: the costs ``scripts/simulate_reference.py`` fitted, frozen (``reference.json`` beside this module)
REFERENCE: dict = json.loads((Path(__file__).parent / "reference.json").read_text())


def reference_costs() -> Costs:
    return Costs.from_dict({**REFERENCE, "note": NOTE}, "the reference calibration")
