"""The dense replicas' cross-check (``failures.dense_check_every``): a digest exact for one changed
element, and the verdict every trainer draws alike."""

import numpy as np
import pytest

from mpiec.roles.replicas import SLOTS, ReplicaCheck


def replica(seed: int = 0, n: int = 1000):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)


def test_the_digest_changes_with_any_one_bit_of_either_array():
    check = ReplicaCheck(1)
    params, state = replica()
    base = check.digest(params, state)
    assert base.dtype == np.float32 and base.size == SLOTS
    for array in (params, state):
        for i in (0, 7, 999):
            for bit in (0, 13, 22, 31):
                array.view(np.uint32)[i] ^= np.uint32(1 << bit)
                assert check.digest(params, state).tobytes() != base.tobytes()
                array.view(np.uint32)[i] ^= np.uint32(1 << bit)
    assert check.digest(params, state).tobytes() == base.tobytes()
    assert ReplicaCheck(5).digest(params, state).tobytes() == base.tobytes()  # the same on every trainer


@pytest.mark.parametrize("labels, odd, source", [
    ("aaa", [], None),
    ("aab", [2], 0),
    ("baa", [0], 1),
    ("abaa", [1], 0),
    ("ab", [0, 1], None),  # two trainers: no majority
    ("aabb", [0, 1, 2, 3], None),
    ("abc", [0, 1, 2], None),
])
def test_the_verdict_names_the_odd_replicas_and_a_majority_to_copy(labels, odd, source):
    check = ReplicaCheck(1)
    digests = {c: check.digest(*replica(seed)) for seed, c in enumerate("abc")}
    assert check.verdict(np.stack([digests[c] for c in labels])) == (odd, source)


def test_off_is_no_slot_and_never_due():
    assert ReplicaCheck(0).slots == 0 and not any(ReplicaCheck(0).due(s) for s in range(10))
    assert [s for s in range(10) if ReplicaCheck(3).due(s)] == [2, 5, 8]
