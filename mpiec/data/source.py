"""The data-source interface the trainers read from, and the in-memory source for real data.

Owns ``Batch`` (one mini-batch of samples), the ``DataSource`` protocol shared by
``SyntheticCriteo`` and ``ArraySource``, and ``ArraySource`` itself.

Invariants:

* ``Batch.dense`` is ``float32[n, n_dense]``, ``Batch.ids`` is ``int64[n, n_ids]``,
  ``Batch.labels`` is ``float32[n]`` of 0/1. One-hot (``bags`` None): ``n_ids = n_tables``
  and column ``t`` is table ``t``. Multi-hot (``bags[t]`` ids per sample of table ``t``, as
  MLPerf DLRMv2's ``data.multi_hot``): ``n_ids = sum(bags)``, table ``t``'s bag is the
  columns ``bounds[t] .. bounds[t+1] - 1`` (``bag_bounds``), a fixed column -> table map
  (``column_tables``); every id of table ``t`` is in ``[0, card_t)``.
* ``batch(start, count)`` is a pure function of ``(start, count)``: sample ``i`` of
  the result is global sample ``start + i``, so ``batch(s, n)`` equals the
  concatenation of ``batch(s + i, 1)``; a trainer reading ``(step, rank)`` can
  compute its range without coordination.
* ``eval_batch(count)`` never overlaps the training samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Batch", "DataSource", "ArraySource", "bag_bounds", "column_tables"]


def bag_bounds(bags: Sequence[int]) -> np.ndarray:
    """``int64[T + 1]``: table ``t``'s ids are the columns ``bounds[t] .. bounds[t+1] - 1``."""
    out = np.zeros(len(bags) + 1, dtype=np.int64)
    np.cumsum(np.asarray(bags, dtype=np.int64), out=out[1:])
    return out


def column_tables(bags: Sequence[int]) -> np.ndarray:
    """``int64[sum(bags)]``: the table of each column of ``Batch.ids``."""
    return np.repeat(np.arange(len(bags), dtype=np.int64), np.asarray(bags, dtype=np.int64))


@dataclass(frozen=True)
class Batch:
    """One mini-batch: dense features, categorical ids (one or a bag per table), 0/1 labels."""

    dense: np.ndarray  # float32[n, n_dense]
    ids: np.ndarray  # int64[n, n_ids]: n_tables (one-hot) or sum(bags)
    labels: np.ndarray  # float32[n]
    bags: tuple[int, ...] | None = None  # ids per sample of each table; None = one-hot

    def __post_init__(self) -> None:
        n = self.labels.shape[0]
        if self.dense.ndim != 2 or self.ids.ndim != 2 or self.labels.ndim != 1:
            raise ValueError("Batch: dense and ids must be 2-D, labels 1-D")
        if self.bags is not None and sum(self.bags) != self.ids.shape[1]:
            raise ValueError(f"Batch: {self.ids.shape[1]} id columns, bags {self.bags} need "
                             f"{sum(self.bags)}")
        if self.dense.shape[0] != n or self.ids.shape[0] != n:
            raise ValueError(
                f"Batch: row counts differ (dense {self.dense.shape[0]}, "
                f"ids {self.ids.shape[0]}, labels {n})"
            )

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_tables(self) -> int:
        return len(self.bags) if self.bags is not None else int(self.ids.shape[1])

    @property
    def bounds(self) -> np.ndarray:
        """``bag_bounds`` of the batch (one-hot: ``0 .. n_tables``)."""
        return bag_bounds(self.bags if self.bags is not None else [1] * self.n_tables)

    @property
    def n_dense(self) -> int:
        return int(self.dense.shape[1])

    def take(self, index: np.ndarray) -> Batch:
        """The samples at ``index`` (fancy indexing, copies)."""
        return Batch(self.dense[index], self.ids[index], self.labels[index], self.bags)

    @staticmethod
    def concat(parts: list[Batch]) -> Batch:
        return Batch(
            np.concatenate([p.dense for p in parts]),
            np.concatenate([p.ids for p in parts]),
            np.concatenate([p.labels for p in parts]),
            parts[0].bags if parts else None,
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
