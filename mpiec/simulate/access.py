"""How many distinct embedding rows a job touches: the access model behind parity and diff sizes.

Owns ``distinct_rows(job, steps)``: the expected number of distinct rows looked up (and so updated)
in ``steps`` steps, from the job's tables, bags and power law — the same law the synthetic data
draws from (``mpiec.data.synthetic``: table ``t``'s rank ``x ~ x^-s`` on ``[1, card_t + 1)``,
``s = data.zipf_exponent``). A row of probability ``p`` is touched at least once in ``L`` lookups
with probability ``1 − (1 − p)^L ≈ 1 − exp(−L p)``; the sum runs over log-spaced rank buckets
(exact for the hottest ranks, the density at the bucket's geometric middle beyond), so a table of
40 M rows costs a few hundred terms.

Why not a constant "rows per lookup": under a power law the hot rows repeat, so the distinct
rows grow much more slowly than the lookups — a constant measured on small tables and batches
overstates a cluster's parity deltas and diffs by orders of magnitude (and a uniform model says
every row changes within minutes, where Check-N-Run measured ~26 % in 30 minutes). Real data is
not the synthetic law: ``calibrate`` measures rows updated (ecrm's parity rows, cnr's diff sizes)
against this model and keeps the ratio (``StrategyCosts.access_ratio``).

Invariants: 0 <= distinct_rows <= rows; non-decreasing in ``steps``; a job without its tables'
shape (``Job.cards`` empty) is taken as uniform over all rows.
"""

from __future__ import annotations

import math

import numpy as np

from .job import Job

__all__ = ["changed_fraction", "distinct_rows"]

_EXACT = 64  # the hottest ranks summed one by one
_BUCKETS = 256  # log-spaced buckets over the rest of a table


def _table_distinct(card: int, lookups: float, s: float) -> float:
    if card <= 0 or lookups <= 0:
        return 0.0
    if s <= 0:  # uniform
        return card * -math.expm1(lookups * math.log1p(-1.0 / card)) if card > 1 else 1.0
    n1 = card + 1.0

    def cdf(x: np.ndarray) -> np.ndarray:  # of x^-s on [1, card + 1)
        if abs(1.0 - s) < 1e-9:
            return np.log(x) / math.log(n1)
        return (x ** (1.0 - s) - 1.0) / (n1 ** (1.0 - s) - 1.0)

    exact = min(card, _EXACT)
    ranks = np.arange(exact, dtype=np.float64)
    p = cdf(ranks + 2.0) - cdf(ranks + 1.0)  # row r holds x in [r + 1, r + 2)
    total = float(np.sum(-np.expm1(lookups * np.log1p(-np.minimum(p, 1.0 - 1e-16)))))
    if card > exact:
        edges = np.unique(np.round(np.geomspace(exact, card, _BUCKETS + 1)))
        lo, hi = edges[:-1], edges[1:]
        count = hi - lo
        mass = cdf(hi + 1.0) - cdf(lo + 1.0)  # probability of the bucket's rows together
        per_row = mass / count
        total += float(np.sum(count * -np.expm1(-lookups * per_row)))
    return min(float(card), total)


def distinct_rows(job: Job, steps: float) -> float:
    """Expected distinct rows the job touches in ``steps`` steps (every table)."""
    if steps <= 0:
        return 0.0
    if not job.cards:
        lookups = job.lookups_per_step * steps
        return job.rows * -math.expm1(lookups * math.log1p(-1.0 / max(2, job.rows)))
    bags = job.bags or (1,) * len(job.cards)
    return sum(_table_distinct(c, job.global_batch * b * steps, job.zipf) for c, b in zip(job.cards, bags,
                                                                                         strict=True))


def changed_fraction(job: Job, steps: float, ratio: float = 1.0) -> float:
    """Fraction of the rows changed within ``steps`` steps, the model's count times ``ratio``
    (measured over modelled, from the calibration), at most 1."""
    return min(1.0, ratio * distinct_rows(job, steps) / max(1, job.rows))
