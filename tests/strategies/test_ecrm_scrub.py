"""``ecrm``'s scrub: the syndromes of a verification locate a flipped member of a stripe (Reed-Solomon,
r >= 2) and give back the flipped bits; what the code cannot tell is left alone."""

import numpy as np
import pytest
from mpiec.kernels.codes import make_code

from mpiec.strategies.ecrm.scrub import locate, syndromes


def stripe(k: int, r: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    code = make_code("rs" if r > 1 else "xor", k, r)
    data = [rng.integers(0, 256, size=(1, 24), dtype=np.uint8) for _ in range(k)]
    return code, data, code.encode(data)


def found_after(code, data, parity) -> dict[int, np.ndarray]:
    """What the holders' verification finds: each parity row against a re-encode of ``data``."""
    fresh = code.encode(data)
    out = {}
    for p in range(code.r):
        for _, i, syn in syndromes(np.array([7]), p, parity[p], fresh[p]):
            out[i] = syn
    return out


@pytest.mark.parametrize("k, r", [(2, 2), (3, 2), (4, 3), (2, 4)])
@pytest.mark.parametrize("bit", [0, 22, 31])
def test_a_flipped_data_row_is_located_and_its_error_is_the_flip(k, r, bit):
    for j in range(k):
        code, data, parity = stripe(k, r, seed=j)
        flipped = [d.copy() for d in data]
        byte = 5 + bit // 8
        flipped[j][0, byte] ^= np.uint8(1 << (bit % 8))
        where = locate(code.parity_rows, found_after(code, flipped, parity))
        assert where is not None and where.member == j
        flipped[j][0] ^= where.error
        assert np.array_equal(flipped[j], data[j])  # the repair gives back exactly the flipped bits


def test_a_flipped_parity_row_is_located_as_that_parity_row():
    code, data, parity = stripe(3, 2)
    bad = [p.copy() for p in parity]
    bad[1][0, 3] ^= 0x10
    where = locate(code.parity_rows, found_after(code, data, bad))
    assert where is not None and where.member == 3 + 1
    bad[1][0] ^= where.error
    assert np.array_equal(bad[1], parity[1])


def test_one_parity_row_per_stripe_detects_but_cannot_locate():
    code, data, parity = stripe(2, 1)
    flipped = [data[0].copy(), data[1]]
    flipped[0][0, 0] ^= 1
    found = found_after(code, flipped, parity)
    assert list(found) == [0]  # detected
    assert locate(code.parity_rows, found) is None


def test_with_three_parity_rows_two_flipped_members_are_never_taken_for_one():
    """Distance r + 1 = 4 corrects one member and detects two (r = 2, distance 3, may take two flips
    in one stripe for one elsewhere: the docs say so)."""
    rng = np.random.default_rng(1)
    for trial in range(50):
        code, data, parity = stripe(3, 3, seed=trial)
        flipped = [d.copy() for d in data]
        a, b = rng.choice(3, size=2, replace=False)
        flipped[a][0, rng.integers(24)] ^= np.uint8(1 << rng.integers(8))
        flipped[b][0, rng.integers(24)] ^= np.uint8(1 << rng.integers(8))
        assert locate(code.parity_rows, found_after(code, flipped, parity)) is None


def test_a_clean_stripe_has_no_syndrome():
    code, data, parity = stripe(3, 2)
    assert found_after(code, data, parity) == {}
    assert locate(code.parity_rows, {}) is None


def test_merged_jobs_ask_each_holder_once_and_give_each_job_its_own_rows():
    from mpiec.strategies.ecrm.transfer import Job, merge_jobs

    seen: list[tuple[str, dict]] = []
    a = Job({0: np.array([5, 6]), 2: np.array([1])}, {}, lambda d, p: seen.append(("a", d)), rows=2)
    b = Job({2: np.array([7, 8, 9])}, {}, lambda d, p: seen.append(("b", d)), rows=3)
    (job,) = merge_jobs([a, b])
    assert {h: idx.tolist() for h, idx in job.want_data.items()} == {0: [5, 6], 2: [1, 7, 8, 9]}
    assert job.rows == 5
    rows = {0: np.array([[50], [60]]), 2: np.array([[10], [70], [80], [90]])}  # what the holders send
    job.finish(rows, {})
    (_, got_a), (_, got_b) = seen
    assert {h: r.ravel().tolist() for h, r in got_a.items()} == {0: [50, 60], 2: [10]}
    assert {h: r.ravel().tolist() for h, r in got_b.items()} == {2: [70, 80, 90]}
    assert merge_jobs([a]) == [a] and merge_jobs([]) == []
