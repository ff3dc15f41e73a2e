"""``Strategy.corruption_cover()``: what each built-in strategy declares it sees of a silent corruption,
and the table of docs/strategies.md "Silent corruption" saying the same."""

import re
from pathlib import Path

import pytest

from mpiec.launch.resolve import load_config
from mpiec.strategies import BUILTIN, get_strategy_class
from mpiec.strategies.api.cover import CorruptionCover

DOC = Path(__file__).resolve().parents[2] / "docs" / "strategies.md"


def cover(name: str, *sets: str) -> CorruptionCover:
    return get_strategy_class(name)(load_config("tiny", strategy=name, sets=list(sets))).corruption_cover()


def table_rows() -> list[list[str]]:
    text = DOC.read_text().split("## Silent corruption: what each strategy sees", 1)[1]
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| `")]


def test_the_docs_table_says_what_each_built_in_strategy_declares():
    seen = set()
    for cells in table_rows():
        names = re.findall(r"`([a-z-]+)`", cells[0].split(" with ")[0])
        for name in names:
            c = cover(name) if " with " not in cells[0] else cover(name, "strategy.verify_every=5")
            seen.add(name)
            assert c.parts_refused == cells[2].startswith("refused"), (name, c)
            assert (c.rows_within is None) == cells[1].startswith("persists"), (name, c)
    assert seen == set(BUILTIN)


RS = ["layout.servers=4", "strategy.code='rs'", "strategy.k=2", "strategy.r=2"]


@pytest.mark.parametrize("sets, within, repaired", [
    (["strategy.verify_every=1"], 0, False),
    (["strategy.verify_every=5"], 4, False),
    ([*RS, "strategy.verify_every=3"], 2, True),
    ([*RS, "strategy.scrub_stripes=1000"], 7, True),  # 15,746 rows in stripes of 2: 7,873, a pass in 8 steps
    (["strategy.verify_every=5", "strategy.parity_every=2"], None, False),  # a window may encode a flip
    (["strategy.code='sum'", "strategy.verify_every=2"], 1, False),
])
def test_ecrm_declares_its_checks(sets, within, repaired):
    c = cover("ecrm", *sets)
    assert (c.rows_within, c.rows_repaired) == (within, repaired)


def test_a_declaration_is_consistent():
    with pytest.raises(ValueError, match="detects them"):
        CorruptionCover(rows_repaired=True)
    with pytest.raises(ValueError, match=">= 0"):
        CorruptionCover(rows_within=-1)
