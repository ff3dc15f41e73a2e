"""Per-step shard digests: where a recovered run first left the failure-free one (opt-in, a debug aid).

Owns ``MPIEC_SHARD_DIGESTS`` (unset: off, and nothing here runs beyond one test per step):

* ``record:DIR`` — after every step a server completes, it writes one 64-bit hash per row of its
  shard, ``DIR/server<i>/step<s>.npy``, and once the rows' global ids, ``DIR/server<i>/rows.npy``;
* ``compare:DIR`` — a server hashes its shard at the same points, and also when training resumes
  after a recovery (its state is then the restored step's), and compares with what a failure-free
  run recorded in ``DIR``. The first difference on a rank becomes one event ``diverged`` (step,
  shard, how many rows, the first global row ids) and one line on stderr; later ones are not
  reported (the first is where to look).

``mpiec.contract`` records in a strategy's failure-free run and compares in its run under kills.

Invariants: the row hash is exact for any one changed element (a sum of odd multiples of the
rows' 32-bit words, mod 2**64: a difference in one word never cancels); rows are matched by
global id, so a recovered shard with another placement is compared on the rows both hold; only
servers' shards are hashed (a trainer's dense replica is checked by the final ``param_checksum``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from mpiec.layout import SERVER

if TYPE_CHECKING:
    from mpiec.roles.context import RankContext
    from mpiec.roles.driver import StateRole

ENV = "MPIEC_SHARD_DIGESTS"
SHOW_ROWS = 8  # global row ids named in a report


def parse(value: str) -> tuple[str, Path] | None:
    """(mode, directory) of an ``MPIEC_SHARD_DIGESTS`` value; None when off."""
    if not value:
        return None
    mode, sep, where = value.partition(":")
    if mode not in ("record", "compare") or not sep or not where:
        raise ValueError(f"{ENV}={value!r}: expected record:DIR or compare:DIR")
    return mode, Path(where)


_SETTING = parse(os.environ.get(ENV, ""))
_reported: set[int] = set()  # first ranks that reported a divergence (one report per process)


def row_hashes(table: np.ndarray) -> np.ndarray:
    """One uint64 per row of a float32 ``table``: exact for any one changed element."""
    words = np.ascontiguousarray(table).view(np.uint32).reshape(table.shape[0], -1).astype(np.uint64)
    keys = np.random.default_rng(0x5EED).integers(1, 2**63, size=words.shape[1], dtype=np.uint64)
    keys |= np.uint64(1)  # odd: a changed word changes the sum
    with np.errstate(over="ignore"):
        return ((words + np.uint64(1)) * keys).sum(axis=1, dtype=np.uint64)


def differing_rows(rows: np.ndarray, hashes: np.ndarray, ref_rows: np.ndarray,
                   ref_hashes: np.ndarray) -> tuple[np.ndarray, int]:
    """(global ids of the rows whose hashes differ, sorted; rows compared): by global id, padding
    (negative ids) left out."""
    real, ref_real = rows >= 0, ref_rows >= 0
    common, mine, ref = np.intersect1d(rows[real], ref_rows[ref_real], assume_unique=True,
                                       return_indices=True)
    differ = hashes[real][mine] != ref_hashes[ref_real][ref]
    return common[differ], int(common.size)


def check(ctx: RankContext, role: object, step: int, resumed: bool = False) -> None:
    """At a point where a server's shard holds ``step``: record its hashes or compare them."""
    if _SETTING is None or step < 0 or ctx.slot.role != SERVER:
        return
    mode, root = _SETTING
    state = cast("StateRole", role).state()
    table, rows = state["table"], state["global_rows"]
    where = root / f"server{ctx.slot.index}"
    if mode == "record":
        where.mkdir(parents=True, exist_ok=True)
        if not (where / "rows.npy").exists():
            np.save(where / "rows.npy", rows)
        np.save(where / f"step{step}.npy", row_hashes(table))
        return
    ref = where / f"step{step}.npy"
    if ctx.first_rank in _reported or not ref.exists():
        return
    differ, compared = differing_rows(rows, row_hashes(table), np.load(where / "rows.npy"), np.load(ref))
    if differ.size:
        _reported.add(ctx.first_rank)
        ids = ",".join(str(int(r)) for r in differ[:SHOW_ROWS]) + (",..." if differ.size > SHOW_ROWS else "")
        point = "as training resumed after a recovery" if resumed else "after the step"
        detail = (f"server {ctx.slot.index} at step {step} ({point}): {differ.size} of {compared} rows "
                  f"differ from the failure-free run; global rows {ids}")
        ctx.event("diverged", step, ctx.rank, detail=detail[:256])
        print(f"mpiec: diverged: {detail}", file=sys.stderr, flush=True)


__all__ = ["ENV", "check", "differing_rows", "parse", "row_hashes"]
