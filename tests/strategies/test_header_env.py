"""Named header fields and the read-only rank environment of strategy agents."""

import numpy as np
import pytest

from mpiec.strategies.api.env import RankEnv
from mpiec.strategies.api.header import HeaderLayout


def test_fields_pack_and_read_back_by_name():
    layout = HeaderLayout(("checkpoint", 2), ("part_us", 40))
    word = layout.pack(checkpoint=1, part_us=123456)
    assert layout.get(word, "checkpoint") == 1 and layout.get(word, "part_us") == 123456
    words = np.array([layout.pack(checkpoint=2), layout.pack(part_us=9), 0], dtype=np.int64)
    assert layout.column(words, "checkpoint").tolist() == [2, 0, 0]
    assert layout.column(words, "part_us").tolist() == [0, 9, 0]


def test_layouts_compose_and_refuse_overflow_overlap_and_unknown_names():
    layout = HeaderLayout(("a", 1)) + HeaderLayout(("b", 3))
    assert layout.get(layout.pack(a=1, b=7), "b") == 7
    with pytest.raises(ValueError, match="holds 0..7"):
        layout.pack(b=8)
    with pytest.raises(ValueError, match="duplicate"):
        HeaderLayout(("a", 1)) + HeaderLayout(("a", 2))
    with pytest.raises(ValueError, match="the word has 63"):
        HeaderLayout(("a", 40), ("b", 24))
    with pytest.raises(KeyError, match="no header field 'c'"):
        layout.pack(c=1)


class _View:
    epoch = 3
    events: list = []
    rank = 2

    def event(self, kind, step, rank=-1, slot=None, detail="", at=None):
        self.events.append((kind, step, rank, detail))


def test_rank_env_reads_live_values_and_cannot_be_written():
    view = _View()
    env = RankEnv(view)
    assert env.epoch == 3
    view.epoch = 4
    assert env.epoch == 4  # the live value, after a recovery
    env.event("x", 5, detail="d")
    assert view.events[-1] == ("x", 5, 2, "d")
    with pytest.raises(AttributeError, match="read-only"):
        env.epoch = 5
