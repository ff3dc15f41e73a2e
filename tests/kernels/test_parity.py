"""``kernels.parity``: the parity pipeline's row loops reproduce the numpy reference byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from mpiec.kernels.codes import make_code
from mpiec.kernels.parity import gf_apply_wire, gf_apply_words, route_pack, wire_words

from mpiec.layout import RowPlacement
from mpiec.strategies.ecrm.parity import pack_words
from mpiec.strategies.ecrm.pipeline import Routing
from mpiec.strategies.ecrm.stripes import member_holder, member_index


def reference_outgoing(pl: RowPlacement, rows: np.ndarray, payload: np.ndarray, size: int):
    """The numpy routing the kernel replaced (argsort by holder, fancy-indexed payload)."""
    stripe, j = rows // pl.k, rows % pl.k
    dest = np.concatenate([member_holder(pl, stripe, pl.k + i) for i in range(pl.r)])
    words = np.concatenate([pack_words(member_index(pl, stripe, pl.k + i), i, j) for i in range(pl.r)])
    order = np.argsort(dest, kind="stable")
    src = np.tile(np.arange(rows.size), pl.r)[order]
    wire = np.empty((src.size, 8 + payload.shape[1]), np.uint8)
    wire[:, :8] = words[order].view(np.uint8).reshape(-1, 8)
    wire[:, 8:] = payload[src]
    return dest[order], wire, np.bincount(dest, minlength=size)


@pytest.mark.parametrize("total,S,k,r,dedicated,order", [
    (1000, 6, 4, 1, False, None), (1000, 6, 4, 2, False, None), (997, 5, 2, 2, False, [2, 0, 4, 1, 3]),
    (50, 4, 3, 1, True, None), (777, 7, 1, 3, False, None), (10, 8, 4, 2, False, None),
    (100, 3, 3, 2, True, None), (5000, 4, 1, 1, False, None)])
def test_route_pack_is_the_numpy_routing_byte_for_byte(total, S, k, r, dedicated, order):
    pl = RowPlacement(total, S, k, r, dedicated_parity=dedicated, order=order)
    size = S + (r if dedicated else 0)
    rng = np.random.default_rng(total + S)
    rt = Routing.of(pl)
    for n in (0, 1, 300):
        rows = rng.permutation(pl.n_stripes * k)[:n].astype(np.int64)
        payload = rng.integers(0, 256, (rows.size, 13), dtype=np.uint8)
        got = route_pack(rows, payload, k, rt.holder, rt.base, rt.mul, size)
        for a, b in zip(got, reference_outgoing(pl, rows, payload, size), strict=True):
            assert np.array_equal(a, b)


def test_route_pack_refuses_what_it_cannot_route():
    pl = RowPlacement(100, 4, 2, 1)
    rt = Routing.of(pl)
    with pytest.raises(IndexError, match="negative id"):
        route_pack(np.array([3, -1]), np.zeros((2, 4), np.uint8), 2, rt.holder, rt.base, rt.mul, 4)
    with pytest.raises(IndexError, match="outside the communicator"):
        route_pack(np.array([3]), np.zeros((1, 4), np.uint8), 2, rt.holder, rt.base, rt.mul, 2)
    with pytest.raises(ValueError, match="one payload row"):
        route_pack(np.array([3]), np.zeros((2, 4), np.uint8), 2, rt.holder, rt.base, rt.mul, 4)


@pytest.mark.parametrize("name,k,r,width", [("xor", 4, 1, 68), ("rs", 4, 2, 68), ("rs", 3, 3, 130),
                                             ("rs", 2, 2, 5)])
def test_apply_is_code_update_row_by_row(gfni, name, k, r, width):
    code = make_code(name, k, r)
    rng = np.random.default_rng(width)
    n_par, m = 200, 500
    slots = rng.integers(0, n_par, m)  # repeated slots: the deltas of one row from several sources
    i, j = rng.integers(0, r, m), rng.integers(0, k, m)
    payload = rng.integers(0, 256, (m, width), dtype=np.uint8)
    words = pack_words(slots, i, j)
    wire = np.empty((m, 8 + width), np.uint8)
    wire[:, :8] = words.view(np.uint8).reshape(-1, 8)
    wire[:, 8:] = payload
    start = rng.integers(0, 256, (n_par, width), dtype=np.uint8)
    want = start.copy()
    for t in range(m):
        code.update(want, int(j[t]), slots[t:t + 1], payload[t:t + 1], parity_index=int(i[t]))
    a, b = start.copy(), start.copy()
    gf_apply_wire(a, wire, code.parity_rows)
    gf_apply_words(b, wire_words(wire), payload, code.parity_rows)
    assert np.array_equal(a, want) and np.array_equal(b, want)
    gf_apply_wire(a, wire, code.parity_rows)  # the same rows again: undone (XOR)
    assert np.array_equal(a, start)


def test_apply_refuses_a_word_outside_the_array_or_the_code():
    coef = make_code("rs", 2, 2).parity_rows
    parity = np.zeros((4, 3), np.uint8)
    for slot, i, j in ((4, 0, 0), (0, 2, 0), (0, 0, 2)):
        wire = np.zeros((2, 11), np.uint8)
        wire[1, :8] = pack_words(np.array([slot]), i, np.array([j])).view(np.uint8)
        with pytest.raises(IndexError, match="row 1"):
            gf_apply_wire(parity, wire, coef)
        with pytest.raises(IndexError, match="row 1"):
            gf_apply_words(parity, wire_words(wire), wire[:, 8:], coef)
    with pytest.raises(ValueError, match="one parity row"):
        gf_apply_wire(parity, np.zeros((1, 12), np.uint8), coef)
