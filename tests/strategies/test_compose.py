"""Agents composed of parts (``strategies.compose``) and header fields by namespace (``header``):
the declared order, the summary merge, how restore / rebuild / plan answers combine, the layout."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mpiec.layout import SERVER, TRAINER, Slot
from mpiec.strategies.api import compose
from mpiec.strategies.api.base import Failure, RecoveryPlan, Scope, Strategy
from mpiec.strategies.api.compose import DEFAULTS, Part, compose_layout
from mpiec.strategies.api.header import HeaderLayout


class Recorder(Part):
    """A part that notes every hook it is called for in a shared ``log``."""

    def __init__(self, name: str, log: list[tuple[str, str]], **answers: Any) -> None:
        self.name, self.log, self.answers = name, log, answers

    def before_step(self, step: int) -> None:
        self.log.append((self.name, "before_step"))

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        self.log.append((self.name, "after_step"))

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self.log.append((self.name, "on_recovered"))

    def summary(self) -> dict[str, Any]:
        self.log.append((self.name, "summary"))
        return self.answers.get("summary", {})


class Answers(Part):
    """A part whose decisions are given."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        for hook, value in answers.items():
            setattr(self, hook, (lambda v: lambda *a: v)(value))


class Fields(Part):
    namespace = "a"
    fields = (("flag", 1), ("count", 10))

    def header_word(self, step: int) -> dict[str, int]:
        return {"flag": step % 2, "count": step}


class Other(Part):
    namespace = "b"
    fields = (("flag", 1),)

    def header_word(self, step: int) -> dict[str, int] | None:
        return {"flag": 1} if step == 3 else None


class Toy(Strategy):
    name = "toy"
    summary_rules = {"n": "sum", "peak": "max", "who": "first"}

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        return compose_layout_decl(Fields(), Other())


def compose_layout_decl(*parts: Part) -> dict[str, tuple[tuple[str, int], ...]]:
    out: dict[str, tuple[tuple[str, int], ...]] = {}
    for p in parts:
        out.update(p.header_fields())
    return out


def env(role: str = TRAINER) -> Any:
    cfg = SimpleNamespace(strategy=SimpleNamespace(name="toy", params={}))
    return SimpleNamespace(cfg=cfg, slot=Slot(role, 0))


def toy() -> Toy:
    t = Toy.__new__(Toy)  # no config needed: the declarations only
    t.cfg = None  # type: ignore[assignment]
    return t


def test_parts_are_called_in_the_declared_order_and_only_for_hooks_they_define():
    log: list[tuple[str, str]] = []
    agent = compose.trainer(toy(), env(), Recorder("first", log), Answers(), Recorder("second", log))
    agent.before_step(1)
    agent.after_step(1, None)
    agent.on_recovered(RecoveryPlan(Scope.COMMITTED))
    assert log == [("first", "before_step"), ("second", "before_step"), ("first", "after_step"),
                   ("second", "after_step"), ("first", "on_recovered"), ("second", "on_recovered")]
    assert agent.answers()["restore"].startswith("default")  # no part restores: the documented default


def test_summaries_merge_by_the_strategys_rules_not_by_overwriting():
    log: list[tuple[str, str]] = []
    parts = [Recorder("a", log, summary={"n": 2, "peak": 5, "who": "a"}),
             Recorder("b", log, summary={"n": 3, "peak": 4, "who": "b"})]
    assert compose.server(toy(), env(SERVER), *parts).summary() == {"n": 5, "peak": 5, "who": "a"}
    with pytest.raises(KeyError, match="no merge rule"):
        compose.server(toy(), env(SERVER), Recorder("c", log, summary={"unknown": 1})).summary()


@pytest.mark.parametrize("answers, expected", [
    ([True, True], True), ([True, False], False), ([None, True], True), ([None, None], False),
    ([False, True], False), ([], False),
])
def test_restore_is_true_when_some_part_loaded_and_none_refused(answers, expected):
    parts = [Answers(restore=a) for a in answers]
    agent = compose.server(toy(), env(SERVER), *parts)
    assert agent.restore(RecoveryPlan(Scope.ROLLBACK), 3, False) is expected


def test_restore_stops_at_the_first_refusal():
    log: list[str] = []

    class Loader(Part):
        def __init__(self, name: str, ok: bool) -> None:
            self.name, self.ok = name, ok

        def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
            log.append(self.name)
            return self.ok

    agent = compose.trainer(toy(), env(), Loader("a", False), Loader("b", True))
    assert not agent.restore(RecoveryPlan(Scope.ROLLBACK), 3, False) and log == ["a"]


def test_rebuild_asks_every_part_even_after_a_failure_collectives_match():
    log: list[str] = []

    class Rebuilder(Part):
        def __init__(self, name: str, ok: bool) -> None:
            self.name, self.ok = name, ok

        def rebuild(self, plan: RecoveryPlan) -> bool:
            log.append(self.name)
            return self.ok

    agent = compose.server(toy(), env(SERVER), Rebuilder("a", False), Rebuilder("b", True))
    assert not agent.rebuild(RecoveryPlan(Scope.REPLACED)) and log == ["a", "b"]
    assert compose.spare(toy(), env("spare")).rebuild(RecoveryPlan(Scope.REPLACED))  # none: True


def test_the_first_part_that_decides_plans_and_none_falls_through_to_the_next_then_the_default():
    failure = Failure(step=3, committed=2, dead=[Slot(SERVER, 0)], survivors=[])
    mine = RecoveryPlan(Scope.COMMITTED, reason="mine")
    theirs = RecoveryPlan(Scope.ROLLBACK, reason="theirs")
    coord = compose.coordinator(toy(), env("monitor"), Answers(plan=None), Answers(plan=mine),
                                Answers(plan=theirs))
    assert coord.plan(failure) is mine
    assert compose.coordinator(toy(), env("monitor"), Answers(plan=None)).plan(failure).aborts
    both = compose.coordinator(toy(), env("monitor"), Answers(on_grow=True), Answers(on_grow=False))
    assert not both.on_grow(mine) and not compose.coordinator(toy(), env("monitor")).on_grow(mine)
    rows = compose.coordinator(toy(), env("monitor"), Answers(checkpoint_rows=[(1,)]),
                               Answers(checkpoint_rows=[(2,)]))
    assert rows.checkpoint_rows() == [(1,), (2,)] and rows.resume_steps() == []
    assert set(DEFAULTS) <= set(coord.answers()) and coord.answers()["plan"] == "Answers, Answers, Answers"


def test_the_layout_is_composed_of_every_parts_namespace_and_each_part_packs_its_own():
    strategy = toy()
    layout = strategy.header()
    assert list(layout.fields) == ["a.flag", "a.count", "b.flag"]
    agent = compose.trainer(strategy, env(), Fields(), Other())
    word = agent.header_word(3)
    assert [layout.get(word, f) for f in layout.fields] == [1, 3, 1]
    assert layout.get(agent.header_word(4), "b.flag") == 0
    view = layout.view("a")
    assert view.get(word, "count") == 3 and view.get(word, "b.flag") == 1  # any field reads
    with pytest.raises(KeyError):
        view.pack(**{"b.flag": 1})  # another namespace's field is not packed through this view
    with pytest.raises(KeyError, match="no header namespace"):
        layout.view("").pack(flag=1)


def test_a_namespace_or_field_declared_twice_and_a_part_outside_the_layout_are_refused():
    with pytest.raises(ValueError, match="declared twice"):
        compose_layout([{"a": (("x", 1),)}, {"a": (("y", 1),)}])
    with pytest.raises(ValueError, match="duplicate"):
        HeaderLayout.compose({"a": (("x", 1), ("x", 2))})
    with pytest.raises(ValueError, match="with a dot"):
        HeaderLayout.compose({"a.b": (("x", 1),)})
    with pytest.raises(ValueError, match="63"):
        HeaderLayout.compose({"a": (("x", 40),), "b": (("y", 30),)})
    with pytest.raises(ValueError, match="not in the strategy's layout"):
        compose.trainer(Strategy.__new__(Strategy), env(), Fields())  # declares no field
