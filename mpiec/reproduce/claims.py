"""A paper's claim, the figure measured for it, and the verdict computed from the two.

Owns ``Claim`` (what a paper says, its figure, how sure we are of it, and the thresholds that turn
a measured figure into a verdict), ``Measured`` (a median with its interval, the runs behind it and
how it was obtained) and ``judge`` (the verdict).

Invariants:

* **Verdicts are computed, never written.** ``judge`` is the only place a verdict is made, from
  the claim's ``Rule`` and the measured figure; a paper module chooses *what* to measure, never
  the verdict.
* **Noise cannot make a claim reproduced.** ``reproduced`` needs the median past the
  ``reproduced`` threshold *and* the whole interval past the ``partly`` threshold; a median past
  ``partly`` only is ``partly``; anything else is ``not reproduced``.
* **A limit of the machine is a verdict of its own.** When the paper module says the machine
  cannot show the claim (``limit``), the verdict is ``cannot be measured here`` with that reason,
  and the figure that bounds the claim is still shown (never dropped).
* Every verdict other than ``reproduced`` carries a reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from mpiec.analysis.stats import Estimate, median_ci

__all__ = ["CANNOT", "NOT_REPRODUCED", "PARTLY", "REPRODUCED", "VERDICTS", "Claim", "Finding", "Measured",
           "Rule", "judge", "measured", "measured_from"]

REPRODUCED = "reproduced"
PARTLY = "partly"
NOT_REPRODUCED = "not reproduced"
CANNOT = "cannot be measured here"
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, CANNOT)

#: Where a claim's figure comes from (``../shared/notes/paper-regimes.md``): P = the paper's abstract
#: or proceedings page, C = the authors' code, S = secondary summaries, U = inferred.
TAGS = {"P": "paper", "C": "authors' code", "S": "secondary summary", "U": "inferred"}


@dataclass(frozen=True)
class Rule:
    """Thresholds next to a claim. ``at_least``: bigger is better for the claim (a reduction, a
    speed-up); ``at_most``: smaller is better (an overhead, an error). ``reproduced`` and ``partly``
    are in the unit of the measured figure."""

    direction: Literal["at_least", "at_most"]
    reproduced: float
    partly: float

    def __post_init__(self) -> None:
        ok = (self.reproduced >= self.partly if self.direction == "at_least"
              else self.reproduced <= self.partly)
        if not ok:
            raise ValueError(f"rule {self}: the 'reproduced' threshold must be stricter than 'partly'")

    def passes(self, x: float, threshold: float) -> bool:
        return x >= threshold if self.direction == "at_least" else x <= threshold

    def text(self, unit: str = "") -> str:
        op = "≥" if self.direction == "at_least" else "≤"
        return (f"reproduced if the median is {op} {_num(self.reproduced)}{unit} and the interval "
                f"{op} {_num(self.partly)}{unit}; partly if the median is {op} {_num(self.partly)}{unit}")


@dataclass(frozen=True)
class Claim:
    """One headline claim of a paper."""

    paper: str  # "ecrec", "cpr", "cnr"
    key: str  # short id, unique within the paper ("overhead-ckpt30")
    text: str  # the claim in words
    paper_figure: str  # the paper's number(s), as the paper gives them
    tag: str  # P, C, S or U (TAGS)
    rule: Rule
    unit: str = ""  # unit of the measured figure ("%", "x", " s", "")

    def __post_init__(self) -> None:
        if self.tag not in TAGS:
            raise ValueError(f"claim {self.key}: tag {self.tag!r} is not one of {', '.join(TAGS)}")


@dataclass(frozen=True)
class Measured:
    """A measured figure: median, 95 % interval (nan without), the number of runs (or points) behind
    it, and how it was obtained (one line: which runs, which formula)."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    n: int = 0
    how: str = ""

    @property
    def known(self) -> bool:
        return math.isfinite(self.value)

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def text(self, unit: str = "", spec: str = ".3g") -> str:
        if not self.known:
            return "—"
        out = f"{self.value:{spec}}{unit}"
        if self.has_interval:
            out += f" [{self.lo:{spec}}, {self.hi:{spec}}]"
        return out + (f" (n={self.n})" if self.n else "")


def measured(e: Estimate, how: str = "") -> Measured:
    """A ``Measured`` from an ``analysis.stats.Estimate``."""
    return Measured(e.value, e.lo, e.hi, e.n, how)


def measured_from(values: Iterable[Any], how: str = "") -> Measured:
    """The median of ``values`` with its bootstrap interval."""
    return measured(median_ci(values), how)


@dataclass(frozen=True)
class Finding:
    """A claim, what was measured for it, and the verdict with its reason."""

    claim: Claim
    measured: Measured
    verdict: str
    reason: str
    extra: dict[str, Any] = field(default_factory=dict)  # figures the page shows beside (bounds, ratios)


def _num(x: float) -> str:
    return f"{x:.4g}"


def judge(claim: Claim, m: Measured, *, limit: str = "", note: str = "") -> Finding:
    """The verdict on ``claim`` from ``m`` (see the module's invariants). ``limit``: why this
    machine cannot show the claim (then the verdict is ``CANNOT``); ``note``: a sentence appended
    to the reason (the regime, what bounds the figure)."""
    rule, unit = claim.rule, claim.unit
    tail = f" {note}" if note else ""
    if limit:
        shown = f" Measured here: {m.text(unit)}." if m.known else ""
        return Finding(claim, m, CANNOT, f"{limit}.{shown}{tail}".strip())
    if not m.known:
        return Finding(claim, m, CANNOT, f"no figure: {m.how or 'the runs it needs did not complete'}.{tail}")
    op = "≥" if rule.direction == "at_least" else "≤"
    worst = (m.lo if rule.direction == "at_least" else m.hi) if m.has_interval else m.value
    if rule.passes(m.value, rule.reproduced) and rule.passes(worst, rule.partly):
        return Finding(claim, m, REPRODUCED,
                       f"median {_num(m.value)}{unit} {op} {_num(rule.reproduced)}{unit}.{tail}".strip())
    if rule.passes(m.value, rule.reproduced):
        return Finding(claim, m, PARTLY,
                       f"median {_num(m.value)}{unit} {op} {_num(rule.reproduced)}{unit} but the interval "
                       f"reaches {_num(worst)}{unit}, past {_num(rule.partly)}{unit}: not distinguishable "
                       f"from a smaller effect.{tail}")
    if rule.passes(m.value, rule.partly):
        return Finding(claim, m, PARTLY,
                       f"median {_num(m.value)}{unit} {op} {_num(rule.partly)}{unit} (partly) but not "
                       f"{op} {_num(rule.reproduced)}{unit}.{tail}")
    return Finding(claim, m, NOT_REPRODUCED,
                   f"median {_num(m.value)}{unit} is not {op} {_num(rule.partly)}{unit}.{tail}")
