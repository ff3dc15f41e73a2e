"""What the statistics module's intervals really deliver, by simulating benches through it.

Owns the simulated bench and the coverage figures of ``stats.analyse_table`` (the function the
tables use): the share of 95 % intervals that hold the true value, the share of "significant"
differences between variants that do not differ (A/A), and the power to find a given difference.

The simulated bench (``simulate``): ``variants`` variants (the first the baseline) run once per round
for ``rounds`` rounds; every run of round ``r`` shares the round's drift; each run adds its own noise
of standard deviation ``NOISE_SD`` (relative to the level for ratios, absolute for differences), drawn
from a normal, a skewed (centred lognormal) or a heavy-tailed (Student's t with 3 df) distribution,
each scaled to unit variance. ``ratio``: ``y = μ_v·D_r·(1 + σ·ε)`` with ``D_r = exp(DRIFT_SD·z)``;
``diff``: ``y = μ_v + DRIFT_SD·z_r·μ_b + σ·μ_b·ε``. The true comparison is ``μ_v/μ_b`` (ratio) or
``μ_v − μ_b`` (diff): the noise of two variants has one distribution, so their paired log ratios
(differences) are symmetric about it. The true level is the median of a run's distribution, computed
from ``TRUTH_DRAWS`` draws.

Invariants: seeded (the same call gives the same figures); no I/O. ``python -m mpiec.analysis.coverage``
prints the coverage table of docs/measurement.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .stats import Scale, analyse_table

__all__ = ["NOISES", "Coverage", "simulate", "table"]

NOISES = ("normal", "lognormal", "t3")
NOISE_SD = 0.05
DRIFT_SD = 0.10
TRUTH_DRAWS = 400_000
BASE = 100.0


def _noise(kind: str, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Unit-variance, zero-mean noise of the given kind."""
    if kind == "normal":
        return rng.standard_normal(size)
    if kind == "lognormal":  # skewed: exp(N(0, 0.5²)), centred and scaled
        s = 0.5
        x = np.exp(s * rng.standard_normal(size))
        return (x - math.exp(s * s / 2)) / math.sqrt((math.exp(s * s) - 1) * math.exp(s * s))
    if kind == "t3":  # heavy tails: Student's t with 3 df has variance 3
        return rng.standard_t(3, size) / math.sqrt(3.0)
    raise ValueError(f"noise {kind!r}: expected one of {', '.join(NOISES)}")


def _draw(kind: str, scale: Scale, mu: np.ndarray, rounds: int, rng: np.random.Generator) -> np.ndarray:
    """One bench: values [variant, round]."""
    eps = _noise(kind, rng, (len(mu), rounds))
    z = rng.standard_normal(rounds)
    if scale == "ratio":
        return mu[:, None] * np.exp(DRIFT_SD * z)[None, :] * (1.0 + NOISE_SD * eps)
    return mu[:, None] + DRIFT_SD * BASE * z[None, :] + NOISE_SD * BASE * eps


@lru_cache(maxsize=16)
def _median_offset(kind: str, scale: Scale) -> float:
    """The median of one run with μ = 1 (ratio: its factor) or μ = 0 (diff: its offset)."""
    rng = np.random.default_rng(20261128)
    one = _draw(kind, scale, np.array([1.0 if scale == "ratio" else 0.0]), TRUTH_DRAWS, rng)
    return float(np.median(one))


@dataclass(frozen=True)
class Coverage:
    """What ``simulate`` measured. ``level_ci95``: share of the levels printed as 95 % intervals (nan
    where none is: too few runs); ``*_coverage`` nan where nothing was measured."""

    rounds: int
    variants: int
    noise: str
    scale: str
    level_coverage: float  # 95 % intervals of the levels holding the true median
    level_ci95: bool  # whether the levels got 95 % intervals at all (n ≥ 6)
    range_coverage: float  # ranges (fewer runs) holding the true median
    comparison_coverage: float  # paired 95 % intervals holding the true ratio / difference
    aa_significant: float  # share of "significant" between variants that do not differ
    power: float  # share of "significant" for a difference of ``effect_sds`` noise standard deviations
    reps: int


def simulate(rounds: int, variants: int, noise: str, scale: Scale = "ratio", reps: int = 500,
             effect_sds: float = 3.0, seed: int = 1, power: bool = True) -> Coverage:
    """``reps`` simulated benches per question, analysed by ``stats.analyse_table`` (``power``: also
    the power question, nan otherwise)."""
    rng = np.random.default_rng(seed)
    names = ["base", *(f"v{i}" for i in range(1, variants))]
    # coverage: distinct true levels, 0 % to −(variants−1)·2 %
    mu = BASE * (1.0 - 0.02 * np.arange(variants))
    offset = _median_offset(noise, scale)
    true_level = mu * offset if scale == "ratio" else mu + offset
    true_cmp = mu / BASE if scale == "ratio" else mu - BASE
    lev_hit = lev_n = rng_hit = rng_n = cmp_hit = cmp_n = 0
    for _ in range(reps):
        y = _draw(noise, scale, mu, rounds, rng)
        out = analyse_table({n: list(row) for n, row in zip(names, y, strict=True)}, "base", scale)
        for i, n in enumerate(names):
            lv = out[n].level
            if lv.is_ci95:
                lev_n += 1
                lev_hit += lv.lo <= true_level[i] <= lv.hi
            elif lv.has_interval:
                rng_n += 1
                rng_hit += lv.lo <= true_level[i] <= lv.hi
            c = out[n].vs_base
            if c is not None and c.is_ci95:
                cmp_n += 1
                cmp_hit += c.lo <= true_cmp[i] <= c.hi
    # A/A: no variant differs; power: every contender differs by effect_sds noise standard deviations
    same = np.full(variants, BASE)
    shifted = np.array([BASE, *([BASE * (1.0 - effect_sds * NOISE_SD)] * (variants - 1))])
    aa = _significant_share(noise, scale, same, names, rounds, reps, rng)
    found = _significant_share(noise, scale, shifted, names, rounds, reps, rng) if power else math.nan
    return Coverage(rounds, variants, noise, scale, lev_hit / lev_n if lev_n else math.nan, lev_n > 0,
                    rng_hit / rng_n if rng_n else math.nan, cmp_hit / cmp_n if cmp_n else math.nan, aa, found,
                    reps)


def _significant_share(noise: str, scale: Scale, mu: np.ndarray, names: list[str], rounds: int, reps: int,
                       rng: np.random.Generator) -> float:
    hits = total = 0
    for _ in range(reps):
        y = _draw(noise, scale, mu, rounds, rng)
        out = analyse_table({n: list(row) for n, row in zip(names, y, strict=True)}, "base", scale)
        for n in names[1:]:
            total += 1
            hits += out[n].significant
    return hits / total if total else math.nan


def table(rounds: tuple[int, ...] = (2, 3, 5, 8), variants: tuple[int, ...] = (2, 9), reps: int = 500,
          scales: tuple[Scale, ...] = ("ratio", "diff")) -> str:
    """The coverage table (Markdown) over the given designs, every noise."""
    head = ("| rounds | variants | noise | scale | levels: 95 % interval covers | levels: range covers | "
            "paired 95 % interval covers | A/A significant | power at 3 sd |")
    lines = [head, "|" + "---|" * 9]
    for r in rounds:
        for v in variants:
            for noise in NOISES:
                for scale in scales:
                    c = simulate(r, v, noise, scale, reps)
                    lev = f"{100 * c.level_coverage:.1f} %" if c.level_ci95 else "— (none at this n)"
                    rng = f"{100 * c.range_coverage:.1f} %" if math.isfinite(c.range_coverage) else "—"
                    lines.append(f"| {r} | {v} | {noise} | {scale} | {lev} | {rng} | "
                                 f"{100 * c.comparison_coverage:.1f} % | {100 * c.aa_significant:.1f} % | "
                                 f"{100 * c.power:.1f} % |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - the docs' table
    import sys

    print(table(reps=int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
