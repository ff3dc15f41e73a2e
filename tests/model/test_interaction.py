"""interaction.py: the SIMD dot interaction gives the scalar kernels' bits (forward and backward)."""

import numpy as np
import pytest

from mpiec.model import dlrm
from mpiec.model.interaction import interact_bwd, interact_fwd


@pytest.mark.parametrize("bsz,T,d", [(64, 26, 16), (50, 26, 16), (37, 5, 3), (33, 3, 32), (17, 4, 16),
                                     (1, 1, 1), (16, 2, 20)])
def test_simd_interaction_is_bit_identical_to_the_scalar_kernels(bsz, T, d):
    rng = np.random.default_rng(bsz * 100 + T * 10 + d)
    x = np.maximum(rng.standard_normal((bsz, d)), 0).astype(np.float32)
    emb = rng.standard_normal((bsz, T, d)).astype(np.float32)
    P = (T + 1) * T // 2
    ref = np.zeros((bsz, d + P), np.float32)
    got = np.full_like(ref, 7.0)
    dlrm._interact_fwd(x, emb, ref[:, d:])
    interact_fwd(x, emb, got, d)  # columns d.., as in the model
    np.testing.assert_array_equal(got[:, d:].view(np.uint32), ref[:, d:].view(np.uint32))
    g = rng.standard_normal((bsz, d + P)).astype(np.float32)
    gx_ref = rng.standard_normal((bsz, d)).astype(np.float32)
    gx = gx_ref.copy()
    ge_ref = np.empty_like(emb)
    ge = np.full_like(emb, 5.0)
    dlrm._interact_bwd(x, emb, g[:, d:], gx_ref, ge_ref)
    interact_bwd(x, emb, g, d, gx, ge)
    np.testing.assert_array_equal(gx.view(np.uint32), gx_ref.view(np.uint32))
    np.testing.assert_array_equal(ge.view(np.uint32), ge_ref.view(np.uint32))


def test_simd_interaction_signed_zeros_and_specials_match():
    # -0.0 products and infinities: the same IEEE operations in the same order give the same bits
    x = np.array([[-0.0, 0.0, 1.0, -2.0]] * 16, np.float32)
    emb = np.array([[[0.0, -0.0, np.inf, 3.0], [-1.0, 0.0, 0.5, -0.0]]] * 16, np.float32)
    ref = np.zeros((16, 3), np.float32)
    got = np.zeros((16, 3), np.float32)
    dlrm._interact_fwd(x, emb, ref)
    interact_fwd(x, emb, got, 0)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
