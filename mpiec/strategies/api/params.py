"""Typed strategy parameters: each strategy declares its ``strategy.KEY`` keys as one dataclass.

Owns what is particular to ``strategy.params`` (the config's free-form table) becoming a strategy's
typed, frozen parameters: keys are named ``strategy.KEY``, an unknown one is refused with a "did you
mean" and the strategy's known keys, and a declaration bug (a default out of its own range) is
caught when the strategy is loaded. Types, ranges, choices and the coercer are the config's own
(``mpiec.config.schema``): a field is declared with ``param(default, "help text", ge=...)``, choices come
from a ``Literal`` type (``int | Literal["auto"]`` for a union). Invariants: a default is stated
once (in the dataclass); parsing is a pure function of the raw table (launcher, ranks and tests agree);
``typed_params`` is the one place that reads a config's raw table (the strategy's constructor, its
``validate``, the resolve step and the tools ask it).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from mpiec.config import schema
from mpiec.config.schema import Key, type_text
from mpiec.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.strategies.api.base import Strategy

P = TypeVar("P")


def param(default: Any, help: str, *, ge: float | None = None, gt: float | None = None,
          le: float | None = None) -> Any:
    """A strategy parameter: its default, its help text and its numeric bounds (inclusive ``ge``/``le``,
    exclusive ``gt``); choices come from the field's ``Literal`` type."""
    return schema.key(default, help, ge=ge, gt=gt, le=le)


@dataclass(frozen=True)
class NoParams:
    """A strategy without keys of its own."""


def keys(params_cls: type) -> list[Key]:
    """The keys a parameter dataclass declares, in declaration order (names without ``strategy.``)."""
    return schema.keys(params_cls)


def parse_params(params_cls: type[P], raw: Mapping[str, Any], strategy: str) -> P:
    """``raw`` (``strategy.params``) as an instance of ``params_cls``; ``ConfigError`` naming the key."""
    def unknown(key: str, known: list[str]) -> str:
        listed = f"; known: {', '.join(known)}" if known else "; it has no keys of its own"
        return (f"unknown config key 'strategy.{key}' for strategy '{strategy}'{did_you_mean(key, known)}"
                f"{listed}")

    out: P = schema.parse(params_cls, dict(raw), "strategy.", unknown)
    return out


def typed_params(cfg: Config, strategy_cls: type[Strategy]) -> Any:
    """The typed keys of ``cfg``'s strategy ``strategy_cls``: its ``Params``, defaults filled in;
    ``ConfigError`` naming the key. (``resolve.typed_params`` looks the class up by name.)"""
    return parse_params(strategy_cls.Params, cfg.strategy.params, strategy_cls.name)


def check_defaults(params_cls: type) -> None:
    """Every field's annotation resolves to a supported type and its default is a valid value of it
    (type and range): a declaration bug (``param(-5, "...", ge=1)``, ``"8"`` for an ``int``) is one
    ``ConfigError`` line naming the key, met when the strategy is loaded, not inside a rank."""
    try:
        hints = typing.get_type_hints(params_cls)
    except Exception as exc:  # NameError for an unresolvable annotation, TypeError, ...
        raise ConfigError(f"Params annotations do not resolve ({type(exc).__name__}: {exc})") from None
    for f in dataclasses.fields(params_cls):
        if f.default is dataclasses.MISSING:
            raise ConfigError(f"strategy.{f.name} has no default (declare it with "
                              "params.param(default, help))")
        try:
            name = f"strategy.{f.name}"
            schema.check(schema.coerce(f.default, hints[f.name], name), f, name)
        except ConfigError as exc:
            raise ConfigError(f"the default of {exc} (a declaration bug: fix Params)") from None
        except TypeError as exc:  # an unsupported field type
            raise ConfigError(str(exc)) from None


__all__ = ["Key", "NoParams", "check_defaults", "keys", "param", "parse_params", "type_text", "typed_params"]
