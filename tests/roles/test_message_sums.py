"""The gradient messages' checksums (``failures.message_checksums``): the fold sees any one flipped
bit of a block, per destination, and names the sender whose block arrived changed."""

import numpy as np

from mpiec.roles.message_sums import fold, folds, mismatches


def test_the_fold_changes_for_every_single_bit_flip_of_a_block():
    block = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    base = fold(block)
    words = block.reshape(-1).view(np.uint32)
    for i in range(words.size):
        for bit in range(32):
            words[i] ^= np.uint32(1 << bit)
            assert fold(block) != base
            words[i] ^= np.uint32(1 << bit)
    assert fold(block) == base and fold(block[:0]) == 0


def test_two_flips_of_the_same_bit_cancel_as_documented():
    block = np.ones((2, 2), dtype=np.float32)
    words = block.reshape(-1).view(np.uint32)
    base = fold(block)
    words[0] ^= np.uint32(1 << 5)
    words[3] ^= np.uint32(1 << 5)
    assert fold(block) == base  # a parity, not a hash (roles/message_sums.py)


def test_folds_follow_the_counts_and_name_the_sender_whose_block_changed():
    rows = np.arange(14, dtype=np.float32).reshape(7, 2)
    counts = np.array([3, 0, 4, 0])  # data ranks 0 and 2 sent rows; 1 sent none
    sent = folds(rows, counts)
    assert sent.tolist() == [fold(rows[:3]), 0, fold(rows[3:]), 0]
    assert mismatches(rows, counts, sent, senders=3) == []
    arrived = rows.copy()
    arrived[4, 1] = -arrived[4, 1]  # in rank 2's block
    assert mismatches(arrived, counts, sent, senders=3) == [2]
    assert mismatches(arrived, counts, sent, senders=2) == []  # only the first ``senders`` are checked
