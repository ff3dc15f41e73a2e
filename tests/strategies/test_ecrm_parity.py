"""``ecrm`` without MPI: stripe member placement, parity versions, delta routing."""

from __future__ import annotations

import numpy as np
import pytest
from mpiec.kernels.codes import make_code

from mpiec.layout import RowPlacement
from mpiec.strategies.ecrm.parity import Deltas, ParityStore, pack_words, unpack_words
from mpiec.strategies.ecrm.pipeline import build_outgoing
from mpiec.strategies.ecrm.stripes import (
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
    n_used = 0
    for rank in range(S + (r if dedicated else 0)):  # parity slots are the inverse of member_index
        st, ii = parity_stripes(pl, rank)
        used = st >= 0
        n_used += int(used.sum())
        for slot in np.flatnonzero(used):
            assert member_holder(pl, st[slot:slot + 1], k + ii[slot])[0] == rank
            assert member_index(pl, st[slot:slot + 1], k + ii[slot])[0] == slot
    assert n_used == pl.n_stripes * r  # and every stripe's parity members have a slot
    for server in range(S):  # data slots: the server's rows in slot order
        st, mm = pl.data_stripes(server)
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


# -- batched parity commits (strategy.parity_every) ----------------------------------------------

@pytest.mark.parametrize("value", ["0", "-2", "true", "2.5", "'4'"])
def test_parity_every_must_be_an_integer_of_at_least_one(value):
    from mpiec.errors import ConfigError
    from mpiec.launch.resolve import load_config

    with pytest.raises(ConfigError, match=r"strategy\.parity_every must be (an integer|>= 1)"):
        load_config("tiny", strategy="ecrm", sets=[f"strategy.parity_every={value}"])
    cfg = load_config("tiny", strategy="ecrm", sets=["strategy.parity_every=8"])
    assert cfg.strategy.params["parity_every"] == 8


def test_a_window_sends_one_delta_per_row_equal_to_the_xor_of_its_steps():
    from mpiec.strategies.ecrm.window import CommitWindow

    rng = np.random.default_rng(3)
    table = rng.standard_normal((50, 3)).astype(np.float32)
    at_commit = table.copy()
    win = CommitWindow(50, base=7)
    per_step = np.zeros((50, 12), dtype=np.uint8)  # XOR of every step's old ^ new, row by row
    touched = set()
    for _ in range(4):
        slots = np.unique(rng.integers(0, 50, 15))
        old = table[slots].copy()
        win.add(slots, old)
        table[slots] += rng.standard_normal((slots.size, 3)).astype(np.float32)
        per_step[slots] ^= old.view(np.uint8).reshape(-1, 12) ^ table[slots].view(np.uint8).reshape(-1, 12)
        touched |= set(slots.tolist())
    slots, old = win.rows()
    assert sorted(touched) == slots.tolist() and np.all(np.diff(slots) > 0)  # each row once
    assert np.array_equal(old, at_commit[slots])  # its bytes at the window's base
    delta = old.view(np.uint8).reshape(-1, 12) ^ table[slots].view(np.uint8).reshape(-1, 12)
    assert np.array_equal(delta, per_step[slots])
    assert win.peak >= win.nbytes > 0
    win.reset(11)
    assert win.base == 11 and win.rows()[0].size == 0 and not win.dirty.any()


def test_undoing_a_commit_lands_on_the_commit_before_it():
    """Versions advance in commits: undo to a step between two commits takes the newer one out
    and leaves parity equal to the encoding of the data at the older one."""
    rng, code, data, (st,) = _store("xor", 3, 1)
    snapshots = {-1: [d.copy() for d in data]}
    for commit in (3, 7, 11):  # one accumulated delta per row per commit
        for j in range(3):
            rows = np.unique(rng.integers(0, 64, 20))
            new = rng.integers(0, 256, (rows.size, 12), dtype=np.uint8)
            delta = data[j][rows] ^ new
            data[j][rows] = new
            st.apply(commit, Deltas(np.full(rows.size, j), pack_words(rows, 0, j), delta))
        st.mark_applied(np.arange(3), commit)
        snapshots[commit] = [d.copy() for d in data]
    assert st.chain[0] == [-1, 3, 7, 11]
    st.undo(1, 9)
    assert int(st.applied[1]) == 7 and st.chain[1] == [-1, 3, 7]  # below the target 9: at commit 7
    mixed = [snapshots[11][0], snapshots[7][1], snapshots[11][2]]
    assert np.array_equal(st.array, code.encode(mixed)[0])
    st.set_version([1], 9)  # a recovery brought it to 9 (the deltas 7 -> 9 sent)
    assert st.chain[1][-1] == 9 and int(st.applied[1]) == 9


def _pipeline(keep=8):
    from mpiec.strategies.ecrm.pipeline import DeltaPipeline

    class Comm:
        def Get_size(self):  # noqa: N802 - MPI's spelling
            return 4

    pl = RowPlacement(40, 4, 3, 1)
    return DeltaPipeline(lambda: Comm(), pl, None, 8, keep=keep)


def test_a_source_resends_the_chain_of_commits_from_a_holders_version():
    pipe = _pipeline()
    rows = np.array([0, 5, 9])
    for step, base in ((3, -1), (7, 3), (11, 7)):
        pipe.stage(step, rows, np.full((3, 8), step, np.uint8), base=base)
    tails = []

    def tail(base, slots, old):
        tails.append((base, slots))
        return "window" if base == 11 else None

    assert [s for s, _ in pipe.chain(3, 11, tail)] == [7, 11] and not tails
    assert [(s, o if o == "window" else "commit") for s, o in pipe.chain(7, 13, tail)] == [
        (11, "commit"), (13, "window")]  # the open window from 11 takes it to 13
    with pytest.raises(LookupError, match="no kept parity deltas from step 5"):
        pipe.chain(5, 11, tail)  # 5 is no commit of this source


def test_a_commit_past_the_committed_step_is_resent_from_its_old_rows():
    """Reconciliation undid step 11, which had committed (base 7): a holder at 7 gets the
    change 7 -> 10 built from the commit's kept old rows, not the commit itself."""
    pipe = _pipeline()
    rows = np.array([0, 5])
    pipe.stage(7, rows, np.ones((2, 8), np.uint8), base=3)
    old = (np.array([0, 1]), np.zeros((2, 2), np.float32))
    pipe.stage(11, rows, np.ones((2, 8), np.uint8), base=7, old=old)
    assert pipe.outgoing[7].old is None and pipe.outgoing[11].old is old
    got = pipe.chain(7, 10, lambda base, slots, o: ("tail", base, slots is old[0]))
    assert got == [(10, ("tail", 7, True))]
    pipe.reset(10)
    assert 11 not in pipe.outgoing and all(o.old is None for o in pipe.outgoing.values())


def test_outgoing_deltas_are_kept_for_the_last_keep_steps():
    pipe = _pipeline(keep=4)
    for step in (3, 7, 8, 9, 11):
        pipe.stage(step, np.array([1]), np.ones((1, 8), np.uint8), base=step - 1)
    assert sorted(pipe.outgoing) == [8, 9, 11]
