"""A paper's claim, the figure measured for it, and the verdict computed from the two.

Owns ``Claim`` (what a paper says, quoted with its source tag, or one of mpiec's own implementation
checks; its figure and the ``Rule`` that turns a measured figure into a verdict, with why its
thresholds are where they are), ``Measured`` (a figure with its interval as ``analysis.stats``
computed it, the runs behind it and how it was obtained), ``Assumption`` and ``Band`` (an [U]
assumption a verdict rests on, its plausible band with its source, and the judged figure as a
function of it), ``figure`` (an estimate with its unit, as the papers' notes print it) and ``judge``
(the verdict).

Invariants:

* **Verdicts are computed, never written.** ``judge`` is the only place a verdict is made, from
  the claim's ``Rule``, the measured figure and what the paper module says about the regime
  (``limit``, ``calibrated``, ``gate``, ``bands``); a paper module chooses *what* to measure, never
  the verdict. ``Finding.verdict`` is one of ``VERDICTS`` (the tally's column); ``Finding.shown`` is
  the verdict as the table prints it (``depends on …``, ``not judged: …``).
* **Only the papers' claims count.** A ``Claim`` with ``check=True`` is one of mpiec's own
  implementation checks (a property of mpiec, often true by construction): judged by the same rule,
  shown in its own table, never in a paper's tally.
* **Precedence**: ``calibrated`` (the judged figure follows from a regime constant chosen to
  produce the paper's figure: ``calibrated (not a test)``), then ``limit`` (``cannot be measured
  here``), then the ``gate`` (``not judged: disturbed`` / ``not judged: regime not realized (…)``),
  then an unknown figure (``cannot be measured here``), then the rule, at the assumed value of every
  band and at both ends of each.
* **Noise cannot make a claim reproduced.** ``reproduced`` needs the figure past the
  ``reproduced`` threshold *and* either a real 95 % interval (``Measured.is_ci95``) wholly past the
  ``partly`` threshold or a deterministic figure (one measurement, no noise to bound).
* **Not reproduced needs its evidence too.** A figure short of ``partly`` is ``not reproduced`` only
  if it is deterministic, or its 95 % interval (a noisy figure without one: the range of its runs)
  stays short of ``partly`` as well; an interval that reaches past it, or a noisy figure with
  neither, is ``inconclusive``: the data do not rule out the smaller effect (two scales of one
  reproduction flipped between the two on a figure near the threshold).
* **Partly needs an effect.** Where the rule names a ``null`` (no effect: 0, chance 0.5, ρ = 0),
  ``partly`` (and ``reproduced``) also need the 95 % interval wholly past the null (a deterministic
  figure: the figure itself); a figure past ``partly`` whose interval holds the null, or that has no
  95 % interval, is ``inconclusive``. Without a null, a noisy figure without a 95 % interval is at
  most ``partly`` and the reason says so.
* **Assumptions are bands.** With ``bands``, the rule is applied at the assumed value and at both
  ends of each band (re-judging the figure the ``Band`` gives there); the verdict stands only if it
  is the same everywhere, otherwise it is ``depends on an assumption`` and ``shown`` says where it
  changes ("depends on X: reproduced below …, partly above").
* **Every figure carries what its bracket is.** ``Measured`` keeps the level, method and
  deterministic flag of the ``analysis.stats.Estimate`` it came from; no interval is computed here.
* A limit of the machine keeps the figure that bounds the claim in the reason; every verdict other
  than ``reproduced`` carries a reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mpiec.analysis.stats import CONFIDENCE, DASH, Estimate, fmt_estimate, median

if TYPE_CHECKING:
    from .experiment import Gate

__all__ = ["CALIBRATED", "CANNOT", "DEPENDS", "INCONCLUSIVE", "NOT_JUDGED", "NOT_REPRODUCED", "PARTLY",
           "REPRODUCED", "TAGS", "VERDICTS", "Assumption", "Band", "Claim", "Finding", "Measured", "Rule",
           "check", "figure", "judge", "measured", "measured_from"]

REPRODUCED = "reproduced"
PARTLY = "partly"
INCONCLUSIVE = "inconclusive"
NOT_REPRODUCED = "not reproduced"
DEPENDS = "depends on an assumption"
CALIBRATED = "calibrated (not a test)"
CANNOT = "cannot be measured here"
NOT_JUDGED = "not judged"
#: The verdicts, in the tally's order. The first four come from the rule; the others say why the rule
#: was not (or not alone) applied.
VERDICTS = (REPRODUCED, PARTLY, INCONCLUSIVE, NOT_REPRODUCED, DEPENDS, CALIBRATED, CANNOT, NOT_JUDGED)
_RULE_VERDICTS = (REPRODUCED, PARTLY, INCONCLUSIVE, NOT_REPRODUCED)

#: Where a claim's figure comes from (each paper module's constants carry one): P = the paper's abstract
#: or proceedings page, C = the authors' code, S = secondary summaries, U = inferred; M = mpiec itself
#: (an implementation check's expectation, never a paper's claim).
TAGS = {"P": "paper", "C": "authors' code", "S": "secondary summary", "U": "inferred", "M": "mpiec"}


@dataclass(frozen=True)
class Rule:
    """Thresholds next to a claim, stated before the run. ``at_least``: bigger is better for the claim
    (a reduction, a speed-up); ``at_most``: smaller is better (an overhead, an error). ``reproduced``
    and ``partly`` are in the unit of the measured figure; ``why`` says why they are where they are
    (the page prints it); ``null`` is the figure of no effect (0, chance 0.5, ρ = 0), None where the
    claim has none (an absolute bound such as "overhead ≤ 13 %"). ``equivalence``: the claim is that
    there is *no* meaningful difference ("on par"); ``partly`` is then the equivalence margin, and
    absence of evidence is not evidence: any verdict past ``not reproduced`` needs the 95 % interval
    wholly within the margin (else inconclusive), as an equivalence test requires."""

    direction: Literal["at_least", "at_most"]
    reproduced: float
    partly: float
    why: str = ""
    null: float | None = None
    equivalence: bool = False

    def __post_init__(self) -> None:
        ok = (self.reproduced >= self.partly if self.direction == "at_least"
              else self.reproduced <= self.partly)
        if not ok:
            raise ValueError(f"rule {self}: the 'reproduced' threshold must be stricter than 'partly'")
        if self.null is not None and not self.passes(self.partly, self.null):
            raise ValueError(f"rule {self}: the null must not be past the 'partly' threshold")
        if self.equivalence and self.null is not None:
            raise ValueError(f"rule {self}: an equivalence claim has a margin, not a no-effect figure")

    def passes(self, x: float, threshold: float) -> bool:
        return x >= threshold if self.direction == "at_least" else x <= threshold

    def beyond(self, x: float, null: float) -> bool:
        """``x`` strictly past ``null`` in the claim's direction."""
        return x > null if self.direction == "at_least" else x < null

    @property
    def op(self) -> str:
        return "≥" if self.direction == "at_least" else "≤"

    def short(self, unit: str = "") -> str:
        """``≥ 90 % (partly ≥ 75 %; no effect: 0 %)``: the measured column's criterion."""
        null = f"; no effect: {_num(self.null)}{unit}" if self.null is not None else ""
        return f"{self.op} {_num(self.reproduced)}{unit} (partly {self.op} {_num(self.partly)}{unit}{null})"

    def text(self, unit: str = "") -> str:
        op = self.op
        null = (f", and the 95 % interval wholly past the no-effect figure {_num(self.null)}{unit} (else "
                "inconclusive)" if self.null is not None else
                f", and its 95 % interval wholly {op} the equivalence margin {_num(self.partly)}{unit} (else "
                "inconclusive: 'on par' needs the interval inside the margin)" if self.equivalence else
                " (a noisy figure without a 95 % interval: at most partly)")
        why = f" Why: {self.why.rstrip('.')}." if self.why else ""
        return (f"reproduced if the figure is {op} {_num(self.reproduced)}{unit} and its 95 % interval "
                f"{op} {_num(self.partly)}{unit} (or the figure is deterministic); partly if the figure is "
                f"{op} {_num(self.partly)}{unit}{null}.{why}")


@dataclass(frozen=True)
class Claim:
    """One headline claim of a paper (``quote``: its words, with ``tag`` its source), or, with
    ``check=True``, one of mpiec's own implementation checks (no place in the paper's tally)."""

    paper: str  # "ecrec", "cpr", "cnr"
    key: str  # short id, unique within the paper ("overhead-ckpt30")
    text: str  # the claim in words (what is measured)
    paper_figure: str  # the paper's number(s), as the paper gives them (a check: what is expected)
    tag: str  # P, C, S, U (TAGS); M for a check
    rule: Rule
    unit: str = ""  # unit of the measured figure ("%", "x", " s", "")
    quote: str = ""  # the paper's own words (the page shows them with the tag)
    check: bool = False  # an implementation check, not a claim of the paper

    def __post_init__(self) -> None:
        if self.tag not in TAGS:
            raise ValueError(f"claim {self.key}: tag {self.tag!r} is not one of {', '.join(TAGS)}")
        if self.tag == "M" and not self.check:
            raise ValueError(f"claim {self.key}: tag M (mpiec) is for implementation checks only")

    @property
    def says(self) -> str:
        """What the page prints in the 'what the paper says' column: the quote when there is one."""
        return f"“{self.quote}”" if self.quote else self.text


def check(paper: str, key: str, text: str, expected: str, rule: Rule, unit: str = "",
          tag: str = "M") -> Claim:
    """An implementation check: a property of mpiec judged by ``rule`` and shown apart from the
    paper's claims (``tag``: where its expectation comes from, M = mpiec's own design)."""
    return Claim(paper, key, text, expected, tag, rule, unit, check=True)


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
class Assumption:
    """An [U] assumption a verdict rests on: the ``value`` the regime assumes and the plausible band
    ``[low, high]`` with its ``source`` (why a reader should accept those ends). One per quantity in
    the project: ``reproduce`` and ``simulate --paper`` read the same constant."""

    key: str  # "storage-mb-s"
    what: str  # "storage bandwidth per server"
    value: float
    low: float
    high: float
    source: str
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.low <= self.value <= self.high:
            raise ValueError(f"assumption {self.key}: {self.value} is not in its band "
                             f"[{self.low}, {self.high}]")

    def at(self, x: float) -> str:
        return f"{_num(x)}{self.unit}"

    def text(self) -> str:
        """``storage bandwidth per server 80 MB/s [U], band 40–160 MB/s (source)``."""
        return (f"{self.what} {self.at(self.value)} [U], band {_num(self.low)}–{self.at(self.high)} "
                f"({self.source})")


@dataclass(frozen=True)
class Band:
    """The judged figure as a function of one assumption: ``figure_at(x)`` is what the claim's
    figure would be were the assumption ``x`` (re-judged from the same runs where the figure is a
    formula of it; a lookup of runs made at the band's ends where it needs new runs, then
    ``exact_ends_only``: no search for where the verdict changes between them)."""

    assumption: Assumption
    figure_at: Callable[[float], Measured]
    exact_ends_only: bool = False


@dataclass(frozen=True)
class Finding:
    """A claim, what was measured for it, and the verdict with its reason. ``verdict``: one of
    ``VERDICTS``; ``label``: the verdict as the table shows it when it says more (``depends on …``,
    ``not judged: …``); ``gate``: the regime checks of the experiments behind it (``experiment.Gate``);
    ``ends``: the verdict and figure at each end of each band."""

    claim: Claim
    measured: Measured
    verdict: str
    reason: str
    extra: dict[str, Any] = field(default_factory=dict)  # figures the page shows beside (bounds, ratios)
    label: str = ""
    gate: Gate | None = None
    ends: tuple[tuple[str, float, str, float], ...] = ()  # (assumption key, x, verdict, figure)

    @property
    def shown(self) -> str:
        return self.label or self.verdict


def _num(x: float | None) -> str:
    return DASH if x is None else f"{x:.4g}"


def _no_interval(m: Measured) -> str:
    """Why a noisy figure has no 95 % interval, in words for the reason."""
    if m.n <= 1:
        return "one run: no interval"
    if m.has_interval:
        conf = f", which holds the median with {m.level:.0%} only" if math.isfinite(m.level) else ""
        return f"n = {m.n}: too few runs for a 95 % interval (the range {_num(m.lo)}–{_num(m.hi)}{conf})"
    why = f" ({m.method})" if m.method else ""
    return f"n = {m.n}: no 95 % interval{why}"


def _rule(claim: Claim, m: Measured) -> tuple[str, str]:
    """(verdict, reason) of the rule alone on a known figure (module invariants)."""
    rule, unit = claim.rule, claim.unit
    op = rule.op
    det = " (deterministic: the same in every run)" if m.deterministic else ""
    past_reproduced, past_partly = rule.passes(m.value, rule.reproduced), rule.passes(m.value, rule.partly)
    fig = f"figure {_num(m.value)}{unit}"
    if not past_partly:
        best = m.hi if rule.direction == "at_least" else m.lo  # the interval's end nearest the claim
        if m.deterministic or (m.has_interval and not rule.passes(best, rule.partly)):
            every = "" if m.deterministic or m.is_ci95 else " (every run)"
            return NOT_REPRODUCED, f"{fig}{det}{every} is not {op} {_num(rule.partly)}{unit}."
        if m.is_ci95:
            return INCONCLUSIVE, (f"{fig} is not {op} {_num(rule.partly)}{unit} but its 95 % interval "
                                  f"[{_num(m.lo)}, {_num(m.hi)}] reaches past it: a smaller effect than the "
                                  "paper's is not ruled out.")
        if m.has_interval:
            return INCONCLUSIVE, (f"{fig} is not {op} {_num(rule.partly)}{unit} but {_no_interval(m)}, "
                                  f"and some runs were past {_num(rule.partly)}{unit}.")
        return INCONCLUSIVE, (f"{fig} is not {op} {_num(rule.partly)}{unit} but {_no_interval(m)}: "
                              "the effect is not ruled out.")
    short = (f"{fig}{det} {op} {_num(rule.partly)}{unit} (partly) but not "
             f"{op} {_num(rule.reproduced)}{unit}.")
    worst = m.value if m.deterministic else (m.lo if rule.direction == "at_least" else m.hi)
    noisy_no_ci = not m.deterministic and not m.is_ci95
    if rule.null is not None:
        null = f"{_num(rule.null)}{unit}"
        if noisy_no_ci:
            return INCONCLUSIVE, (f"{fig} {op} {_num(rule.partly)}{unit} but {_no_interval(m)}: nothing "
                                  f"shows it apart from no effect ({null}).")
        if not rule.beyond(worst, rule.null):
            where = ("is" if m.deterministic
                     else f"has its 95 % interval [{_num(m.lo)}, {_num(m.hi)}] reaching")
            return INCONCLUSIVE, (f"{fig} {op} {_num(rule.partly)}{unit} but {where} the no-effect figure "
                                  f"{null}: not distinguishable from no effect.")
    elif rule.equivalence:
        if noisy_no_ci:
            return INCONCLUSIVE, (f"{fig} {op} {_num(rule.partly)}{unit} but {_no_interval(m)}: 'on par' "
                                  f"needs a 95 % interval inside the margin {_num(rule.partly)}{unit}.")
        if not rule.passes(worst, rule.partly):
            return INCONCLUSIVE, (f"{fig} {op} {_num(rule.partly)}{unit} but its 95 % interval reaches "
                                  f"{_num(worst)}{unit}, past the equivalence margin {_num(rule.partly)}"
                                  f"{unit}: not shown on par.")
    elif noisy_no_ci:
        if past_reproduced:
            return PARTLY, (f"{fig} {op} {_num(rule.reproduced)}{unit} but {_no_interval(m)}, and a noisy "
                            "figure needs a 95 % interval to be reproduced.")
        return PARTLY, short
    if past_reproduced and rule.passes(worst, rule.partly):
        return REPRODUCED, f"{fig}{det} {op} {_num(rule.reproduced)}{unit}."
    if past_reproduced:
        return PARTLY, (f"{fig} {op} {_num(rule.reproduced)}{unit} but its 95 % interval reaches "
                        f"{_num(worst)}{unit}, past {_num(rule.partly)}{unit}: not distinguishable from a "
                        "smaller effect.")
    return PARTLY, short


def _verdict_at(claim: Claim, band: Band, x: float) -> tuple[str, Measured]:
    try:
        m = band.figure_at(x)
    except (ArithmeticError, ValueError):
        m = Measured(math.nan)
    return (_rule(claim, m)[0] if m.known else CANNOT), m


def _switch(claim: Claim, band: Band, a: float, b: float, va: str) -> float:
    """Where between ``a`` (verdict ``va``) and ``b`` the verdict first changes (bisection: the figure
    is taken as monotonic in the assumption over the band)."""
    for _ in range(40):
        mid = (a + b) / 2
        if _verdict_at(claim, band, mid)[0] == va:
            a = mid
        else:
            b = mid
    return (a + b) / 2


def _bands(claim: Claim, v0: str, bands: Sequence[Band]) -> tuple[str, str, tuple]:
    """(label, reason tail, ends): label '' when the verdict ``v0`` holds across every band."""
    ends: list[tuple[str, float, str, float]] = []
    texts, label = [], ""
    for band in bands:
        a = band.assumption
        (v_lo, m_lo), (v_hi, m_hi) = _verdict_at(claim, band, a.low), _verdict_at(claim, band, a.high)
        ends += [(a.key, a.low, v_lo, m_lo.value), (a.key, a.high, v_hi, m_hi.value)]
        at = (f"at {a.at(a.low)}: {v_lo} ({m_lo.text(claim.unit)}); at {a.at(a.high)}: {v_hi} "
              f"({m_hi.text(claim.unit)})")
        if v_lo == v0 == v_hi:
            texts.append(f"Holds across the band of the {a.text()}: {at}.")
            continue
        if not label:
            if v_lo != v_hi and not band.exact_ends_only:
                x = _switch(claim, band, a.low, a.high, v_lo)
                label = f"depends on {a.what}: {v_lo} below {a.at(x)}, {v_hi} above"
            else:
                label = (f"depends on {a.what}: {v_lo} at {a.at(a.low)}, {v0} at {a.at(a.value)}, "
                         f"{v_hi} at {a.at(a.high)}")
        texts.append(f"Changes over the band of the {a.text()}: {at}.")
    return label, " ".join(texts), tuple(ends)


def judge(claim: Claim, m: Measured, *, limit: str = "", note: str = "", calibrated: str = "",
          gate: Gate | None = None, bands: Sequence[Band] = ()) -> Finding:
    """The verdict on ``claim`` from ``m`` (see the module's invariants for the order).

    ``calibrated``: the regime constant the judged figure follows from, and the paper's figure it was
    chosen to produce (then ``CALIBRATED``); ``limit``: why this machine cannot show the claim (then
    ``CANNOT``, the figure still shown); ``gate``: the ``experiment.Gate`` of the runs behind ``m``
    (disturbed, or a planned ratio not realized: ``NOT_JUDGED``); ``bands``: the assumptions the
    figure rests on (the verdict at both ends of each); ``note``: a sentence appended to the reason."""
    unit = claim.unit
    tail = f" {note}" if note else ""
    shown = f" Measured here: {m.text(unit)}." if m.known else ""

    def out(verdict: str, reason: str, label: str = "", ends: tuple = ()) -> Finding:
        return Finding(claim, m, verdict, reason.strip(), label=label, gate=gate, ends=ends)

    if calibrated:
        return out(CALIBRATED, f"{calibrated}: the figure follows from a constant chosen to produce the "
                               f"paper's, so agreeing with it tests nothing.{shown}{tail}")
    if limit:
        return out(CANNOT, f"{limit}.{shown}{tail}")
    if gate is not None and gate.disturbed:
        return out(NOT_JUDGED, f"{gate.disturbed}: the figure may be the host's, not the regime's."
                               f"{shown}{tail}",
                   "not judged: disturbed")
    if gate is not None and gate.unrealized:
        why = "; ".join(gate.unrealized)
        return out(NOT_JUDGED, f"the runs did not realize the planned regime (the realized table)."
                               f"{shown}{tail}",
                   f"not judged: regime not realized ({why})")
    if not m.known:
        return out(CANNOT, f"no figure: {m.how or 'the runs it needs did not complete'}.{tail}")
    verdict, reason = _rule(claim, m)
    if not bands:
        return out(verdict, reason + tail)
    label, band_text, ends = _bands(claim, verdict, bands)
    if label:
        return out(DEPENDS, f"At the assumed values: {verdict}: {reason} {band_text}{tail}", label, ends)
    return out(verdict, f"{reason} {band_text}{tail}", ends=ends)
