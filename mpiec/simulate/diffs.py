"""Check-N-Run's checkpoints at scale: how many bytes its differential chain writes and reads.

Owns the size model of ``cnr``'s checkpoints in ``mpiec simulate``, from the rows changed per
interval rather than constant ratios:

* **rows changed**: the distinct rows touched in ``n`` steps (``access.changed_fraction``: the
  tables' power law, hot rows repeating), times ``access_ratio``, the measured diffs' sizes over
  that model's (``calibrate``; 1 where no ``cnr`` diff was measured);
* **diff policies** (``mpiec.strategies.cnr``): ``one-shot`` writes the rows changed since the
  baseline and restores baseline + newest diff; ``consecutive`` writes the last interval's rows and
  restores the baseline and every diff since; ``intermittent`` is one-shot with a new baseline when
  the suite's rule (``checkpointing.chain.intermittent_rebaseline``, called, not copied) says so;
* **quantization**: a saved row is ``dim · bits / 8`` bytes of weights plus its id, two fp32
  range figures and its optimizer state, against a full part's ``row_bytes + 8``; ``bits`` from
  the suite's rule (``cnr.bits_for_restores``) on the restores the job expects, or given.

``chain_ratios`` returns the mean bytes written per checkpoint and read per restore as fractions of
a full part, over the checkpoints of the job: the figures ``policies`` prices writes and restores
with. Invariants: 0 < write ratio; the restore ratio >= the quantized baseline's; both finite.
"""

from __future__ import annotations

import math

from mpiec.strategies.checkpointing.chain import intermittent_rebaseline

from .access import changed_fraction
from .job import Job

__all__ = ["DIFF_POLICIES", "chain_ratios", "quantized_ratio"]

DIFF_POLICIES = ("one-shot", "consecutive", "intermittent")
#: a quantized row carries its int64 id and two fp32 range figures (scale, offset) besides its weights
_ROW_OVERHEAD_BYTES = 8 + 8
#: checkpoints the chain is followed over (its mean settles long before)
_MAX_CHAIN = 10_000
_EXACT_K = 16  # intervals since the baseline evaluated exactly; beyond, a geometric grid
_GRID = 1.25


def quantized_ratio(job: Job, bits: int) -> float:
    """A saved row's bytes over a full part's (``row_bytes + 8``); 1 without quantization (32 bits)."""
    if bits >= 32:
        return 1.0
    state = job.row_bytes - 4 * job.dim  # the optimizer state stays fp32
    return (job.dim * bits / 8 + state + _ROW_OVERHEAD_BYTES) / (job.row_bytes + 8)


def chain_ratios(job: Job, access_ratio: float, interval_steps: int, policy: str,
                 bits: int) -> tuple[float, float]:
    """(mean bytes written per checkpoint, mean bytes read per restore), fractions of a full part."""
    if policy not in DIFF_POLICIES:
        raise ValueError(f"cnr diff policy must be one of {DIFF_POLICIES}, got {policy!r}")
    count = max(1, min(_MAX_CHAIN, job.steps // max(1, interval_steps)))
    memo: dict[int, float] = {}

    def exact(k: int) -> float:
        if k not in memo:
            memo[k] = changed_fraction(job, k * interval_steps, access_ratio)
        return memo[k]

    def since(k: int) -> float:
        """Fraction changed in ``k`` intervals. The access model costs milliseconds, so beyond
        ``_EXACT_K`` it is evaluated on a grid of ratio ``_GRID`` and interpolated in log k (it is
        smooth and increasing there): a chain of 10,000 checkpoints costs ~50 evaluations."""
        if k <= _EXACT_K:
            return exact(k)
        m = math.floor(math.log(k / _EXACT_K) / math.log(_GRID))
        lo = max(_EXACT_K, math.floor(_EXACT_K * _GRID ** m))
        hi = max(lo + 1, math.ceil(_EXACT_K * _GRID ** (m + 1)))
        a, b = exact(lo), exact(hi)
        w = math.log(k / lo) / math.log(hi / lo)
        return min(1.0, a + w * (b - a))

    step_frac = since(1)
    writes, reads = [], []
    since_base: list[float] = []  # sizes of the diffs since the baseline (fractions of a full part)
    for i in range(count):
        if i == 0:
            size, since_base = 1.0, []
        elif policy == "consecutive":
            size = step_frac
            since_base.append(size)
        else:
            size = since(len(since_base) + 1)
            if policy == "intermittent" and intermittent_rebaseline([*since_base, size]):
                size, since_base = 1.0, []
            else:
                since_base.append(size)
        writes.append(size)
        if policy == "consecutive":
            reads.append(1.0 + sum(since_base))
        else:
            reads.append(1.0 + (since_base[-1] if since_base else 0.0))
    q = quantized_ratio(job, bits)
    return q * sum(writes) / len(writes), q * sum(reads) / len(reads)
