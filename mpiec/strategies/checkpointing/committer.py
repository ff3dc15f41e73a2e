"""Committing checkpoints on the coordinator: the manifest once every part is written.

``ManifestCommitter`` collects the writers' ``("part", ...)`` and ``("failed", ...)`` messages
(``writer.PartWriter``) per step, and once every expected part of a step answered either commits
its manifest (``CheckpointStore.commit``), prunes the checkpoints no restore needs any more and
keeps the step's row of the result's ``checkpoints`` dataset, or, if a part failed, abandons the
step (removes what the other parts wrote).

Hooks (callables given at construction), so a strategy can extend the commit without inheriting:
``meta(step)`` adds to the manifest's ``meta``; ``classify(step, parts)`` gives the (kind, bits)
of a committed checkpoint for its dataset row (default ``("full", 32)``); ``needs(kept)`` names
the older steps the kept checkpoints still need (e.g. a differential checkpoint's baseline),
which the prune keeps too.

Invariants:

* a checkpoint is committed only when every expected part is written in the current epoch: a
  message of an epoch a failure ended is dropped (its checkpoint may never complete), and so are
  the parts collected so far when a failure starts a recovery (``drop_pending``);
* a commit that fails is reported (``checkpoint_fail``) and leaves no row; a failed prune after
  a commit is only reported (``prune_fail``): the commit stands;
* after a rollback, the checkpoints newer than the restored one are deleted (``drop_newer``):
  the re-executed steps write them again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from mpiec.storage.checkpoint import CheckpointError, CheckpointStore, PartInfo

if TYPE_CHECKING:
    from mpiec.strategies.api.env import RankEnv


class ManifestCommitter:
    """The coordinator's side of the checkpoints: ``expected`` parts per step (a set, or a function
    giving the set now: an elastic recovery changes the number of server parts), ``keep`` kept."""

    def __init__(self, env: RankEnv, store: CheckpointStore,
                 expected: set[str] | Callable[[], set[str]], keep: int, *,
                 meta: Callable[[int], dict[str, Any]] | None = None,
                 classify: Callable[[int, dict[str, PartInfo]], tuple[str, int]] | None = None,
                 needs: Callable[[list[int]], Iterable[int]] | None = None, config: Any = None) -> None:
        self.env = env
        self.config = config  # the config the manifests record (None: the rank's)
        self.store = store
        self._expected = expected
        self.keep = int(keep)
        self.meta = meta
        self.classify = classify
        self.needs = needs
        self.pending: dict[int, dict[str, PartInfo]] = {}
        self.failed_parts: dict[int, set[str]] = {}  # parts whose write failed, by step
        self.part_figures: dict[int, dict[str, dict[str, Any]]] = {}  # step -> part -> rows, stall, total
        #: the ``checkpoints`` dataset: (step, kind, bytes, seconds, bits, rows, stall_s) per commit
        self.rows: list[tuple[Any, ...]] = []
        self.committed_bytes = 0

    @property
    def expected(self) -> set[str]:
        """The parts a checkpoint needs now."""
        return set(self._expected() if callable(self._expected) else self._expected)

    def on_message(self, payload: Any) -> bool:
        """A writer's message; False if it is not one (left to the strategy)."""
        if not isinstance(payload, tuple) or len(payload) != 5 or payload[0] not in ("part", "failed"):
            return False
        kind, step, epoch, info, figures = payload
        if epoch != self.env.epoch:
            return True  # a part of an epoch a failure ended: its checkpoint may never complete
        if kind == "failed":
            self.failed_parts.setdefault(step, set()).add(info["part"])
        else:
            self.pending.setdefault(step, {})[info["part"]] = PartInfo.from_dict(info)
            self.part_figures.setdefault(step, {})[info["part"]] = figures
        parts = self.pending.get(step, {})
        failed = self.failed_parts.get(step, set())
        if set(parts) | failed == self.expected:
            self.complete(step, epoch, parts, failed)
        return True

    def complete(self, step: int, epoch: int, parts: dict[str, PartInfo], failed: set[str]) -> None:
        """Every part of ``step`` answered: commit it, or abandon it if a part failed."""
        self.pending.pop(step, None)
        self.failed_parts.pop(step, None)
        figs = list(self.part_figures.pop(step, {}).values())
        if failed:  # reclaim the written parts' space
            try:
                self.store.abandon(step)
            except CheckpointError as exc:
                self.env.event("checkpoint_fail", step, detail=str(exc)[:250])
            return
        cfg = self.config if self.config is not None else self.env.cfg
        meta = {"config": cfg.to_dict(), "servers": self.env.n_servers, "epoch": epoch,
                "result": str(self.env.out_path), **(self.meta(step) if self.meta else {})}
        try:
            self.store.commit(step, parts, meta)
        except CheckpointError as exc:
            self.env.event("checkpoint_fail", step, detail=str(exc)[:250])
            return
        try:
            self.prune()
        except CheckpointError as exc:
            self.env.event("prune_fail", step, detail=str(exc)[:250])
        nbytes = sum(p.bytes for p in parts.values())
        slowest = max(p.seconds for p in parts.values())
        self.committed_bytes += nbytes
        kind, bits = self.classify(step, parts) if self.classify else ("full", 32)
        self.rows.append((step, kind, nbytes, max(f["total_s"] for f in figs), bits,
                          sum(f["rows"] for f in figs), max(f["stall_s"] for f in figs)))
        self.env.event("checkpoint_end", step, detail=f"{nbytes} bytes, slowest part {slowest:.3f} s")

    def prune(self) -> None:
        """After a commit: delete the checkpoints no restore needs any more."""
        if self.needs is None:
            self.store.prune(self.keep)
            return
        kept = self.store.complete_steps()[:self.keep]
        self.store.prune(self.keep, also_keep=set(self.needs(kept)))

    def drop_pending(self) -> None:
        """Forget the parts of checkpoints not committed yet (a failure ended their epoch)."""
        self.pending.clear()
        self.failed_parts.clear()
        self.part_figures.clear()

    def drop_newer(self, step: int) -> None:
        """After a rollback to ``step``: delete the newer checkpoints (corrupt or unusable; the
        re-executed steps write them again)."""
        for s in self.store.complete_steps():
            if s > step:
                shutil.rmtree(self.store.step_dir(s), ignore_errors=True)

    def critical_s(self) -> float:
        """The checkpoints' stall on the training's critical path: the trainers wait for the
        slowest writer of each checkpoint (the parts of writers that died later included)."""
        return float(sum(row[6] for row in self.rows))

    def figures(self) -> dict[str, Any]:
        return {"checkpoint_critical_s": self.critical_s(), "checkpoints": len(self.rows),
                "checkpoint_bytes": self.committed_bytes}


__all__ = ["ManifestCommitter"]
