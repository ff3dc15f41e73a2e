"""Typed keys: one declaration, one coercer and one set of range and choice rules for every key.

Owns how a raw value (TOML, JSON, ``--set``, a result file's attribute) becomes a typed field, for
the config's sections (``mpiec.config``) and for each strategy's ``strategy.KEY`` keys
(``strategies.params``) alike. A field is declared with ``key(default, "help", ge=..., choices=...)``
(choices may also come from a ``Literal`` type); ``coerce`` checks a value against the field's type,
``check`` against its range and choices; both raise one ``ConfigError`` line naming the key, with a
"did you mean" for a misspelt choice. ``describe`` is what ``mpiec config --explain`` prints.

Invariants: a default and a rule are stated once, in the declaration; coercion is a pure function of
the value (launcher, ranks and tests agree); ints pass for floats, never bools for numbers.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mpiec.errors import ConfigError, did_you_mean


def key(default: Any = dataclasses.MISSING, help: str = "", *,
        default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
        ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
        choices: tuple[Any, ...] | None = None, unset: tuple[Any, str] | None = None) -> Any:
    """A typed key: its default (or ``default_factory`` for a list), help text, numeric bounds
    (inclusive ``ge``/``le``, exclusive ``gt``/``lt``; for a list, of each item), allowed ``choices``
    and ``unset`` = (value, meaning), a sentinel allowed outside the range (``-1``: the profile's)."""
    metadata = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "unset": unset}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Key:
    """One declared key as ``--explain`` and ``mpiec strategies --keys`` list it."""

    name: str
    type: str
    default: Any
    help: str
    rule: str = ""  # range, choices: "" when any value of the type is allowed


def fields_of(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """Each field of a declared dataclass with its resolved type hint, in declaration order."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def keys(cls: type, prefix: str = "") -> list[Key]:
    """The keys a dataclass declares (not its sub-sections), in declaration order."""
    out = []
    for f, hint in fields_of(cls):
        if dataclasses.is_dataclass(hint):
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.append(Key(f"{prefix}{f.name}", type_text(hint), default, f.metadata.get("help", ""),
                       rule_text(f, hint)))
    return out


def type_text(hint: Any) -> str:
    """How a type reads in ``--explain`` and ``--keys``: ``int``, ``sync|async``, ``int|auto``,
    ``list[int]``."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "|".join(str(a) for a in typing.get_args(hint))
    if origin is list:
        return f"list[{type_text(typing.get_args(hint)[0])}]"
    if origin is dict:
        return "table"
    args = typing.get_args(hint)
    if args:
        return "|".join(type_text(a) for a in args)
    return getattr(hint, "__name__", str(hint))


def rule_text(f: dataclasses.Field, hint: Any = None) -> str:
    """The field's range or choices as an error states them (``>= 1 and <= 1e+09``), "" if none."""
    md = f.metadata
    if md.get("choices"):
        return f"one of {', '.join(str(c) for c in md['choices'])}"
    rng = _range(md)
    if md.get("unset") and rng:
        return f"{md['unset'][0]:g} ({md['unset'][1]}) or in [{md['ge']:g}, {md['le']:g}]"
    each = "each " if hint is not None and typing.get_origin(hint) is list and rng else ""
    return each + rng


def coerce(value: Any, hint: Any, key: str, finite: bool = True) -> Any:
    """``value`` as a value of type ``hint`` (ints pass for floats); ``ConfigError`` naming ``key``.
    ``finite``: refuse inf and nan for a float (a result file may hold them: ``False`` there)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        options = typing.get_args(hint)
        if value in options and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be {_one_of(options)}, got {value!r}{_close(value, options)}")
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return coerce(value, option, key, finite)
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
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out = float(value)
            except OverflowError:
                raise ConfigError(f"{key} must be a finite number, got a {int(value).bit_length()}-bit "
                                  "integer") from None
            if finite and not math.isfinite(out):
                raise ConfigError(f"{key} must be a finite number, got {value!r}")
            return out
        raise ConfigError(f"{key} must be {'a finite number' if finite else 'a number'}, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key} must be a string, got {value!r}")
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return [coerce(v, item, f"{key}[{i}]", finite) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a table, got {value!r}")
        return dict(value)
    raise TypeError(f"{key}: unsupported type {hint!r}")  # a declaration bug


def check(value: Any, f: dataclasses.Field, key: str) -> Any:
    """``value`` (already of the field's type) against the field's choices and range; returns it.
    A list's range applies to each item."""
    md = f.metadata
    choices = md.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{key} must be {_one_of(choices)}, got {value!r}{_close(value, choices)}")
    unset = md.get("unset")
    if unset is not None and value == unset[0]:
        return value
    for i, v in enumerate(value) if isinstance(value, list) else [(None, value)]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or _in_range(v, md):
            continue
        where = key if i is None else f"{key}[{i}]"
        raise ConfigError(f"{where} must be {rule_text(f)}, got {number_text(v)}")
    return value


def parse(cls: type, raw: dict[str, Any], prefix: str, unknown: Callable[[str, list[str]], str]) -> Any:
    """``raw`` as an instance of the flat dataclass ``cls``: each value coerced and checked, keys
    named ``prefix + name``; an unknown key raises ``ConfigError(unknown(key, known))``."""
    fields = {f.name: (f, hint) for f, hint in fields_of(cls)}
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in fields:
            raise ConfigError(unknown(name, list(fields)))
        f, hint = fields[name]
        values[name] = check(coerce(value, hint, f"{prefix}{name}"), f, f"{prefix}{name}")
    return cls(**values)


def describe(ks: list[Key]) -> list[str]:
    """Keys as ``--explain`` prints them, one line each, in aligned columns:
    ``NAME  TYPE = DEFAULT  (RULE)  HELP``."""
    rows = [(k.name, f"{k.type} = {default_text(k.default)}" + (f"  ({k.rule})" if k.rule else ""),
             k.help or "(no help)") for k in ks]
    w_name = max((len(n) for n, _, _ in rows), default=0)
    w_type = max((len(t) for _, t, _ in rows), default=0)
    return [f"{n.ljust(w_name)}  {t.ljust(w_type)}  {h}" for n, t, h in rows]


def default_text(value: Any) -> str:
    """A default as ``--set KEY=VALUE`` takes it: TOML (``true``, ``2.5``), a bare word for a
    string (``sync``), quoted only where a bare word would read otherwise (``'1'``, ``''``)."""
    if value is dataclasses.MISSING:
        return "(required)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        try:
            tomllib.loads(f"v = {value}")
        except tomllib.TOMLDecodeError:
            if value and value == value.strip() and "\n" not in value:
                return value
        return repr(value)
    return str(value)


def number_text(v: float) -> str:
    """A number as an error shows it: short (``1e+06``) where that loses nothing, else exact."""
    if isinstance(v, float) and math.isfinite(v) and float(f"{v:g}") == v:
        return f"{v:g}"
    return repr(v)


def _range(md: Any) -> str:
    ge, gt, le, lt = md.get("ge"), md.get("gt"), md.get("le"), md.get("lt")
    lo = f">= {ge:g}" if ge is not None else f"> {gt:g}" if gt is not None else ""
    hi = f"<= {le:g}" if le is not None else f"< {lt:g}" if lt is not None else ""
    return " and ".join(x for x in (lo, hi) if x)


def _in_range(v: float, md: Any) -> bool:
    ge, gt, le, lt = md.get("ge"), md.get("gt"), md.get("le"), md.get("lt")
    return not ((ge is not None and v < ge) or (gt is not None and v <= gt)
                or (le is not None and v > le) or (lt is not None and v >= lt))


def _one_of(choices: tuple[Any, ...]) -> str:
    return " or ".join(", ".join(repr(c) for c in choices).rsplit(", ", 1))


def _close(value: Any, choices: tuple[Any, ...]) -> str:
    return did_you_mean(value, choices) if isinstance(value, str) else ""


def _describe(hint: Any) -> str:
    parts = []
    for option in typing.get_args(hint):
        if typing.get_origin(option) is Literal:
            parts.append(_one_of(typing.get_args(option)))
        else:
            parts.append({int: "an integer", float: "a number", str: "a string", bool: "true or false"}
                         .get(option, type_text(option)))
    return " or ".join(parts)


__all__ = ["Key", "check", "coerce", "default_text", "describe", "fields_of", "key", "keys", "number_text",
           "parse", "rule_text", "type_text"]
