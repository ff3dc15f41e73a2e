"""The data-source interface the trainers read from, and the in-memory source for real data.

Owns ``Batch`` (one mini-batch of samples), the ``DataSource`` protocol shared by
``SyntheticCriteo`` and ``ArraySource``, and ``ArraySource`` itself.

Invariants:

* ``Batch.dense`` is ``float32[n, n_dense]``, ``Batch.ids`` is ``int64[n, n_tables]``
  with ``0 <= ids[:, t] < card_t``, ``Batch.labels`` is ``float32[n]`` of 0/1.
* ``batch(start, count)`` is a pure function of ``(start, count)``: sample ``i`` of
  the result is global sample ``start + i``, so ``batch(s, n)`` equals the
  concatenation of ``batch(s + i, 1)``; a trainer reading ``(step, rank)`` can
  compute its range without coordination.
* ``eval_batch(count)`` never overlaps the training samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Batch", "DataSource", "ArraySource"]


@dataclass(frozen=True)
class Batch:
    """One mini-batch: dense features, categorical ids per table, 0/1 labels."""

    dense: np.ndarray  # float32[n, n_dense]
    ids: np.ndarray  # int64[n, n_tables]
    labels: np.ndarray  # float32[n]

    def __post_init__(self) -> None:
        n = self.labels.shape[0]
        if self.dense.ndim != 2 or self.ids.ndim != 2 or self.labels.ndim != 1:
            raise ValueError("Batch: dense and ids must be 2-D, labels 1-D")
        if self.dense.shape[0] != n or self.ids.shape[0] != n:
            raise ValueError(
                f"Batch: row counts differ (dense {self.dense.shape[0]}, "
                f"ids {self.ids.shape[0]}, labels {n})"
            )

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_tables(self) -> int:
        return int(self.ids.shape[1])

    @property
    def n_dense(self) -> int:
        return int(self.dense.shape[1])

    def take(self, index: np.ndarray) -> Batch:
        """The samples at ``index`` (fancy indexing, copies)."""
        return Batch(self.dense[index], self.ids[index], self.labels[index])

    @staticmethod
    def concat(parts: list[Batch]) -> Batch:
        return Batch(
            np.concatenate([p.dense for p in parts]),
            np.concatenate([p.ids for p in parts]),
            np.concatenate([p.labels for p in parts]),
        )


class DataSource(Protocol):
    """What a trainer needs from a data source."""

    def batch(self, start: int, count: int) -> Batch: ...

    def eval_batch(self, count: int) -> Batch: ...

    def teacher_auc(self, count: int) -> float: ...


class ArraySource:
    """A data source over samples held in memory (real Criteo data).

    The last ``eval_fraction`` of the samples (in file order) is the held-out set;
    the rest is the training part, read cyclically: global sample ``g`` is
    training sample ``g mod n_train``.
    """

    def __init__(self, batch: Batch, eval_fraction: float = 0.1) -> None:
        if not 0.0 < eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        n = len(batch)
        n_eval = int(round(n * eval_fraction))
        n_train = n - n_eval
        if n_eval < 1 or n_train < 1:
            raise ValueError(
                f"ArraySource: {n} samples cannot be split with eval_fraction={eval_fraction}"
            )
        self.data = batch
        self.n_train = n_train
        self.n_eval = n_eval
        self.n_tables = batch.n_tables
        self.n_dense = batch.n_dense

    def batch(self, start: int, count: int) -> Batch:
        """Training samples ``start .. start+count-1``, wrapping around the training part."""
        if start < 0 or count < 0:
            raise ValueError("start and count must be non-negative")
        idx = (start + np.arange(count, dtype=np.int64)) % self.n_train
        return self.data.take(idx)

    def eval_batch(self, count: int) -> Batch:
        """The first ``min(count, n_eval)`` samples of the held-out part."""
        m = min(int(count), self.n_eval)
        idx = np.arange(self.n_train, self.n_train + m, dtype=np.int64)
        return self.data.take(idx)

    def teacher_auc(self, count: int) -> float:
        """Unknown for real data."""
        return float("nan")
