"""The strategy plug-in interface: a ``Strategy`` declares itself and makes per-role agents.

Owns the types strategies and the runtime share: ``Strategy`` (the factory: declarations such as
``Params``, ``needs_delta``, ``summary_rules``, and one method per role returning the agent of
``strategies.agents``), the failure and recovery plan every rank acts on (``Failure``,
``RecoveryPlan``, ``Scope``), a server's shard as strategies see it (``ServerShard``) and how the
monitor merges the agents' summaries. Roles call agents' hooks and never branch on a strategy's
name. Invariants every strategy keeps:

* hooks are deterministic functions of (config, step, data they are given): they may add work
  and traffic but never change what training computes in a failure-free run (the parameter
  checksum of every strategy equals ``none``'s; the contract test checks it);
* the coordinator's ``plan`` runs on the monitor only, after every survivor agreed on the
  ``Failure``; the runtime broadcasts the plan, so every rank acts on one plan;
* state moves through the role's ``state()`` / ``load_state()``, never by reaching into another
  object's fields;
* figures for the result file come from the agents' ``summary()``; every key has a merge rule in
  ``summary_rules`` (how the monitor combines the ranks' values).

The hooks' call order is in ``strategies.agents``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from mpiec.strategies.api.agents import Agent, Coordinator, ParityAgent, ServerAgent, TrainerAgent
from mpiec.strategies.api.costs import CostModel
from mpiec.strategies.api.cover import CorruptionCover
from mpiec.strategies.api.header import HeaderLayout
from mpiec.strategies.api.params import NoParams, typed_params
from mpiec.strategies.api.plan import Failure, RecoveryPlan, Scope, ServerShard

if TYPE_CHECKING:
    from pathlib import Path

    from mpiec.config import Config
    from mpiec.strategies.api.env import DenseState, RankEnv, ShardState
    from mpiec.strategies.checkpointing.kit import CheckpointKit


MERGE_RULES = ("sum", "max", "min", "first")


class Strategy:
    """A fault-tolerance strategy: its declarations and the factory of its per-role agents.

    One instance per rank, made from the config before the rank's role. The class attributes
    declare what the runtime must know before any agent exists; the factory methods build the
    agent of the role this rank holds (``strategies.agents``), again on a spare promoted to a
    slot. Every default here is the ``none`` behaviour (no protection).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: the ``strategy.KEY`` keys: a frozen dataclass of ``params.param`` fields (defaults, help, ranges)
    Params: ClassVar[type] = NoParams
    needs_delta: ClassVar[bool] = False  # servers compute old XOR new row bytes on apply (fused)
    needs_old: ClassVar[bool] = False  # servers keep a copy of the rows before apply
    recovers: ClassVar[bool] = False  # the coordinator's plan() can return something else than abort
    #: ``layout.replacement = "shrink"``: the coordinator's ``on_shrink`` restores every server onto
    #: fewer servers (a rollback loading rows by global id, or a handover). False: a server death with
    #: no spare left ends the run with ``shrink_refusal``'s line, refused at launch where the kill plan
    #: can cause one (``mpiec.launch.resolve``); trainers shrink under any strategy
    shrinks: ClassVar[bool] = False
    #: merge rule of every key an agent's ``summary()`` may return: sum | max | min | first
    summary_rules: ClassVar[dict[str, str]] = {}
    #: the recovery claims no loss: a recovered run ends with the failure-free ``param_checksum``
    #: (the contract test holds the strategy to it)
    lossless: ClassVar[bool] = False
    #: how the simulator prices this strategy (``mpiec.simulate``); None: not modelled (``cost_reason``)
    cost: ClassVar[CostModel | None] = None
    cost_reason: ClassVar[str] = "not modelled: the strategy declares no cost model"
    #: the checkpoint kit this strategy assembles its checkpointing from (set in ``__init__``), if
    #: any: ``header_fields``, ``checkpoint_root`` and ``directories`` default to the kit's
    kit: CheckpointKit | None = None

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.params: Any = typed_params(cfg, type(self))

    # -- declarations (no MPI; launcher and ranks) ----------------------------------------------
    @classmethod
    def validate(cls, cfg: Config) -> None:
        """Raise ``ConfigError`` (one line naming ``strategy.KEY``) for unknown or invalid keys;
        ``check`` adds the rules across keys. Launcher, before any rank starts."""
        cls.check(typed_params(cfg, cls), cfg)

    @classmethod
    def check(cls, params: Any, cfg: Config) -> None:
        """Rules across keys or sections (``params`` already typed and in range). Raise ``ConfigError``."""

    @classmethod
    def param_keys(cls) -> set[str]:
        """The ``strategy.KEY`` keys this strategy knows (``mpiec bench --set strategy.KEY``)."""
        return {f.name for f in dataclasses.fields(cls.Params)}

    @classmethod
    def stripe_shape(cls, cfg: Config) -> tuple[int, int]:
        """(k, r) of the row placement: data rows and parity rows per stripe."""
        return 1, 0

    @classmethod
    def shrink_refusal(cls, cfg: Config) -> str:
        """Why this strategy cannot restore rows onto fewer servers under ``cfg`` (one line), or ""
        when it can (``shrinks``). Launcher and monitor; no MPI."""
        if cls.shrinks:
            return ""
        return (f"strategy {cls.name} cannot restore rows onto fewer servers (layout.replacement = "
                "shrink): give the run spares")

    def corruption_cover(self) -> CorruptionCover:
        """What this strategy sees of a silent corruption (``flip:`` plans) under its config.
        Default: nothing in memory; a checkpoint part at rest is refused on restore when the strategy
        writes checkpoints (every checkpoint store checks each file's CRC-32). Launcher, ranks,
        tests; no MPI."""
        from pathlib import Path

        writes = self.checkpoint_root(Path("run.h5")) is not None
        return CorruptionCover(parts_refused=writes, how="checkpoint parts' CRC-32 on restore" if writes
                               else "nothing checks the live state or writes checkpoints")

    def header_fields(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """The step header's fields of this strategy's parts: ``{namespace: ((field, bits), ...)}``
        (``strategies.compose``; a kit's ``header_fields()`` merged with the strategy's own parts').
        The same on every rank. Default: the ``kit``'s, else none."""
        return self.kit.header_fields() if self.kit is not None else {}

    def header(self) -> HeaderLayout:
        """The step header layout composed of ``header_fields`` (built once; a namespace or field
        declared twice raises ``ValueError``)."""
        layout = self.__dict__.get("_header")
        if layout is None:
            layout = self.__dict__["_header"] = HeaderLayout.compose(self.header_fields())
        return layout

    def checkpoint_root(self, out_path: Path) -> Path | None:
        """The directory this strategy writes checkpoints into for a run whose result file is
        ``out_path`` (None: it writes none). Default: the ``kit``'s root, else none. Launcher (before
        any rank starts) and ranks; no MPI."""
        return self.kit.root(out_path) if self.kit is not None else None

    def directories(self, out_path: Path) -> list[tuple[str, Path]]:
        """Every folder this strategy writes into for a run whose result file is ``out_path``, each
        with the words naming it in an error (``checkpoint directory (strategy.dir)``): the launcher
        checks each is writable, and claims it, before any rank starts. Default: the ``kit``'s, else
        the ``checkpoint_root``, if any. Launcher and ranks; no MPI."""
        if self.kit is not None:
            return self.kit.directories(out_path)
        root = self.checkpoint_root(out_path)
        return [] if root is None else [("checkpoint directory", root)]

    # -- the agents (one per rank, built with the rank's role) -------------------------------------
    def coordinator(self, env: RankEnv) -> Coordinator:
        """The monitor's agent. Once per run, at start-up."""
        return Coordinator(env)

    def trainer(self, env: RankEnv, role: DenseState) -> TrainerAgent:
        """A trainer's agent; ``role`` is its dense replica."""
        return TrainerAgent(env)

    def server(self, env: RankEnv, role: ShardState) -> ServerAgent:
        """A server's agent; ``role`` is its shard."""
        return ServerAgent(env)

    def parity(self, env: RankEnv) -> ParityAgent:
        """A dedicated parity rank's agent."""
        return ParityAgent(env)

    def spare(self, env: RankEnv) -> Agent:
        """A spare's agent (a spare holds no state; it takes part in ``rebuild``)."""
        return Agent(env)


def merge_summaries(rules: dict[str, str], parts: list[dict[str, Any]],
                    problems: list[str] | None = None) -> dict[str, Any]:
    """Combine the ranks' ``summary()`` dicts by each key's rule (sum / max / min / first).

    A key without a rule in ``rules`` (a strategy's declaration bug) raises ``KeyError``, unless
    ``problems`` is given: then the key is kept by ``first`` and named there, as is a part that is
    not a dict (left out) or a value its rule cannot combine (the first kept): the monitor must not
    lose a complete run's result file over one figure."""
    out: dict[str, Any] = {}
    for part in parts:
        if not isinstance(part, dict):
            if problems is None:
                raise TypeError(f"a strategy summary() returned {type(part).__name__}, not a dict")
            problems.append(f"a summary() returned {type(part).__name__}, not a dict (left out)")
            continue
        for key, value in part.items():
            rule = rules.get(key)
            if rule not in MERGE_RULES:
                if problems is None:
                    raise KeyError(f"strategy summary key '{key}' has no merge rule")
                why = f"summary key '{key}' has no merge rule in summary_rules (kept as 'first')"
                if why not in problems:
                    problems.append(why)
                rule = "first"
            if key not in out or rule == "first":
                out.setdefault(key, value)
                continue
            try:
                if rule == "sum":
                    out[key] = out[key] + value
                elif rule == "max":
                    out[key] = max(out[key], value)
                elif rule == "min":
                    out[key] = min(out[key], value)
            except TypeError as exc:
                if problems is None:
                    raise
                problems.append(f"summary key '{key}': rule '{rule}' cannot combine {value!r} ({exc}): "
                                "kept the first value")
    return out


def check_declarations(cls: type[Strategy]) -> None:
    """A strategy class's declarations are usable: ``Params`` is a dataclass whose annotations
    resolve, whose field types are supported and whose defaults are valid values of their field;
    ``summary_rules`` maps keys to merge rules. ``ConfigError`` (one line) says what is wrong.
    The registry runs it when it loads a strategy, so a bad declaration is refused before any rank
    starts (and by the contract), not met inside a rank."""
    from mpiec.errors import ConfigError
    from mpiec.strategies.api.params import check_defaults

    params = cls.Params
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        raise ConfigError(f"Params must be a dataclass of params.param fields, got {params!r}")
    check_defaults(params)
    rules = cls.summary_rules
    if not isinstance(rules, dict):
        raise ConfigError(f"summary_rules must be a dict of key -> merge rule, got {type(rules).__name__}")
    bad = {k: v for k, v in rules.items() if v not in MERGE_RULES}
    if bad:
        raise ConfigError(f"summary_rules {bad} use no merge rule of {', '.join(MERGE_RULES)}")


__all__ = ["Failure", "MERGE_RULES", "RecoveryPlan", "Scope", "ServerShard", "Strategy", "check_declarations",
           "merge_summaries"]
