"""The checkpoint kit's options a strategy other than ``ckpt`` relies on (``checkpointing.kit``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mpiec.launch.resolve import load_config
from mpiec.layout import TRAINER, Slot
from mpiec.strategies.api.base import RecoveryPlan, Scope
from mpiec.strategies.api.compose import compose_layout
from mpiec.strategies.checkpointing.kit import MICROS, CheckpointKit, RestorerPart, SchedulePart, WriterPart
from mpiec.strategies.ckpt import FullCheckpoint


class Loader:
    """A ``Restorer`` stand-in: counts the restores."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def restore(self, plan: RecoveryPlan, step: int) -> bool:
        self.calls.append(step)
        return True


def test_a_rollback_only_restorer_abstains_outside_a_rollback():
    loader = Loader()
    part = RestorerPart(loader, rollback_only=True)  # type: ignore[arg-type]
    assert part.restore(RecoveryPlan(Scope.COMMITTED), 4, True) is None and loader.calls == []
    assert part.restore(RecoveryPlan(Scope.ROLLBACK), 4, False) is True and loader.calls == [4]


def test_a_fallback_kit_is_ckpt_under_its_own_keys_and_records_the_config_asked_for():
    cfg = load_config("tiny", strategy="ecrm")
    kit = CheckpointKit.fallback(cfg, {"interval": 7}, records=True)
    assert kit.cfg.strategy.name == "ckpt" and kit.params.interval == 7 and kit.records is kit.cfg
    assert kit.header_fields() == FullCheckpoint(kit.cfg).header_fields()
    quiet = CheckpointKit.fallback(cfg, {"interval": 7}, records=False, part_time=None)
    assert quiet.records is None and quiet.header_fields() == {"schedule": (("checkpoint", 1),)}


class Env:
    def __init__(self, cfg: Any, tmp: Path) -> None:
        self.cfg, self.slot, self.n_trainers = cfg, Slot(TRAINER, 0), cfg.layout.trainers
        self.events: list[tuple[str, int]] = []

    def now(self) -> float:
        return 0.0

    def event(self, kind: str, step: int, detail: str = "", at: float | None = None) -> None:
        self.events.append((kind, step))


def test_without_a_part_time_the_schedule_observes_no_write_time_and_the_writers_pack_none(tmp_path):
    cfg = load_config("tiny", strategy="ckpt", sets=["strategy.interval=3"])
    kit = CheckpointKit(cfg, FullCheckpoint(cfg).params, part_time=None)
    layout = compose_layout([kit.header_fields()])
    env = Env(cfg, tmp_path)
    schedule = SchedulePart(env, kit_schedule(kit, env), None, "sync full checkpoint")  # type: ignore[arg-type]
    schedule.header = layout.view("schedule")
    word = schedule.header.pack(**schedule.header_word(2))
    schedule.after_step(2, np.array([word, 0, 0, 0]))
    assert env.events == [("checkpoint_start", 2)] and schedule.schedule.t_save == 0
    writer = WriterPart(None, None, reports=True)  # type: ignore[arg-type]
    assert writer.header_fields() == {} and writer.header_word(2) is None
    assert WriterPart(None, MICROS, reports=True).header_fields() == {"writer": (("part_us", 40),)}  # type: ignore[arg-type]


def kit_schedule(kit: CheckpointKit, env: Env) -> Any:
    from mpiec.strategies.checkpointing import Schedule

    return Schedule.from_config(kit.cfg, kit.interval, kit.params.first, env.now)
