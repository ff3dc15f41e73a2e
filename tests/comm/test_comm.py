"""``comm.guard``: what counts as a peer failure inside a recovery's collectives."""

from __future__ import annotations

import pickle

import pytest

from mpiec.comm import PeerFailure, configure_nbc_errors, guard


@pytest.fixture
def ulfm():
    configure_nbc_errors(True)
    yield
    configure_nbc_errors(False)


def test_a_garbled_pickle_in_a_recovery_collective_is_a_peer_failure(ulfm):
    with pytest.raises(PeerFailure, match="recovery plan .a garbled message"):
        with guard("recovery plan", nonblocking_collective=True):
            raise pickle.UnpicklingError("invalid load key")


def test_a_garbled_pickle_elsewhere_is_a_bug(ulfm):
    with pytest.raises(pickle.UnpicklingError):
        with guard("step 3"):
            raise pickle.UnpicklingError("invalid load key")
    configure_nbc_errors(False)  # without ULFM no peer can die mid-collective
    with pytest.raises(EOFError):
        with guard("recovery plan", nonblocking_collective=True):
            raise EOFError
