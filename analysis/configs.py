"""Result files of different configurations in one set: ``config_groups``, one group per configuration.

Owns how ``mpiec report`` (tables, figures, HTML) and ``frame`` split a folder that mixes runs of
different configurations (e.g. a 40-step and an 80-step bench of the same strategies), so that no
median and no comparison paired by round pools runs of two configurations.

A run's **configuration** is its stored config flattened to dotted keys (``training.steps``), without
what the runs of one bench differ in on purpose: ``strategy.*`` (the variant), ``failures.*`` (kill
plans and the MTBF the bench derives from them), ``output.*`` (names). The layout keys a variant
spells or the bench sets per variant (``VARIANT_KEYS``: ``ckpt:replacement=shrink`` runs without
spares) are left out too, as long as each variant has one value of them; a variant whose runs
differ there splits like any other key. Every other key whose value differs between runs splits
them; the **label** of a group names those keys with its values (``training.steps=40``; ``(unset)``
where a run's config lacks the key).

Invariants: pure (no I/O); a set of one configuration is one group labelled ``""``; groups in the
order of their first run; runs keep their order within a group; every run is in exactly one group.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from mpiec.results import RunResult

from .metrics import variant

__all__ = ["IGNORED_SECTIONS", "VARIANT_KEYS", "ConfigGroup", "config_groups", "config_label",
           "differing_keys", "mixed_line"]

#: Config sections the runs of one bench differ in on purpose (never split on).
IGNORED_SECTIONS = ("strategy", "failures", "output")
#: Keys a strategy variant spells or the bench sets per variant: split on only where one variant's runs
#: differ in them.
VARIANT_KEYS = ("layout.replacement", "layout.spares", "layout.virtual_trainers")
UNSET = "(unset)"


@dataclass
class ConfigGroup:
    """The runs of one configuration: ``values`` of the differing keys, ``label`` naming them."""

    values: dict[str, str]
    results: list[RunResult] = field(default_factory=list)

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items())

    @property
    def heading(self) -> str:
        """``configuration training.steps=40 (10 runs)``: the heading of this group's tables."""
        return f"configuration {self.label} ({len(self.results)} runs)"

    @property
    def slug(self) -> str:
        """The label as a file or directory name (``training.steps-40``; ``""`` for a single group)."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.label.replace("=", "-")).strip("-")[:120]


def _flatten(d: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                out.update(_flatten(v, key + "."))
            else:
                out[key] = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return out


def _settings(r: RunResult) -> dict[str, str]:
    cfg = r.config if isinstance(r.config, dict) else {}
    return _flatten({k: v for k, v in cfg.items() if k not in IGNORED_SECTIONS})


def differing_keys(results: list[RunResult]) -> list[str]:
    """The config keys whose values split ``results`` into configurations (sorted)."""
    flat = [_settings(r) for r in results]
    keys = sorted({k for f in flat for k in f})
    out = []
    for k in keys:
        values = [f.get(k, UNSET) for f in flat]
        if len(set(values)) <= 1:
            continue
        if k in VARIANT_KEYS:
            per_variant: dict[str, set[str]] = {}
            for r, v in zip(results, values, strict=True):
                per_variant.setdefault(variant(r), set()).add(v)
            if all(len(s) == 1 for s in per_variant.values()):
                continue
        out.append(k)
    return out


def config_label(r: RunResult, keys: list[str]) -> str:
    """``r``'s values of ``keys`` as a group label."""
    flat = _settings(r)
    return ", ".join(f"{k}={flat.get(k, UNSET)}" for k in keys)


def config_groups(results: list[RunResult]) -> list[ConfigGroup]:
    """``results`` split by configuration (see the module docstring); one group when they share one."""
    keys = differing_keys(results)
    groups: dict[tuple[str, ...], ConfigGroup] = {}
    for r in results:
        flat = _settings(r)
        values = {k: flat.get(k, UNSET) for k in keys}
        groups.setdefault(tuple(values.values()), ConfigGroup(values)).results.append(r)
    return list(groups.values())


def mixed_line(groups: list[ConfigGroup]) -> str:
    """The line a report over several configurations starts with ("" for one)."""
    if len(groups) < 2:
        return ""
    keys = ", ".join(groups[0].values)
    return (f"these result files mix {len(groups)} configurations (they differ in {keys}): one set of tables "
            "per configuration; runs of different configurations are never pooled into one median or paired")
