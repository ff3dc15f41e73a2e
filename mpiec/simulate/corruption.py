"""Silent corruption at cluster scale: how likely a job's final model carries a corrupted embedding
row that its strategy never saw (``mpiec simulate --corruption``).

Owns the corruption inputs and the table. The published figures are *prevalences*, not rates:
about one machine in a thousand has a defect that corrupts data silently (Meta: Dixit et al.,
"Detecting silent data corruptions in the wild", arXiv:2203.08989, 2022, "around 1 in 1000
devices"; Google: Hochschild et al., "Cores that don't count", HotOS 2021, "a few mercurial cores
per several thousand machines"). How often a defective machine then corrupts the embedding shard
it holds is not published: it is an assumed **band** (``--sdc-per-defective-h LO,HI``), and every
figure is given at both ends of it.

Model: each node holding a shard is defective with probability ``prevalence``, independently; a
defective node corrupts a row of its shard at ``rate`` per hour of the job (Poisson), each
corruption a flip the strategy sees as its declared ``CorruptionCover`` says (``rows_within``:
detected; ``rows_repaired``: located and given back). The job is ``hours`` of failure-free work
(time lost to failures would add exposure: left out, the figure is a lower bound). A corruption that is
not repaired is in the final model (a later update moves the row, it does not undo the flip). So
``P(final model carries one) = 1 − (1 − prevalence · (1 − exp(−rate · hours · q)))^nodes`` with
``q`` the share of corruptions the strategy does not repair (0 or 1 here).

Invariants: no study branches on a strategy's name: what a strategy sees is its declaration under
the job's config; a verdict that differs between the band's two ends says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpiec.errors import MpiecError
from mpiec.strategies.api.cover import CorruptionCover

#: machines with a silent-corruption defect, per machine (the published prevalence; see above)
PREVALENCE = 1e-3
#: assumed: corruptions a defective machine leaves in its shard per hour, from once per 1,000 hours
#: to once an hour (not published)
PER_DEFECTIVE_H = (1e-3, 1.0)
#: a final model carries a corruption with a probability below this: "clean"; above CORRUPTED: "corrupted"
CLEAN, CORRUPTED = 0.05, 0.5


@dataclass(frozen=True)
class CorruptionRow:
    """One strategy at one job size, at the two ends of the assumed band."""

    strategy: str
    nodes: int  # nodes holding a shard
    expected: tuple[float, float]  # corruptions per job
    detected: bool
    repaired: bool
    p_carried: tuple[float, float]  # P(the final model keeps a corrupted row)
    how: str

    @property
    def verdict(self) -> str:
        ends = [_class(p) for p in self.p_carried]
        return ends[0] if ends[0] == ends[1] else f"flips inside the band: {ends[0]} .. {ends[1]}"


def _class(p: float) -> str:
    return "clean" if p < CLEAN else "corrupted" if p > CORRUPTED else "uncertain"


def parse_band(text: str | None) -> tuple[float, float]:
    """``--sdc-per-defective-h``: ``LO,HI`` (or one value for both) corruptions per defective-node hour."""
    if not text:
        return PER_DEFECTIVE_H
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise MpiecError(f"--sdc-per-defective-h: expected LO,HI per hour, got '{text}'") from None
    if len(values) == 1:
        values *= 2
    lo, hi = values if len(values) == 2 else (math.nan, math.nan)
    if not (0 < lo <= hi <= 1e6):
        raise MpiecError(f"--sdc-per-defective-h: expected 0 < LO <= HI <= 1e6 per hour, got '{text}'")
    return lo, hi


def check_prevalence(p: float) -> float:
    """``--sdc-prevalence``: a probability in (0, 1]."""
    if not 0 < p <= 1:
        raise MpiecError(f"--sdc-prevalence: expected a share of machines in (0, 1], got {p:g}")
    return p


def corruption_row(strategy: str, cover: CorruptionCover, nodes: int, hours: float, prevalence: float,
                   band: tuple[float, float]) -> CorruptionRow:
    """What ``nodes`` shard-holding nodes over ``hours`` leave in the final model under ``cover``."""
    kept = 0.0 if cover.rows_repaired else 1.0

    def carried(rate: float) -> float:
        one = prevalence * -math.expm1(-rate * hours * kept)  # this node leaves one, or more
        return -math.expm1(nodes * math.log1p(-one)) if one < 1 else 1.0

    expected = (nodes * prevalence * band[0] * hours, nodes * prevalence * band[1] * hours)
    return CorruptionRow(strategy, nodes, expected, cover.rows_within is not None, cover.rows_repaired,
                         (carried(band[0]), carried(band[1])), cover.how)


def format_rows(rows: list[CorruptionRow], prevalence: float, band: tuple[float, float], hours: float) -> str:
    """The table ``mpiec simulate --corruption`` prints, with its assumptions."""
    head = ["nodes", "strategy", "corruptions per job", "detected", "repaired",
            "P(model keeps a corrupted row)", "verdict"]
    body = [[f"{r.nodes:,}", r.strategy, f"{r.expected[0]:.3g} .. {r.expected[1]:.3g}",
             "yes" if r.detected else "no", "yes" if r.repaired else "no",
             f"{100 * r.p_carried[0]:.3g} % .. {100 * r.p_carried[1]:.3g} %", r.verdict] for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["silent corruption (embedding rows at rest on the shard-holding nodes)",
             "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)) for x in body]
    lines.append(f"prevalence {prevalence:g} defective machines per machine (published: Meta, "
                 f"arXiv:2203.08989, 'around 1 in 1000'; Google, HotOS 2021); a defective machine corrupts "
                 f"its shard {band[0]:g} .. {band[1]:g} times per hour (ASSUMED, not published: "
                 f"--sdc-per-defective-h), i.e. {prevalence * band[0]:.3g} .. {prevalence * band[1]:.3g} per "
                 f"node-hour; {hours:g} h of failure-free work (a lower bound: time lost to failures adds "
                 f"exposure); each range is the band's two ends; detected/repaired: the strategy's "
                 f"declaration (Strategy.corruption_cover) under the job's config; a repaired row is given "
                 f"back, but what steps read of it before its check stays in the model")
    return "\n".join(lines)


__all__ = ["CLEAN", "CORRUPTED", "PER_DEFECTIVE_H", "PREVALENCE", "CorruptionRow", "check_prevalence",
           "corruption_row", "format_rows", "parse_band"]
