"""Named fields of the step header's strategy word.

Every trainer and server puts one non-negative int64 into each step's header (``header_word``);
every data rank receives all of them (``after_step(words=...)``). A ``HeaderLayout`` gives that
word named bit fields, so components of a strategy (a checkpoint schedule, a writer's timing,
CPR's update count) each own a field instead of packing one integer by convention.

Parts of a composed agent (``strategies.compose``) each own a *namespace* of fields: a strategy
declares its parts' fields (``Strategy.header_fields``), ``HeaderLayout.compose`` lays them out
as ``namespace.field`` (one layout per strategy, the same on every rank), and each part gets a
``HeaderView`` that packs its own namespace only and reads any field by its qualified name.

Invariants: fields never overlap and fit in 63 bits (the word stays non-negative); packing a
value that does not fit its field raises (a silent wrap would make another rank misread it);
a layout is immutable, composed with ``+`` or ``compose``; a namespace or field declared twice
is refused; a part never packs another namespace's field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

WORD_BITS = 63


@dataclass(frozen=True)
class HeaderField:
    name: str
    bits: int
    shift: int

    @property
    def limit(self) -> int:
        return (1 << self.bits) - 1


class HeaderLayout:
    """The strategy word's fields, low bits first: ``HeaderLayout(("checkpoint", 2), ("part_us", 40))``."""

    def __init__(self, *fields: tuple[str, int]) -> None:
        self.fields: dict[str, HeaderField] = {}
        shift = 0
        for name, bits in fields:
            if name in self.fields or bits < 1:
                raise ValueError(f"header field '{name}': duplicate or of {bits} bits")
            self.fields[name] = HeaderField(name, bits, shift)
            shift += bits
        if shift > WORD_BITS:
            raise ValueError(f"header fields need {shift} bits; the word has {WORD_BITS}")

    @classmethod
    def compose(cls, namespaces: Mapping[str, Sequence[tuple[str, int]]]) -> HeaderLayout:
        """One layout of every namespace's fields, named ``namespace.field``, in declaration order.
        A namespace name with a dot, or a field declared twice, raises ``ValueError``."""
        fields: list[tuple[str, int]] = []
        for ns, own in namespaces.items():
            if not ns or "." in ns:
                raise ValueError(f"header namespace '{ns}': empty or with a dot")
            fields += [(f"{ns}.{name}", bits) for name, bits in own]
        return cls(*fields)

    def view(self, namespace: str) -> HeaderView:
        """The view a part owning ``namespace`` packs and reads through."""
        return HeaderView(self, namespace)

    def __add__(self, other: HeaderLayout) -> HeaderLayout:
        return HeaderLayout(*[(f.name, f.bits) for f in (*self.fields.values(), *other.fields.values())])

    def pack(self, **values: int) -> int:
        """The word holding ``values`` (fields left out are 0)."""
        word = 0
        for name, value in values.items():
            f = self._field(name)
            value = int(value)
            if not 0 <= value <= f.limit:
                raise ValueError(f"header field '{name}' holds 0..{f.limit}, got {value}")
            word |= value << f.shift
        return word

    def get(self, word: int | np.integer, name: str) -> int:
        """Field ``name`` of one word."""
        f = self._field(name)
        return (int(word) >> f.shift) & f.limit

    def column(self, words: np.ndarray, name: str) -> np.ndarray:
        """Field ``name`` of every word of a step (int64 array)."""
        f = self._field(name)
        return (np.asarray(words, dtype=np.int64) >> f.shift) & f.limit

    def _field(self, name: str) -> HeaderField:
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError(f"no header field '{name}' (fields: {', '.join(self.fields) or 'none'})") from None


class HeaderView:
    """A part's view of the strategy's layout: ``pack`` its own fields by their short names,
    ``get`` / ``column`` its own fields by short name or any field by ``namespace.field``."""

    def __init__(self, layout: HeaderLayout, namespace: str) -> None:
        self.layout = layout
        self.namespace = namespace

    def name(self, field: str) -> str:
        return field if "." in field else f"{self.namespace}.{field}"

    def limit(self, field: str) -> int:
        """The largest value ``field`` holds."""
        return self.layout._field(self.name(field)).limit

    def pack(self, **values: int) -> int:
        """The word holding this namespace's ``values`` (another namespace's field: ``KeyError``)."""
        if values and not self.namespace:
            raise KeyError(f"a part with no header namespace packs no field ({', '.join(values)})")
        return self.layout.pack(**{f"{self.namespace}.{k}": v for k, v in values.items()})

    def get(self, word: int | np.integer, field: str) -> int:
        return self.layout.get(word, self.name(field))

    def column(self, words: np.ndarray, field: str) -> np.ndarray:
        return self.layout.column(words, self.name(field))


__all__ = ["HeaderField", "HeaderLayout", "HeaderView"]
