"""A holder's parity rows and what it needs to move them between versions (no MPI).

Owns, on every rank that holds parity members (every server under rotated
placement, the dedicated parity ranks otherwise):

* ``array``: the parity rows, one per parity slot (``stripes.parity_stripes``):
  uint8 ``[n, row_bytes]`` for the GF codes, ``[n, row_bytes / 4]`` of the
  accumulator dtype for ``sum``;
* ``applied[src]``: the last step whose deltas from data server ``src`` are in
  ``array`` -- the *version* of each source's contribution;
* ``chain[src]``: the versions that contribution went through, oldest first
  (``chain[src][-1] == applied[src]``). With ``strategy.parity_every = 1`` they
  are consecutive steps; with ``N > 1`` they are the *commit* steps (a commit
  carries the accumulated delta of the steps since the previous one), so
  taking a commit out lands on the version before it, not one step earlier;
* the incoming deltas of the versions (steps or commits) of the last ``keep``
  steps, per source, so a contribution can be taken out again (recovery undoes steps that
  the survivors roll back).

Invariant (parity consistency): for the GF codes, ``array`` equals the encoding
of every source's data rows at version ``applied[src]``, byte for byte; for
``sum`` it equals it up to rounding.

A delta row travels with one int64 *word*: ``(parity slot << 12) | (i << 8) | j``
(parity member ``i`` of the stripe, data member ``j``): ``k <= 256``, ``r <= 16``.
"""

from __future__ import annotations

import numpy as np

from mpiec.kernels.codes import Code, GFCode, SumCode
from mpiec.kernels.parity import WORD, gf_apply_wire_unchecked, gf_apply_words, wire_words

CHAIN = 64  # versions a holder remembers per source (undo never goes back further than a few)


def pack_words(slots: np.ndarray, i: int | np.ndarray, j: np.ndarray) -> np.ndarray:
    return (np.asarray(slots, dtype=np.int64) << 12) | (np.asarray(i, dtype=np.int64) << 8) | np.asarray(j)


def unpack_words(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return words >> 12, (words >> 8) & 0xF, words & 0xFF


def payload_width(code: Code, row_bytes: int) -> int:
    """Bytes of one delta (and one parity) row on the wire and in memory."""
    if isinstance(code, SumCode):
        return row_bytes // 4 * code.dtype.itemsize
    return row_bytes


class Deltas:
    """Delta rows of one step at one holder: the source of each row, its word, its bytes.

    Built either from those three arrays, or (``from_wire``) from the receive buffer of the
    exchange as it arrived -- rows ``[int64 word | payload]`` grouped by source, ``counts`` rows
    per source -- without copying it: the holder applies the buffer directly, and the per-row
    arrays are only made (once) if a recovery needs to pick one source's rows out again."""

    def __init__(self, src: np.ndarray, words: np.ndarray, payload: np.ndarray) -> None:
        self._src: np.ndarray | None = src
        self._words: np.ndarray | None = words
        self.payload: np.ndarray = payload  # uint8 [n, width]
        self.wire: np.ndarray | None = None  # uint8 [n, 8 + width] when built from the wire
        self.counts: np.ndarray | None = None  # int64 [sources]: rows per source, with ``wire``

    @classmethod
    def from_wire(cls, wire: np.ndarray, counts: np.ndarray) -> Deltas:
        d = cls.__new__(cls)
        d._src = d._words = None
        d.wire, d.counts, d.payload = wire, counts, wire[:, WORD:]
        return d

    @property
    def src(self) -> np.ndarray:  # int64 [n]
        if self._src is None:
            assert self.counts is not None
            self._src = np.repeat(np.arange(self.counts.size, dtype=np.int64), self.counts)
        return self._src

    @property
    def words(self) -> np.ndarray:  # int64 [n]
        if self._words is None:
            assert self.wire is not None
            self._words = wire_words(self.wire)
        return self._words

    def sources(self) -> np.ndarray:
        """The sources with at least one row here."""
        if self.counts is not None:
            return np.flatnonzero(self.counts)
        return np.unique(self.src)

    @property
    def nbytes(self) -> int:
        if self.wire is not None:
            return int(self.wire.nbytes + self.counts.nbytes) if self.counts is not None else self.wire.nbytes
        return self.src.nbytes + self.words.nbytes + self.payload.nbytes


class ParityStore:
    def __init__(self, code: Code, stripes: np.ndarray, members: np.ndarray, row_bytes: int,
                 n_sources: int, keep: int = 3) -> None:
        self.code = code
        self.stripes, self.members = stripes, members  # (stripe, parity index) of each slot
        self.row_bytes = row_bytes
        self.width = payload_width(code, row_bytes)
        self.sum = isinstance(code, SumCode)
        # GF codes: the (r, k) coefficients the apply kernels read (XOR is its own inverse: an undo
        # applies the same rows again); None for ``sum``
        self.coef = code.parity_rows if isinstance(code, GFCode) else None
        if self.sum:
            self.array = np.zeros((stripes.size, row_bytes // 4), dtype=code.dtype)
        else:
            self.array = np.zeros((stripes.size, row_bytes), dtype=np.uint8)
        self.applied = np.full(n_sources, -1, dtype=np.int64)
        self.chain: list[list[int]] = [[-1] for _ in range(n_sources)]
        self.keep = keep
        self.incoming: dict[int, list[Deltas]] = {}
        self.dropped = -(2**62)  # the newest version whose incoming deltas are no longer kept
        self.peak_retained = 0

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def retained_bytes(self) -> int:
        return sum(d.nbytes for parts in self.incoming.values() for d in parts)

    def as_bytes(self, slots: np.ndarray) -> np.ndarray:
        """Parity rows ``slots`` as uint8 ``[n, width]`` (what ``fetch`` sends)."""
        rows = self.array[slots]
        return np.ascontiguousarray(rows).view(np.uint8).reshape(len(slots), self.width)

    def load_bytes(self, slots: np.ndarray, rows: np.ndarray) -> None:
        self.array[slots] = rows.view(self.array.dtype).reshape(len(slots), -1)

    # -- deltas ----------------------------------------------------------------
    def _mac(self, words: np.ndarray, payload: np.ndarray, negate: bool) -> None:
        if not words.size:
            return
        if self.coef is not None:  # GF: one kernel pass in arrival order (addition commutes)
            gf_apply_words(self.array, words, payload, self.coef)
            return
        # ``sum``: grouped by (i, j) in this order, as it always was (float addition does not commute)
        slots, ii, jj = unpack_words(words)
        key = ii * 256 + jj
        order = np.argsort(key, kind="stable")
        key_sorted = key[order]
        bounds = np.flatnonzero(np.diff(key_sorted)) + 1
        for part in np.split(order, bounds):
            i, j = int(ii[part[0]]), int(jj[part[0]])
            d = np.ascontiguousarray(payload[part])
            if self.sum:
                d = d.view(self.array.dtype).reshape(part.size, -1)
                if negate:
                    d = -d
            self.code.update(self.array, j, slots[part], d, parity_index=i)

    def _advance(self, src: int, step: int) -> None:
        """Source ``src``'s contribution is at version ``step`` (no-op unless newer)."""
        if step > self.applied[src]:
            self.applied[src] = step
            chain = self.chain[src]
            chain.append(int(step))
            if len(chain) > CHAIN:
                del chain[0]

    def apply(self, step: int, deltas: Deltas, every_source: bool = False) -> None:
        """Add the deltas of ``step`` (every source's, or some sources' during recovery);
        ``every_source``: every source is at ``step`` now, also those that sent nothing.

        The per-step path (a wire buffer, every source) does its bookkeeping in a few Python
        operations: in a run the holder comes back to a core whose caches other ranks used, where
        each one costs microseconds (measured: ~45 us of a 110 us apply, before this)."""
        wire = deltas.wire
        if wire is not None and self.coef is not None:
            if wire.shape[0]:  # the receive buffer as it arrived (the pipeline made it: rows of 8 + width)
                gf_apply_wire_unchecked(self.array, wire, self.coef)
        else:
            self._mac(deltas.words, deltas.payload, negate=False)
        if every_source:
            for s, version in enumerate(self.applied.tolist()):
                if step > version:  # ``_advance`` of every source, in Python ints
                    chain = self.chain[s]
                    chain.append(step)
                    if len(chain) > CHAIN:
                        del chain[0]
                    self.applied[s] = step
        else:
            for s in deltas.sources():
                self._advance(int(s), step)
        incoming = self.incoming
        parts = incoming.get(step)
        if parts is None:
            incoming[step] = [deltas]
            newest = max(incoming)
            for old in [s for s in incoming if s <= newest - self.keep]:  # the last ``keep`` steps
                self.dropped = max(self.dropped, old)
                del incoming[old]
        else:
            parts.append(deltas)
        retained = self.retained_bytes()
        if retained > self.peak_retained:
            self.peak_retained = retained

    def mark_applied(self, sources: np.ndarray, step: int) -> None:
        """Sources that sent nothing this step (or commit) are at ``step`` too."""
        for s in np.asarray(sources).reshape(-1):
            self._advance(int(s), step)

    def set_version(self, sources: np.ndarray | list[int], step: int) -> None:
        """Recovery: the contributions of ``sources`` are at ``step`` now (they were brought there)."""
        for source in np.asarray(sources, dtype=np.int64).reshape(-1):
            s = int(source)
            chain = [v for v in self.chain[s] if v < step]
            self.chain[s] = [*chain[-(CHAIN - 1):], int(step)]
            self.applied[s] = step

    def reset_versions(self, step: int) -> None:
        """Every contribution re-encoded at ``step`` (initial encode, rollback): no history."""
        self.applied[:] = step
        self.chain = [[int(step)] for _ in range(self.applied.size)]

    def undo(self, src: int, target: int) -> None:
        """Take source ``src``'s contributions newer than ``target`` out again, version by version.

        Ends at the newest version ``<= target`` of its chain: ``target`` itself with
        ``parity_every = 1``; with batched commits, the commit before the first one undone
        (``applied[src]`` says where it landed)."""
        chain = self.chain[src]
        while self.applied[src] > target:
            step = chain[-1]
            parts = self.incoming.get(step)
            if len(chain) < 2 or (parts is None and step <= self.dropped):
                raise RuntimeError(f"parity holder: the deltas of step {step} needed to undo it "
                                   f"are no longer kept (keep = {self.keep})")
            kept = []
            for d in parts or []:
                mine = d.src == src
                if mine.any():
                    self._mac(d.words[mine], d.payload[mine], negate=True)
                if not mine.all():
                    kept.append(Deltas(d.src[~mine], d.words[~mine], d.payload[~mine]))
            if parts is not None:
                self.incoming[step] = kept
            chain.pop()
            self.applied[src] = chain[-1]

    def drop_after(self, step: int) -> None:
        for s in [s for s in self.incoming if s > step]:
            del self.incoming[s]

    # -- verification -------------------------------------------------------------
    def mismatches(self, slots: np.ndarray, expected: np.ndarray) -> int:
        """Rows among ``slots`` whose parity differs from ``expected`` (fresh encodings)."""
        have = self.array[slots]
        if self.sum:
            exp = expected.view(self.array.dtype).reshape(have.shape)
            return int(np.count_nonzero(~np.isclose(have, exp, rtol=1e-4, atol=1e-5).all(axis=1)))
        return int(np.count_nonzero((have != expected.reshape(have.shape)).any(axis=1)))
