"""``ecrm`` without MPI: stripe member placement, parity versions, delta routing."""

from __future__ import annotations

import numpy as np
import pytest
from mpiec.kernels.codes import make_code

from mpiec.layout import RowPlacement
from mpiec.strategies.ecrm.parity import Deltas, ParityStore, pack_words, unpack_words
from mpiec.strategies.ecrm.pipeline import build_outgoing
from mpiec.strategies.ecrm.stripes import (
    data_stripes,
    member_holder,
    member_index,
    parity_stripes,
    residue_holders,
    stripe_losses,
)

PLACEMENTS = [(1000, 4, 3, 1, False), (1001, 5, 2, 3, False), (999, 3, 3, 2, True), (7, 4, 1, 1, False)]


@pytest.mark.parametrize("rows,S,k,r,dedicated", PLACEMENTS)
def test_every_stripe_member_has_one_place_and_places_are_distinct(rows, S, k, r, dedicated):
    pl = RowPlacement(rows, S, k, r, dedicated_parity=dedicated)
    stripes = np.arange(pl.n_stripes)
    seen = set()
    for m in range(k + r):
        h, idx = member_holder(pl, stripes, m), member_index(pl, stripes, m)
        for a, b in zip(h, idx, strict=True):
            assert (m < k, int(a), int(b)) not in seen
            seen.add((m < k, int(a), int(b)))
        assert all(residue_holders(pl, int(s) % S)[m] == int(a) for s, a in zip(stripes, h, strict=True))
    for rank in range(S + (r if dedicated else 0)):  # parity slots are the inverse of member_index
        st, ii = parity_stripes(pl, rank)
        used = st >= 0
        for slot in np.flatnonzero(used):
            assert member_holder(pl, st[slot:slot + 1], k + ii[slot])[0] == rank
            assert member_index(pl, st[slot:slot + 1], k + ii[slot])[0] == slot
    for server in range(S):  # data slots: the server's rows in slot order
        st, mm = data_stripes(pl, server)
        assert st.size == pl.n_local(server)
        assert np.array_equal(pl.local_slot(st * k + mm), np.arange(st.size))


def test_members_of_one_stripe_live_on_distinct_servers():
    pl = RowPlacement(100, 5, 2, 2)
    for residue in range(5):
        assert len(set(residue_holders(pl, residue))) == 4
    assert stripe_losses(pl, {0}) == {0: [0], 1: [3], 2: [2], 3: [1], 4: []} or all(
        len(v) == 1 for v in stripe_losses(pl, {0}).values())
    assert max(len(v) for v in stripe_losses(pl, {0, 1}).values()) == 2


def test_words_round_trip():
    slots, i, j = np.array([0, 5, 1 << 40]), np.array([0, 3, 15]), np.array([0, 255, 7])
    assert all(np.array_equal(a, b) for a, b in zip(unpack_words(pack_words(slots, i, j)), (slots, i, j),
                                                      strict=True))


def _store(code_name, k, r, n=64, width=12, seed=0):
    rng = np.random.default_rng(seed)
    code = make_code(code_name, k, r)
    data = [rng.integers(0, 256, (n, width), dtype=np.uint8) for _ in range(k)]
    stores = []
    for i in range(r):
        st = ParityStore(code, np.arange(n), np.full(n, i), width, n_sources=k)
        st.load_bytes(np.arange(n), code.encode(data)[i])
        stores.append(st)
    return rng, code, data, stores


@pytest.mark.parametrize("code_name,k,r", [("xor", 3, 1), ("rs", 4, 2), ("rs", 2, 3)])
def test_deltas_in_any_order_then_undo_keep_parity_consistent(code_name, k, r):
    rng, code, data, stores = _store(code_name, k, r)
    before = [s.array.copy() for s in stores]
    for step in range(3):
        for j in rng.permutation(k):
            rows = np.unique(rng.integers(0, 64, 10))
            new = rng.integers(0, 256, (rows.size, 12), dtype=np.uint8)
            delta = data[j][rows] ^ new
            data[j][rows] = new
            for i, st in enumerate(stores):
                st.apply(step, Deltas(np.full(rows.size, j), pack_words(rows, i, j), delta))
    for i, st in enumerate(stores):
        assert np.array_equal(st.array, code.encode(data)[i])
        assert st.mismatches(np.arange(64), code.encode(data)[i]) == 0
    for st, b in zip(stores, before, strict=True):
        for j in range(k):
            st.undo(j, -1)
        assert np.array_equal(st.array, b)


def test_one_corrupted_parity_byte_is_a_mismatch():
    _, code, data, (st,) = _store("xor", 3, 1)
    st.array[17, 5] ^= 0x40
    assert st.mismatches(np.arange(64), code.encode(data)[0]) == 1


def test_undo_of_a_step_no_longer_kept_is_refused():
    _, code, data, (st,) = _store("xor", 2, 1)
    for step in range(5):
        one = Deltas(np.zeros(1, np.int64), pack_words(np.array([0]), 0, 0), np.ones((1, 12), np.uint8))
        st.apply(step, one)
    with pytest.raises(RuntimeError, match="no longer kept"):
        st.undo(0, 0)


def test_deltas_go_to_the_holder_of_every_parity_member():
    pl = RowPlacement(1000, 5, 2, 2)
    rows = np.array([0, 1, 7, 999])
    out = build_outgoing(pl, rows, np.arange(4 * 8, dtype=np.uint8).reshape(4, 8), 5)
    assert out.counts.sum() == rows.size * 2 and np.all(np.diff(out.dest) >= 0)
    slots, i, j = unpack_words(out.words)
    got = set(zip(out.dest.tolist(), slots.tolist(), i.tolist(), j.tolist(), strict=True))
    stripe = rows // 2
    want = {(int(member_holder(pl, stripe, 2 + ii)[n]), int(member_index(pl, stripe, 2 + ii)[n]), ii,
             int(rows[n] % 2)) for ii in range(2) for n in range(rows.size)}
    assert got == want
    assert out.payload.shape == (8, 8)
