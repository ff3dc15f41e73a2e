"""A paper's claim, the figure measured for it, and the verdict computed from the two.

Owns ``Claim`` (what a paper says, its figure, how sure we are of it, and the thresholds that turn
a measured figure into a verdict), ``Measured`` (a figure with its interval as ``analysis.stats``
computed it, the runs behind it and how it was obtained), ``figure`` (an estimate with its unit, as
the papers' notes print it) and ``judge`` (the verdict).

Invariants:

* **Verdicts are computed, never written.** ``judge`` is the only place a verdict is made, from
  the claim's ``Rule`` and the measured figure; a paper module chooses *what* to measure, never
  the verdict.
* **Noise cannot make a claim reproduced.** ``reproduced`` needs the figure past the
  ``reproduced`` threshold *and* either a real 95 % interval (``Measured.is_ci95``) wholly past the
  ``partly`` threshold or a deterministic figure (the same in every run, by construction: one
  measurement, no noise to bound). A noisy figure without a 95 % interval (one run, or the range of
  fewer runs than a 95 % interval needs) is at most ``partly``, and the reason says so ("n = 3: too
  few runs for a 95 % interval"). A figure past ``partly`` only is ``partly``; anything else is
  ``not reproduced``.
* **Every figure carries what its bracket is.** ``Measured`` keeps the level, method and
  deterministic flag of the ``analysis.stats.Estimate`` it came from; ``Measured.text`` prints a 95 %
  interval as ``[a, b]``, a range as ``(range a–b)`` and a deterministic figure as ``det.``. No
  interval is computed here: every one comes from ``mpiec.analysis.stats``.
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

from mpiec.analysis.stats import CONFIDENCE, DASH, Estimate, fmt_estimate, median

__all__ = ["CANNOT", "NOT_REPRODUCED", "PARTLY", "REPRODUCED", "VERDICTS", "Claim", "Finding", "Measured",
           "Rule", "figure", "judge", "measured", "measured_from"]

REPRODUCED = "reproduced"
PARTLY = "partly"
NOT_REPRODUCED = "not reproduced"
CANNOT = "cannot be measured here"
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, CANNOT)

#: Where a claim's figure comes from (each paper module's constants carry one): P = the paper's abstract
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
        return (f"reproduced if the figure is {op} {_num(self.reproduced)}{unit} and its 95 % interval "
                f"{op} {_num(self.partly)}{unit} (or the figure is deterministic); partly if the figure is "
                f"{op} {_num(self.partly)}{unit} (a noisy figure without a 95 % interval: at most partly)")


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
    """A measured figure: its value, its interval (nan without) at confidence ``level`` (0.95 for a
    real 95 % interval; a range of a few runs has its real, lower confidence), the number of runs (or
    rounds, or points) behind it, how it was obtained (one line: which runs, which formula), the
    statistical ``method`` and whether it is ``deterministic`` (the same in every run)."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    n: int = 0
    how: str = ""
    level: float = math.nan
    method: str = ""
    deterministic: bool = False

    @property
    def known(self) -> bool:
        return math.isfinite(self.value)

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def is_ci95(self) -> bool:
        """A real 95 % interval (not a range of too few runs)."""
        return self.has_interval and not self.deterministic and self.level >= CONFIDENCE - 1e-9

    def estimate(self) -> Estimate:
        return Estimate(self.value, self.lo, self.hi, self.n, self.level, self.method, self.deterministic)

    def text(self, unit: str = "", spec: str = ".3g") -> str:
        """``1.54x [1.35, 1.72] (n=6)``, ``1.54x (range 1.35–1.72) (n=3)``, ``16x det. (n=3)``."""
        if not self.known:
            return DASH
        return figure(self.estimate(), spec, unit) + (f" (n={self.n})" if self.n else "")


def figure(e: Estimate | Measured, spec: str = ".3g", unit: str = "") -> str:
    """``e`` as ``analysis.stats.fmt_estimate`` prints it, the unit after the value: ``8.43 % [7.56,
    9.61]`` (95 % interval), ``8.43 % (range 7.56–9.61)``, ``8.43 % det.``, ``8.43 %`` (one run)."""
    est = e.estimate() if isinstance(e, Measured) else e
    text = fmt_estimate(est, spec)
    if text == DASH:
        return text
    head = format(est.value, spec)
    return head + unit + text[len(head):]


def measured(e: Estimate, how: str = "") -> Measured:
    """A ``Measured`` from an ``analysis.stats.Estimate`` (its level, method and determinism kept)."""
    return Measured(e.value, e.lo, e.hi, e.n, how, e.level, e.method, e.deterministic)


def measured_from(values: Iterable[Any], how: str = "") -> Measured:
    """The median of ``values`` (``analysis.stats.median``: its order-statistic interval, a range below
    6 runs, deterministic when every run gave the same figure)."""
    return measured(median(values), how)


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


def _no_interval(m: Measured) -> str:
    """Why a noisy figure has no 95 % interval, in words for the reason."""
    if m.n <= 1:
        return "one run: no interval, a noisy figure needs a 95 % interval to be reproduced"
    if m.has_interval:
        conf = f", which holds the median with {m.level:.0%} only" if math.isfinite(m.level) else ""
        return (f"n = {m.n}: too few runs for a 95 % interval (the range {_num(m.lo)}–{_num(m.hi)}{conf}); "
                "a noisy figure needs one to be reproduced")
    why = f" ({m.method})" if m.method else ""
    return f"n = {m.n}: no 95 % interval{why}; a noisy figure needs one to be reproduced"


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
    past_reproduced, past_partly = rule.passes(m.value, rule.reproduced), rule.passes(m.value, rule.partly)
    if past_reproduced and not m.deterministic and not m.is_ci95:
        # noise is not bounded: the figure alone can make a claim partly, never reproduced
        return Finding(claim, m, PARTLY,
                       f"figure {_num(m.value)}{unit} {op} {_num(rule.reproduced)}{unit} but "
                       f"{_no_interval(m)}.{tail}")
    det = " (deterministic: the same in every run)" if m.deterministic else ""
    worst = m.value if m.deterministic else (m.lo if rule.direction == "at_least" else m.hi)
    if past_reproduced and rule.passes(worst, rule.partly):
        return Finding(claim, m, REPRODUCED,
                       f"figure {_num(m.value)}{unit}{det} {op} {_num(rule.reproduced)}{unit}.{tail}".strip())
    if past_reproduced:
        return Finding(claim, m, PARTLY,
                       f"figure {_num(m.value)}{unit} {op} {_num(rule.reproduced)}{unit} but its 95 % "
                       f"interval reaches {_num(worst)}{unit}, past {_num(rule.partly)}{unit}: not "
                       f"distinguishable from a smaller effect.{tail}")
    if past_partly:
        return Finding(claim, m, PARTLY,
                       f"figure {_num(m.value)}{unit}{det} {op} {_num(rule.partly)}{unit} (partly) but not "
                       f"{op} {_num(rule.reproduced)}{unit}.{tail}")
    return Finding(claim, m, NOT_REPRODUCED,
                   f"figure {_num(m.value)}{unit}{det} is not {op} {_num(rule.partly)}{unit}.{tail}")
