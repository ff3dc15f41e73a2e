"""Where a run's checkpoints live and what their parts are called, for every checkpoint component.

Every agent of a checkpointing strategy opens its own ``CheckpointStore`` on the run's checkpoint
root (``open_store``); the coordinator additionally claims the root once at start-up
(``claim_root``). A full checkpoint has one part per server (``server-<i>``, its shard) and one
for the dense replica (``trainer``, written by trainer 0).

Invariants: every store of a run points at the same root (``--resume DIR`` when resuming, else
``rules.checkpoint_root``) with the same storage model; a new run never writes into a root that
holds another run's committed checkpoints (``claim_root`` refuses it, as the launcher does).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mpiec.storage.checkpoint import CheckpointStore, check_unused
from mpiec.strategies.checkpointing.rules import checkpoint_root, storage_of

if TYPE_CHECKING:
    from mpiec.strategies.api.env import RankEnv

TRAINER_PART = "trainer"  # the dense replica, written by trainer 0


def server_part(index: int) -> str:
    """The part server ``index`` writes: its shard."""
    return f"server-{index}"


def full_parts(servers: int) -> set[str]:
    """Every part of a full checkpoint of a run with ``servers`` servers."""
    return {TRAINER_PART} | {server_part(i) for i in range(servers)}


def open_store(env: RankEnv, bandwidth_mb_s: float = 0.0, *, directory: str) -> CheckpointStore:
    """This rank's store on the run's checkpoint root (``--resume DIR`` when the run resumes, else
    ``directory``: the strategy's typed ``strategy.dir``, see ``checkpoint_root``)."""
    root = Path(env.resume_from) if env.resume_from else checkpoint_root(directory, env.out_path)
    return CheckpointStore(root, float(bandwidth_mb_s), storage=storage_of(env.cfg))


def claim_root(store: CheckpointStore, resuming: bool) -> None:
    """Coordinator, once at start-up: refuse a root holding another run's checkpoints (as the
    launcher does: this covers ranks started by srun or job scripts), then create it."""
    if not resuming:
        check_unused(store.root)
    store.root.mkdir(parents=True, exist_ok=True)


__all__ = ["TRAINER_PART", "claim_root", "full_parts", "open_store", "server_part"]
