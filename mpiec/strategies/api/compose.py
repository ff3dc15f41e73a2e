"""Agents composed of parts: how a strategy reuses behaviour without forwarding hooks by hand.

A *part* (``Part``) is an object that implements any subset of one role's hooks (the names and
signatures of ``strategies.agents``: ``after_step``, ``restore``, ``plan``, ``summary`` ...). A
strategy's factory method returns a *composite* of its parts for the role
(``compose.trainer(strategy, env, *parts)``, ``server``, ``parity``, ``coordinator``,
``spare``): the runtime sees an ordinary agent and the composite calls the parts. The checkpoint
kit (``strategies.checkpointing.kit``) is a set of such parts; a strategy adds its own beside
them, in the order it declares. Design (after torchrec's one-seam ``EmbeddingSharding`` and
torchft's transport/state split, no code taken):

* **order** — parts are called in the order given, for every hook they implement; a part that
  does not define a hook is not called for it (the ``Part`` base defines no hook);
* **notifications** (``before_step``, ``after_step``, ``background``, ``after_push``, ``on_pull``,
  ``overlap``, ``after_apply``, ``on_recovered``, ``on_message``): every implementing part, in
  order (a coordinator part ignores a message that is not its own);
* **header** — every part that packs header fields declares a ``namespace`` and its fields
  (``fields``); the strategy's layout is composed of every part's declarations
  (``Strategy.header_fields``, ``HeaderLayout.compose``), the same on every rank, and the
  composite hands each part its ``HeaderView`` (``part.header``) before the first hook. A part's
  ``header_word(step)`` returns its own fields' values (a mapping of short names); the composite
  packs them into one word. Reading any part's field is free (``header.get(word, "ns.field")``),
  packing another's is refused;
* **decisions** — one answer per hook, by a rule the composite states (``RULES``): ``restore``
  asks every implementing part in order; a part answers True (loaded), False (unusable: the
  composite stops and answers False) or None (not its scope: abstains); the answer is True when
  some part said True and none False, else False (the agents' default); ``rebuild`` calls
  every part (collective) and is True only if all are;
  ``plan``, ``on_no_spare``, ``on_shrink``, ``handover``, ``resume_steps``, ``redundancy``: the
  first part that answers something else than None decides (a part that does not decide returns None, so a
  strategy's own planner can leave a case to the kit's rollback planner); ``on_grow``: True
  only if every implementing part agrees, asked in order until one refuses (a later part, e.g.
  the kit's planner dropping the checkpoint in flight, only acts on a growth that happens);
  ``checkpoint_rows``: every part's rows, in order;
* **summary** — every part's ``summary()`` merged by the strategy's ``summary_rules``
  (``base.merge_summaries``): keys two parts share are combined by their rule, not overwritten;
* **explicit defaults** — where no part answers a decision, the agent's documented default
  applies (``DEFAULTS``: e.g. ``plan`` aborts, ``restore`` is False); ``Composite.answers()``
  says which part answers each hook or that the default does, so a contract test can show it.

Invariants: parts of one agent share components (a ``PartWriter``, a ``Restorer``) by being
given the same object at construction, never by reading each other's fields; state moves only
through the role's ``state()`` / ``load_state()``; a part is built for one role and one
epoch's agent (a replacement gets fresh parts, as it gets a fresh agent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mpiec.strategies.api.agents import Agent, Coordinator, ParityAgent, ServerAgent, StepAgent, TrainerAgent
from mpiec.strategies.api.header import HeaderLayout, HeaderView

if TYPE_CHECKING:
    from mpiec.layout import Slot
    from mpiec.strategies.api.base import Strategy
    from mpiec.strategies.api.cover import Redundancy
    from mpiec.strategies.api.env import RankEnv
    from mpiec.strategies.api.plan import Failure, RecoveryPlan, ServerShard

#: how the composite combines the parts' answers to a hook (see the module docstring)
RULES: dict[str, str] = {
    **{h: "each" for h in ("before_step", "after_step", "background", "after_push", "on_pull", "overlap",
                           "after_apply", "on_recovered", "on_message")},
    "header_word": "pack", "summary": "merge", "restore": "all-in-order, None abstains", "rebuild": "all",
    "on_grow": "all-in-order", "checkpoint_rows": "concat",
    **{h: "first-answer" for h in ("plan", "on_no_spare", "on_shrink", "handover", "resume_steps",
                                   "redundancy")},
}

#: what an agent does where no part answers a decision (the agents' documented defaults)
DEFAULTS: dict[str, str] = {
    "restore": "False: the state cannot be restored (the runtime tries the next candidate)",
    "rebuild": "True: nothing to rebuild",
    "plan": "abort: the strategy does not recover from failures",
    "on_no_spare": "abort: no spare left",
    "on_shrink": "abort: the strategy cannot restore rows onto fewer servers",
    "on_grow": "False: the servers are not grown back",
    "handover": "NotImplementedError: the strategy answered a shrink with a handover it cannot do",
    "resume_steps": "[]: nothing to resume from",
    "checkpoint_rows": "[]: no checkpoint rows",
    "header_word": "0: no header field",
    "summary": "{}: no figures",
    "redundancy": "None: no redundant rows kept in the server's memory",
}


class Part:
    """One piece of an agent: it defines any subset of its role's hooks (same names and
    signatures as ``strategies.agents``, except that a decision it does not take returns None
    and ``header_word`` returns its fields' values). ``namespace`` / ``fields``: the header
    fields it packs (short names, bits); ``header`` is its view, set by the composite."""

    namespace: ClassVar[str] = ""
    fields: ClassVar[tuple[tuple[str, int], ...]] = ()
    header: HeaderView

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """This part's namespace and fields (an instance may size them: ``CheckpointKit``)."""
        return {self.namespace: tuple(self.fields)} if self.namespace else {}


def compose_layout(declarations: Iterable[Mapping[str, Sequence[tuple[str, int]]]]) -> HeaderLayout:
    """One layout of several declarations (``Part.header_fields``, a kit's); a namespace declared by
    two of them is refused (``ValueError``): two parts never share a namespace."""
    merged: dict[str, Sequence[tuple[str, int]]] = {}
    for decl in declarations:
        for ns, own in decl.items():
            if ns in merged:
                raise ValueError(f"header namespace '{ns}' declared twice")
            merged[ns] = own
    return HeaderLayout.compose(merged)


def _defined(part: Any, hook: str) -> Callable[..., Any] | None:
    fn = getattr(part, hook, None)
    return fn if callable(fn) else None


class Composite:
    """The behaviour every composite agent shares: the parts, by hook, in order."""

    parts: tuple[Any, ...]

    def _init_parts(self, parts: Sequence[Any], rules: Mapping[str, str], layout: HeaderLayout) -> None:
        self.parts = tuple(parts)
        self.rules = dict(rules)
        self.layout = layout
        for part in self.parts:
            ns = getattr(part, "namespace", "")
            own = part.header_fields().get(ns, ()) if ns else ()
            if own and not all(f"{ns}.{name}" in layout.fields for name, _ in own):
                raise ValueError(f"part {type(part).__name__}: its header fields in '{ns}' are not in the "
                                 "strategy's layout (Strategy.header_fields)")
            part.header = layout.view(ns)  # no namespace: reads qualified fields, packs none
        self._hooks: dict[str, list[Callable[..., Any]]] = {}

    def hooks(self, hook: str) -> list[Callable[..., Any]]:
        """The parts' implementations of ``hook``, in order."""
        found = self._hooks.get(hook)
        if found is None:
            found = self._hooks[hook] = [fn for p in self.parts if (fn := _defined(p, hook)) is not None]
        return found

    def answers(self) -> dict[str, str]:
        """For every decision hook: the part class that answers it first, or its default."""
        out = {}
        for hook, default in DEFAULTS.items():
            who = [type(p).__name__ for p in self.parts if _defined(p, hook) is not None]
            out[hook] = ", ".join(who) if who else f"default — {default}"
        return out

    def _each(self, hook: str, *args: Any) -> None:
        for fn in self.hooks(hook):
            fn(*args)

    def _first(self, hook: str, *args: Any) -> Any:
        for fn in self.hooks(hook):
            answer = fn(*args)
            if answer is not None:
                return answer
        return None

    # -- Agent ------------------------------------------------------------------------------------
    def rebuild(self, plan: RecoveryPlan) -> bool:
        results = [bool(fn(plan)) for fn in self.hooks("rebuild")]  # every part: collective
        return all(results)

    def on_recovered(self, plan: RecoveryPlan) -> None:
        self._each("on_recovered", plan)

    def summary(self) -> dict[str, Any]:
        from mpiec.strategies.api.base import merge_summaries

        return merge_summaries(self.rules, [fn() for fn in self.hooks("summary")])


class _StepComposite(Composite):
    def before_step(self, step: int) -> None:
        self._each("before_step", step)

    def header_word(self, step: int) -> int:
        word = 0
        for part in self.parts:
            fn = _defined(part, "header_word")
            if fn is not None:
                values = fn(step)
                if values:
                    word |= part.header.pack(**values)
        return word

    def after_step(self, step: int, words: np.ndarray | None) -> None:
        self._each("after_step", step, words)

    def background(self, step: int) -> None:
        self._each("background", step)

    def restore(self, plan: RecoveryPlan, step: int, replaced: bool) -> bool:
        loaded = False
        for fn in self.hooks("restore"):
            answer = fn(plan, step, replaced)
            if answer is None:
                continue  # not this part's scope
            if not answer:
                return False  # unusable: the runtime tries the next candidate
            loaded = True
        return loaded

    def handover(self, plan: RecoveryPlan) -> ServerShard | None:
        hooks = self.hooks("handover")
        if not hooks:
            return StepAgent.handover(self, plan)  # type: ignore[arg-type]
        return self._first("handover", plan)


class ComposedTrainer(_StepComposite, TrainerAgent):
    def __init__(self, env: RankEnv, parts: Sequence[Any], rules: Mapping[str, str],
                 layout: HeaderLayout) -> None:
        TrainerAgent.__init__(self, env)
        self._init_parts(parts, rules, layout)

    def after_push(self, step: int, slots: np.ndarray, counts: np.ndarray, grads: np.ndarray) -> None:
        self._each("after_push", step, slots, counts, grads)


class ComposedServer(_StepComposite, ServerAgent):
    def __init__(self, env: RankEnv, parts: Sequence[Any], rules: Mapping[str, str],
                 layout: HeaderLayout) -> None:
        ServerAgent.__init__(self, env)
        self._init_parts(parts, rules, layout)

    def on_pull(self, step: int, slots: np.ndarray) -> None:
        self._each("on_pull", step, slots)

    def overlap(self, step: int) -> None:
        self._each("overlap", step)

    def after_apply(self, step: int, slots: np.ndarray, old: np.ndarray | None,
                    delta: np.ndarray | None, replayed: bool = False) -> None:
        for fn in self.hooks("after_apply"):
            fn(step, slots, old, delta, replayed)

    def redundancy(self) -> Redundancy | None:
        answer: Redundancy | None = self._first("redundancy")
        return answer


class ComposedParity(_StepComposite, ParityAgent):
    def __init__(self, env: RankEnv, parts: Sequence[Any], rules: Mapping[str, str],
                 layout: HeaderLayout) -> None:
        ParityAgent.__init__(self, env)
        self._init_parts(parts, rules, layout)

    def on_pull(self, step: int) -> None:  # type: ignore[override]
        self._each("on_pull", step)

    def overlap(self, step: int) -> None:
        self._each("overlap", step)


class ComposedSpare(Composite, Agent):
    def __init__(self, env: RankEnv, parts: Sequence[Any], rules: Mapping[str, str],
                 layout: HeaderLayout) -> None:
        Agent.__init__(self, env)
        self._init_parts(parts, rules, layout)


class ComposedCoordinator(Composite, Coordinator):
    def __init__(self, env: RankEnv, parts: Sequence[Any], rules: Mapping[str, str],
                 layout: HeaderLayout) -> None:
        Coordinator.__init__(self, env)
        self._init_parts(parts, rules, layout)

    def on_message(self, source: Slot, payload: Any) -> None:
        self._each("on_message", source, payload)

    def plan(self, failure: Failure) -> RecoveryPlan:
        answer = self._first("plan", failure)
        return answer if answer is not None else Coordinator.plan(self, failure)

    def on_no_spare(self, failure: Failure, slot: Slot, plan: RecoveryPlan) -> RecoveryPlan:
        answer = self._first("on_no_spare", failure, slot, plan)
        return answer if answer is not None else Coordinator.on_no_spare(self, failure, slot, plan)

    def on_shrink(self, failure: Failure, plan: RecoveryPlan) -> RecoveryPlan:
        answer = self._first("on_shrink", failure, plan)
        return answer if answer is not None else Coordinator.on_shrink(self, failure, plan)

    def on_grow(self, plan: RecoveryPlan) -> bool:
        hooks = self.hooks("on_grow")
        return bool(hooks) and all(bool(fn(plan)) for fn in hooks)  # stops at the first refusal

    def resume_steps(self) -> list[int]:
        answer = self._first("resume_steps")
        return list(answer) if answer is not None else []

    def checkpoint_rows(self) -> list[tuple[Any, ...]]:
        return [row for fn in self.hooks("checkpoint_rows") for row in fn()]


# -- the factory functions a strategy's role methods return ------------------------------------------
def _build(cls: type, strategy: Strategy, env: RankEnv, parts: Sequence[Any]) -> Any:
    return cls(env, [p for p in parts if p is not None], strategy.summary_rules, strategy.header())


def trainer(strategy: Strategy, env: RankEnv, *parts: Any) -> ComposedTrainer:
    """A trainer agent of ``parts`` (None entries are left out: a part only some trainers have)."""
    return _build(ComposedTrainer, strategy, env, parts)  # type: ignore[no-any-return]


def server(strategy: Strategy, env: RankEnv, *parts: Any) -> ComposedServer:
    return _build(ComposedServer, strategy, env, parts)  # type: ignore[no-any-return]


def parity(strategy: Strategy, env: RankEnv, *parts: Any) -> ComposedParity:
    return _build(ComposedParity, strategy, env, parts)  # type: ignore[no-any-return]


def spare(strategy: Strategy, env: RankEnv, *parts: Any) -> ComposedSpare:
    return _build(ComposedSpare, strategy, env, parts)  # type: ignore[no-any-return]


def coordinator(strategy: Strategy, env: RankEnv, *parts: Any) -> ComposedCoordinator:
    return _build(ComposedCoordinator, strategy, env, parts)  # type: ignore[no-any-return]


__all__ = ["DEFAULTS", "RULES", "ComposedCoordinator", "ComposedParity", "ComposedServer", "ComposedSpare",
           "ComposedTrainer", "Composite", "Part", "compose_layout", "coordinator", "parity", "server",
           "spare", "trainer"]
