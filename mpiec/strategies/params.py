"""Typed strategy parameters: each strategy declares its ``strategy.KEY`` keys as one dataclass.

Owns how ``strategy.params`` (the config's free-form table) becomes a strategy's typed, frozen
parameters: unknown keys are refused with a "did you mean", every value is checked against the
field's type (``int``, ``float``, ``bool``, ``str``, a ``Literal`` of choices, or a union such as
``int | Literal["auto"]``) and range, and the error is one line naming ``strategy.KEY``.

A field is declared with ``param(default, "help text", ge=..., choices=...)``; the help text is
what ``mpiec strategies --keys`` prints. Invariants: a default is stated once (in the
dataclass); parsing is a pure function of the raw table (launcher, ranks and tests agree).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from mpiec.errors import ConfigError, did_you_mean

P = TypeVar("P")


def param(default: Any, help: str, *, ge: float | None = None, gt: float | None = None,
          le: float | None = None) -> Any:
    """A strategy parameter: its default, its help text and its numeric bounds (inclusive ``ge``/``le``,
    exclusive ``gt``); choices come from the field's ``Literal`` type."""
    return dataclasses.field(default=default, metadata={"help": help, "ge": ge, "gt": gt, "le": le})


@dataclass(frozen=True)
class NoParams:
    """A strategy without keys of its own."""


@dataclass(frozen=True)
class Key:
    """One key as ``mpiec strategies --keys`` lists it."""

    name: str
    type: str
    default: Any
    help: str


def keys(params_cls: type) -> list[Key]:
    """The keys a parameter dataclass declares, in declaration order."""
    hints = typing.get_type_hints(params_cls)
    return [Key(f.name, type_text(hints[f.name]), f.default, f.metadata.get("help", ""))
            for f in dataclasses.fields(params_cls)]


def parse_params(params_cls: type[P], raw: Mapping[str, Any], strategy: str) -> P:
    """``raw`` (``strategy.params``) as an instance of ``params_cls``; ``ConfigError`` naming the key."""
    hints = typing.get_type_hints(params_cls)
    fields = {f.name: f for f in dataclasses.fields(params_cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            known = f"; known: {', '.join(fields)}" if fields else "; it has no keys of its own"
            raise ConfigError(f"unknown config key 'strategy.{key}' for strategy '{strategy}'"
                              f"{did_you_mean(key, fields)}{known}")
        f = fields[key]
        values[key] = _bounded(_coerce(value, hints[key], f"strategy.{key}"), f, f"strategy.{key}")
    return params_cls(**values)


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
            _bounded(_coerce(f.default, hints[f.name], f"strategy.{f.name}"), f, f"strategy.{f.name}")
        except ConfigError as exc:
            raise ConfigError(f"the default of {exc} (a declaration bug: fix Params)") from None
        except TypeError as exc:  # an unsupported field type
            raise ConfigError(str(exc)) from None


def type_text(hint: Any) -> str:
    """How a field's type reads in ``--keys`` and in errors: ``int``, ``sync|async``, ``int|auto``."""
    if typing.get_origin(hint) is Literal:
        return "|".join(str(a) for a in typing.get_args(hint))
    args = typing.get_args(hint)
    if args:
        return "|".join(type_text(a) for a in args)
    return getattr(hint, "__name__", str(hint))


def _coerce(value: Any, hint: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value in typing.get_args(hint) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be {_one_of(typing.get_args(hint))}, got {value!r}")
    if origin in (typing.Union, __import__("types").UnionType):
        for option in typing.get_args(hint):
            try:
                return _coerce(value, option, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key} must be {_describe(hint)}, got {value!r}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
            return float(value)
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key} must be a string, got {value!r}")
    raise TypeError(f"{key}: unsupported parameter type {hint!r}")  # a strategy's declaration bug


def _bounded(value: Any, f: dataclasses.Field, key: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    ge, gt, le = f.metadata.get("ge"), f.metadata.get("gt"), f.metadata.get("le")
    if (ge is not None and value < ge) or (gt is not None and value <= gt) or (le is not None and value > le):
        lo = f">= {ge:g}" if ge is not None else f"> {gt:g}" if gt is not None else ""
        hi = f"<= {le:g}" if le is not None else ""
        raise ConfigError(f"{key} must be {' and '.join(x for x in (lo, hi) if x)}, got {value!r}")
    return value


def _one_of(choices: tuple[Any, ...]) -> str:
    return " or ".join(", ".join(repr(c) for c in choices).rsplit(", ", 1))


def _describe(hint: Any) -> str:
    parts = []
    for option in typing.get_args(hint):
        if typing.get_origin(option) is Literal:
            parts.append(_one_of(typing.get_args(option)))
        else:
            parts.append({int: "an integer", float: "a number", str: "a string", bool: "true or false"}
                         .get(option, type_text(option)))
    return " or ".join(parts)


__all__ = ["Key", "NoParams", "check_defaults", "keys", "param", "parse_params", "type_text"]
