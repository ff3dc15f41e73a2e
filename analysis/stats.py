"""Every interval, test and "significant" the suite prints: the one statistics module.

Owns how repeated measurements become estimates with intervals, for the bench tables, the report,
``mpiec reproduce`` and ``mpiec simulate``. No other module computes an interval or a test.

The methods (docs/measurement.md "Statistics" gives the formulas and the coverage table):

* **A level** (a variant's throughput, memory, AUC, …; ``median``): the median of its runs, with the
  distribution-free order-statistic interval ``[x_(k), x_(n+1−k)]`` of the median, whose exact
  confidence is ``1 − 2·P(Binomial(n, ½) < k)``. The largest ``k`` with confidence ≥ 95 % is used;
  for n ≤ 5 none exists and the bracket is the **range** of the runs with its real confidence
  (n = 2: 50 %, n = 5: 93.8 %), labelled as a range, never as 95 %.
* **A comparison with the baseline** (``paired``): the bench is a randomized complete block design
  (every variant once per round, order rotated), so a variant is compared with the baseline *within*
  each round: ``d_r = log(x_r / b_r)`` for ratios (overheads), ``d_r = x_r − b_r`` for differences;
  the estimate is the mean of ``d_r`` (for a ratio the geometric mean ``exp(mean d)``) and the
  interval Student's t with n − 1 degrees of freedom: ``mean ± t(0.975, n−1)·sd/√n``. Round drift
  shared by a round's variants cancels in ``d_r``. The variance is **not pooled** across variants: the
  strategies differ in their noise (checkpoint bursts, rebuilds), and a pooled variance would give the
  quiet ones intervals the noisy ones do not support. ``unpaired`` (Welch's t) is for groups with no
  round structure.
* **Significant** means a 95 % interval that excludes the null (0; a ratio's 1). Only a real 95 %
  interval can make a difference significant; a range of a few runs never does.
* **Deterministic** figures (identical in every run, by construction: same seed, same kill) are one
  measurement: printed once, marked ``det.``, with no interval.
* ``mean_t``: the mean of independent trials (a simulator's seeded trials) with its t interval;
  ``spearman``: Spearman's ρ with the Fisher-z interval (Bonett–Wright variance), n ≥ 10 only;
  ``ratio_of_means``: a paired ratio of means with Fieller's interval.
* ``analyse_table``: the public entry for a table: the per-round values of each variant (aligned by
  round, None where a run is missing) and the baseline's name → per variant its level, its paired
  comparison with the baseline, and whether that is significant.
* ``rounds_to_resolve``: from a comparison's measured spread, how many rounds would make its
  estimated effect significant with 80 % power (if the estimate were the truth).

Invariants: pure functions, no I/O, no randomness; non-finite values are dropped (a pair is dropped
when either side is missing); an empty input gives nan everywhere. Critical values come from
``scipy.stats`` (no hand-written tables).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from scipy import stats as _sp

__all__ = ["CONFIDENCE", "DASH", "Comparison", "Estimate", "analyse_table", "fmt_diff", "fmt_estimate",
           "mean_sd", "mean_t", "median", "median_bracket_level", "median_level", "paired", "ratio_of_means",
           "rounds_to_resolve", "spearman", "t_quantile", "unpaired"]

CONFIDENCE = 0.95
DASH = "—"
#: ρ needs this many points for its Fisher-z interval to hold its 95 % (Bonett & Wright 2000)
SPEARMAN_MIN_N = 10
Scale = Literal["ratio", "diff"]


@dataclass(frozen=True)
class Estimate:
    """A figure with its interval: ``value`` in ``[lo, hi]`` at confidence ``level`` over ``n`` runs
    (or rounds, or points). ``method`` names how it was obtained; ``deterministic``: the same in every
    run (one measurement, no interval); ``null``: the value of "no difference" (0, or 1 for a ratio);
    ``spread`` and ``center``: the standard deviation the t interval was built from and the mean it is
    centred on, on the analysis scale (a ratio's: log ratios), nan for order statistics."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    n: int = 0
    level: float = math.nan
    method: str = ""
    deterministic: bool = False
    null: float = 0.0
    spread: float = math.nan
    center: float = math.nan

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def is_ci95(self) -> bool:
        """A real 95 % interval (the method delivers at least 95 % at this n)."""
        return self.has_interval and self.level >= CONFIDENCE - 1e-9

    @property
    def significant(self) -> bool:
        """A 95 % interval that excludes ``null`` (a deterministic figure: it differs from ``null``)."""
        if self.deterministic:
            return math.isfinite(self.value) and self.value != self.null
        return self.is_ci95 and (self.lo > self.null or self.hi < self.null)

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2 if self.has_interval else math.nan

    def mapped(self, fn: Any, increasing: bool = True, null: float | None = None) -> Estimate:
        """The same estimate through a monotonic ``fn`` (e.g. a ratio as an overhead %)."""
        lo, hi = (fn(self.lo), fn(self.hi)) if self.has_interval else (math.nan, math.nan)
        if not increasing:
            lo, hi = hi, lo
        return Estimate(fn(self.value) if math.isfinite(self.value) else math.nan, lo, hi, self.n, self.level,
                        self.method, self.deterministic, fn(self.null) if null is None else null, self.spread,
                        self.center)


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (``scipy.stats.t.ppf``), cached: tables call it for every cell."""
    return float(_sp.t.ppf(q, df))


@lru_cache(maxsize=1024)
def _median_k(n: int) -> int:
    """The largest ``k`` whose order-statistic interval holds the median with ≥ 95 % (1 if none)."""
    k = 1
    while median_level(n, k + 1) >= CONFIDENCE:
        k += 1
    return k


def _clean(values: Iterable[Any]) -> np.ndarray:
    x = np.array([_num(v) for v in values], dtype=np.float64)
    return x[np.isfinite(x)]


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        return math.nan
    return float(v)


def _all_equal(x: np.ndarray) -> bool:
    return len(x) > 1 and bool(np.all(x == x[0]))


@lru_cache(maxsize=4096)
def median_level(n: int, k: int) -> float:
    """Exact confidence that ``[x_(k), x_(n+1−k)]`` (1-based order statistics) of ``n`` independent
    runs of a continuous figure holds its median: ``1 − 2·P(Binomial(n, ½) ≤ k − 1)``."""
    if n < 2 or not 1 <= k <= n // 2:
        return math.nan
    return float(1.0 - 2.0 * _sp.binom.cdf(k - 1, n, 0.5))


def median_bracket_level(n: int) -> float:
    """The confidence of the bracket ``median`` prints for ``n`` runs (≥ 95 % from n = 6; below, the
    range's); nan for fewer than 2."""
    return median_level(n, _median_k(n)) if n >= 2 else math.nan


def median(values: Iterable[Any]) -> Estimate:
    """The median of ``values`` with the order-statistic interval (a 95 % one from n = 6; below, the
    range of the runs at its real confidence); identical values: deterministic; one value: none."""
    x = np.sort(_clean(values))
    n = len(x)
    if not n:
        return Estimate(math.nan)
    med = float(np.median(x))
    if n == 1:
        return Estimate(med, n=1, method="one run")
    if _all_equal(x):
        return Estimate(med, n=n, method="deterministic", deterministic=True)
    k = _median_k(n)
    level = median_bracket_level(n)
    method = "order statistics" if level >= CONFIDENCE else f"range of {n} runs"
    return Estimate(med, float(x[k - 1]), float(x[n - k]), n, level, method)


def _pairs(values: Sequence[Any], base: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    if len(values) != len(base):
        raise ValueError(f"paired: {len(values)} values against {len(base)} baseline values (one per round)")
    a = np.array([_num(v) for v in values], dtype=np.float64)
    b = np.array([_num(v) for v in base], dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    return a[keep], b[keep]


def _t_interval(d: np.ndarray, method: str) -> tuple[float, float, float, float, str]:
    """(mean, lo, hi, sd, method) of the Student-t interval of ``d``'s mean."""
    n = len(d)
    mean = float(np.mean(d))
    if n < 2:
        return mean, math.nan, math.nan, math.nan, "one round" if method.startswith("paired") else "one run"
    sd = float(np.std(d, ddof=1))
    half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, sd, method


def paired(values: Sequence[Any], base: Sequence[Any], scale: Scale = "diff") -> Estimate:
    """``values`` against ``base``, round by round (the same index = the same round): the mean
    difference (``diff``) or the geometric-mean ratio (``ratio``, on the log scale) with its Student-t
    95 % interval over the rounds (n − 1 df). Rounds where either side is missing are dropped."""
    a, b = _pairs(values, base)
    if scale == "ratio":
        ok = (a > 0) & (b > 0)
        a, b = a[ok], b[ok]
    if not len(a):
        return Estimate(math.nan, null=1.0 if scale == "ratio" else 0.0)
    d = np.log(a / b) if scale == "ratio" else a - b
    n = len(d)
    if _all_equal(d):
        e = Estimate(float(d[0]), n=n, method="deterministic", deterministic=True)
    else:
        mean, lo, hi, sd, method = _t_interval(d, f"paired t ({scale})")
        e = Estimate(mean, lo, hi, n, CONFIDENCE if math.isfinite(lo) else math.nan, method, spread=sd,
                     center=mean)
    if scale == "ratio":
        return e.mapped(math.exp, null=1.0)
    return e


def unpaired(values: Iterable[Any], base: Iterable[Any], scale: Scale = "diff") -> Estimate:
    """Two independent groups (no round structure): the difference of means (``diff``) or the ratio of
    geometric means (``ratio``) with Welch's t interval."""
    a, b = _clean(values), _clean(base)
    if scale == "ratio":
        a, b = np.log(a[a > 0]), np.log(b[b > 0])
    null = 1.0 if scale == "ratio" else 0.0
    if not len(a) or not len(b):
        return Estimate(math.nan, null=null)
    point = float(np.mean(a) - np.mean(b))
    if (len(a) == 1 or _all_equal(a)) and (len(b) == 1 or _all_equal(b)) and max(len(a), len(b)) > 1:
        e = Estimate(point, n=min(len(a), len(b)), method="deterministic", deterministic=True)
    elif len(a) < 2 or len(b) < 2:
        e = Estimate(point, n=min(len(a), len(b)), method="one run")
    else:
        va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se > 0 else 1.0
        half = t_quantile(0.5 + CONFIDENCE / 2, float(df)) * se
        e = Estimate(point, point - half, point + half, min(len(a), len(b)), CONFIDENCE, f"Welch t ({scale})",
                     spread=se)
    return e.mapped(math.exp, null=1.0) if scale == "ratio" else e


def ratio_of_means(values: Sequence[Any], base: Sequence[Any]) -> Estimate:
    """``mean(values) / mean(base)`` over paired rounds with Fieller's 95 % interval (none where the
    baseline's mean is not itself significantly away from 0: the ratio is then unbounded)."""
    a, b = _pairs(values, base)
    n = len(a)
    if not n or np.mean(b) == 0:
        return Estimate(math.nan, n=n, null=1.0)
    ma, mb = float(np.mean(a)), float(np.mean(b))
    r = ma / mb
    if n < 2:
        return Estimate(r, n=1, method="one round", null=1.0)
    if _all_equal(a) and _all_equal(b):
        return Estimate(r, n=n, method="deterministic", deterministic=True, null=1.0)
    t2 = t_quantile(0.5 + CONFIDENCE / 2, n - 1) ** 2
    saa, sbb = np.var(a, ddof=1) / n, np.var(b, ddof=1) / n
    sab = float(np.cov(a, b, ddof=1)[0, 1]) / n
    # (ma − R·mb)² ≤ t²·(saa − 2R·sab + R²·sbb): a quadratic A·R² + B·R + C ≤ 0
    qa, qb, qc = mb * mb - t2 * sbb, -2 * (ma * mb - t2 * sab), ma * ma - t2 * saa
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return Estimate(r, n=n, method="Fieller: unbounded (baseline within noise of 0)", null=1.0)
    root = math.sqrt(disc)
    lo, hi = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    return Estimate(r, min(lo, r), max(hi, r), n, CONFIDENCE, "Fieller (paired)", null=1.0)


def mean_sd(values: Iterable[Any]) -> tuple[float, float, int]:
    """(mean, sample standard deviation, n): a description, not an interval; nan where undefined."""
    x = _clean(values)
    if not len(x):
        return math.nan, math.nan, 0
    return float(np.mean(x)), float(np.std(x, ddof=1)) if len(x) > 1 else math.nan, len(x)


def mean_t(values: Iterable[Any]) -> Estimate:
    """The mean of independent trials with its Student-t 95 % interval (none for fewer than two)."""
    x = _clean(values)
    if not len(x):
        return Estimate(math.nan)
    if _all_equal(x):
        return Estimate(float(x[0]), n=len(x), method="deterministic", deterministic=True)
    mean, lo, hi, sd, method = _t_interval(x, "t (mean)")
    return Estimate(mean, lo, hi, len(x), CONFIDENCE if math.isfinite(lo) else math.nan, method, spread=sd,
                    center=mean)


def spearman(xs: Sequence[Any], ys: Sequence[Any]) -> Estimate:
    """Spearman's ρ over the points where both are finite; its 95 % interval by the Fisher z transform
    with Bonett–Wright's variance ``(1 + ρ²/2)/(n − 3)``, from ``SPEARMAN_MIN_N`` points (fewer: none)."""
    x, y = _pairs(xs, ys)
    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Estimate(math.nan, n=n)
    rho = float(_sp.spearmanr(x, y).statistic)
    if n < SPEARMAN_MIN_N or abs(rho) >= 1:
        return Estimate(rho, n=n, method=f"{n} points: too few for an interval" if n < SPEARMAN_MIN_N
                        else "perfect rank order")
    z, se = math.atanh(rho), math.sqrt((1 + rho * rho / 2) / (n - 3))
    q = float(_sp.norm.ppf(0.5 + CONFIDENCE / 2))
    return Estimate(rho, math.tanh(z - q * se), math.tanh(z + q * se), n, CONFIDENCE,
                    "Fisher z (Bonett–Wright)")


def rounds_to_resolve(e: Estimate, power: float = 0.8, most: int = 1000) -> int | None:
    """Rounds that would make ``e`` (a ``paired`` comparison) significant with ``power``, if its
    estimate and spread were the truth: the smallest n with ``(t(0.975, n−1) + t(power, n−1))·sd/√n ≤
    |effect|``; None when unknown or beyond ``most``."""
    if not math.isfinite(e.spread) or not math.isfinite(e.center) or e.spread <= 0:
        return None
    effect = abs(e.center)
    if effect == 0:
        return None
    for n in range(2, most + 1):
        t = t_quantile(0.5 + CONFIDENCE / 2, n - 1) + t_quantile(power, n - 1)
        if t * e.spread / math.sqrt(n) <= effect:
            return n
    return None


@dataclass(frozen=True)
class Comparison:
    """One variant of a table: its level (median and interval) and, unless it is the baseline, its
    paired comparison with the baseline (``vs_base``, a ratio or a difference)."""

    level: Estimate
    vs_base: Estimate | None = None

    @property
    def significant(self) -> bool:
        return self.vs_base is not None and self.vs_base.significant


def analyse_table(rounds: Mapping[str, Sequence[Any]], baseline: str, scale: Scale = "ratio") -> dict[str,
                                                                                                    Comparison]:
    """The analysis of one figure of a repeated bench. ``rounds``: per variant its values by round
    (index = round, None where that run is missing; every list as long as the baseline's); returns
    per variant its ``median`` and its ``paired`` comparison with ``baseline`` (None for the baseline
    itself and where the baseline has no runs)."""
    base = list(rounds.get(baseline, []))
    out: dict[str, Comparison] = {}
    for v, vals in rounds.items():
        vals = list(vals)
        cmp = None
        if v != baseline and base:
            n = max(len(vals), len(base))
            cmp = paired(vals + [None] * (n - len(vals)), base + [None] * (n - len(base)), scale)
        out[v] = Comparison(median(vals), cmp)
    return out


def fmt_estimate(e: Estimate, spec: str) -> str:
    """A level: ``12.3 [11.0, 13.5]`` (a 95 % interval), ``12.3 (range 11.0–13.5)`` (fewer runs than a
    95 % interval needs), ``12.3 det.`` (identical in every run), ``12.3`` (one run), ``—`` (nothing)."""
    if not math.isfinite(e.value):
        return DASH
    if e.deterministic:
        return f"{e.value:{spec}} det."
    if e.is_ci95:
        return f"{e.value:{spec}} [{e.lo:{spec}}, {e.hi:{spec}}]"
    if e.has_interval:
        return f"{e.value:{spec}} (range {e.lo:{spec}}–{e.hi:{spec}})"
    return format(e.value, spec)


def fmt_diff(e: Estimate, spec: str) -> str:
    """A comparison: ``+3.1 [+1.0, +5.2]`` when significant, ``n.s. [-1.2, +3.4]`` when its 95 %
    interval holds the null, ``+3.1 det.`` when identical in every round, ``+3.1 (1 round)`` without
    an interval, ``0`` for exactly no difference."""
    if not math.isfinite(e.value):
        return DASH
    if e.deterministic:
        return format(0.0, spec) if e.value == e.null else f"{e.value:+{spec}} det."
    if not e.is_ci95:
        return f"{e.value:+{spec}} (n={e.n})"
    span = f"[{e.lo:+{spec}}, {e.hi:+{spec}}]"
    return f"{e.value:+{spec}} {span}" if e.significant else f"n.s. {span}"
