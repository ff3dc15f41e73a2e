"""Medians with 95 % intervals, overheads between two groups of runs, and whether a difference is noise.

Owns the statistics of repeated benches (``mpiec bench --repeat N``):

* **median interval**: a bootstrap percentile interval of the median (``BOOTSTRAP`` resamples
  from a fixed seed, numpy only: the same runs always give the same interval); one value has no
  interval (``lo``/``hi`` nan).
* **overhead** of a group against the baseline's = ``100 · (1 − median(x) / median(base))``, its
  interval from resampling both groups independently (unpaired: the runs are not matched);
  **difference** = ``median(x) − median(base)``, likewise; **ratio** = ``median(x) / median(base)``.
* **significant**: the interval excludes 0. A difference that is not significant prints as
  ``n.s.`` with its interval, never as a number with a sign (``fmt_diff``).

Invariants: pure functions, no I/O; non-finite values are dropped before anything is computed; an
empty group gives nan everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["BOOTSTRAP", "CONFIDENCE", "Estimate", "diff_ci", "fmt_diff", "fmt_estimate", "mean_sd",
           "mean_ci", "median_ci", "overhead_ci", "ratio_ci"]

CONFIDENCE = 0.95
BOOTSTRAP = 2000
SEED = 12345
DASH = "—"


@dataclass(frozen=True)
class Estimate:
    """A median (or a difference of medians) with its interval over ``n`` runs."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    n: int = 0

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def significant(self) -> bool:
        """The interval excludes zero (False without an interval)."""
        return self.has_interval and (self.lo > 0 or self.hi < 0)

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2 if self.has_interval else math.nan


def _clean(values: Iterable[Any]) -> np.ndarray:
    x = np.array([float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)],
                 dtype=np.float64)
    return x[np.isfinite(x)]


def _boot_medians(x: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    return np.median(x[idx], axis=1)


def _interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    samples = samples[np.isfinite(samples)]
    if not len(samples):
        return math.nan, math.nan
    a = (1 - confidence) / 2
    lo, hi = np.quantile(samples, [a, 1 - a])
    return float(lo), float(hi)


def median_ci(values: Iterable[Any], confidence: float = CONFIDENCE, n_boot: int = BOOTSTRAP,
              seed: int = SEED) -> Estimate:
    """The median of ``values`` with a bootstrap percentile interval (none for fewer than 2 values)."""
    x = _clean(values)
    if not len(x):
        return Estimate(math.nan)
    med = float(np.median(x))
    if len(x) < 2:
        return Estimate(med, n=1)
    lo, hi = _interval(_boot_medians(x, np.random.default_rng(seed), n_boot), confidence)
    return Estimate(med, min(lo, med), max(hi, med), len(x))


def _two_groups(values: Iterable[Any], base: Iterable[Any], fn: Any, confidence: float, n_boot: int,
                seed: int) -> Estimate:
    x, b = _clean(values), _clean(base)
    if not len(x) or not len(b):
        return Estimate(math.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        point = float(fn(np.median(x), np.median(b)))
        if len(x) < 2 and len(b) < 2:
            return Estimate(point, n=min(len(x), len(b)))
        rng = np.random.default_rng(seed)
        boots = fn(_boot_medians(x, rng, n_boot), _boot_medians(b, rng, n_boot))
    lo, hi = _interval(np.asarray(boots, dtype=np.float64), confidence)
    if math.isfinite(point) and math.isfinite(lo):
        lo, hi = min(lo, point), max(hi, point)
    return Estimate(point, lo, hi, min(len(x), len(b)))


def overhead_ci(values: Iterable[Any], base: Iterable[Any], confidence: float = CONFIDENCE,
                n_boot: int = BOOTSTRAP, seed: int = SEED) -> Estimate:
    """Percent of ``base``'s median that ``values``' median does not reach, with its interval."""
    return _two_groups(values, base, lambda v, b: 100.0 * (1.0 - v / b), confidence, n_boot, seed)


def diff_ci(values: Iterable[Any], base: Iterable[Any], confidence: float = CONFIDENCE,
            n_boot: int = BOOTSTRAP, seed: int = SEED) -> Estimate:
    """``median(values) − median(base)`` with its interval."""
    return _two_groups(values, base, lambda v, b: v - b, confidence, n_boot, seed)


def ratio_ci(values: Iterable[Any], base: Iterable[Any], confidence: float = CONFIDENCE,
             n_boot: int = BOOTSTRAP, seed: int = SEED) -> Estimate:
    """``median(values) / median(base)`` with its interval (e.g. how many times faster)."""
    return _two_groups(values, base, lambda v, b: v / b, confidence, n_boot, seed)


def mean_sd(values: Iterable[Any]) -> tuple[float, float, int]:
    """(mean, sample standard deviation, n); nan where undefined."""
    x = _clean(values)
    if not len(x):
        return math.nan, math.nan, 0
    return float(np.mean(x)), float(np.std(x, ddof=1)) if len(x) > 1 else math.nan, len(x)


#: Student's t, two-sided 95 %, by degrees of freedom 1..30 (beyond: the normal's 1.96 within 2 %)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def mean_ci(values: Iterable[Any]) -> tuple[float, float]:
    """(mean, half-width of its 95 % Student-t interval) of independent trials (a simulator's seeded
    trials: means, not medians, are what they average); half-width nan with fewer than two."""
    mean, sd, n = mean_sd(values)
    if n < 2:
        return mean, math.nan
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    return mean, t * sd / math.sqrt(n)


def fmt_estimate(e: Estimate, spec: str) -> str:
    """``12.3 [11.0, 13.5]`` (a single run: ``12.3``; nothing known: ``—``)."""
    if not math.isfinite(e.value):
        return DASH
    if not e.has_interval:
        return format(e.value, spec)
    return f"{e.value:{spec}} [{e.lo:{spec}}, {e.hi:{spec}}]"


def fmt_diff(e: Estimate, spec: str) -> str:
    """A difference: ``+3.1 [+1.0, +5.2]`` when significant, ``n.s. [-1.2, +3.4]`` when the interval
    includes zero; one run each (no interval): the signed number; exactly 0 in every run: ``0``."""
    if not math.isfinite(e.value):
        return DASH
    if not e.has_interval:
        return f"{e.value:+{spec}}"
    if e.lo == e.hi == e.value == 0:  # every resample the same: no difference at all
        return format(0.0, spec)
    span = f"[{e.lo:+{spec}}, {e.hi:+{spec}}]"
    return f"{e.value:+{spec}} {span}" if e.significant else f"n.s. {span}"


def group_values(rows: Sequence[Any], attr: str) -> list[Any]:
    """``getattr(row, attr)`` of every row (None where missing)."""
    return [getattr(r, attr, None) for r in rows]
