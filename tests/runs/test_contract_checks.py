"""The contract's own checks catch what they claim to (issue 38, items 5 and 7; ``mpiec.contract``).

Throw-away plug-ins (``plugin_helpers.install``):

* ``h38-own-tag`` — a server hook sends on ``servers`` with a tag it picked by hand: the tag
  audit stops the run and the failure-free check names the tag;
* ``h38-broken-replica`` — the example ``replica`` with one step of its replica update skipped
  (a deterministic stand-in for a skipped undo, which only bites when a kill lands between a
  server's apply and the end of its step, never at the contract's step-boundary kills): the
  server rebuilt from that replica comes back with stale rows, and ``python -m mpiec.contract``
  names the first divergent step, the shard and rows (per-step shard digests, ``roles.digests``).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from plugin_helpers import install

from mpiec import contract
from mpiec.contract import Case, ContractError

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(600)]

SKIPPED = 5  # the step whose replica update the broken copy skips

PLUGINS = f'''
import numpy as np
from mpiec.comm import guard, waitall
from mpiec.strategies.api.agents import ServerAgent
from mpiec.strategies.api.base import Strategy
from mpiec_replica import ReplicaServer, Replication

SKIPPED = {SKIPPED}


class OwnTagServer(ServerAgent):
    def before_step(self, step):
        if step == 2:
            comm = self.env.comms.servers
            me, n = comm.Get_rank(), comm.Get_size()
            got = np.empty(1, np.int64)
            with guard("h38 ring"):
                reqs = [comm.Irecv(got, source=(me - 1) % n, tag=7301),
                        comm.Isend(np.array([me], np.int64), dest=(me + 1) % n, tag=7301)]
            waitall(reqs, "h38 ring")


class OwnTag(Strategy):
    name = "h38-own-tag"
    description = "test plug-in: a server hook sends with a hand-picked tag"

    def server(self, env, role):
        return OwnTagServer(env)


class SkippingServer(ReplicaServer):
    """replica, except that the replica keeps its rows of step SKIPPED - 1 for step SKIPPED."""

    def after_apply(self, step, slots, old, delta, replayed=False):
        if step != SKIPPED or replayed or self.replica is None:
            return super().after_apply(step, slots, old, delta, replayed)
        kept = self.replica.copy()
        super().after_apply(step, slots, old, delta, replayed)
        self.replica[...] = kept  # the bug: step SKIPPED never reaches the replica


class BrokenReplica(Replication):
    name = "h38-broken-replica"
    description = "test plug-in: replica with one replica update skipped"

    def server(self, env, role):
        return SkippingServer(env, role, self.params)
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    try:
        import mpiec_replica  # noqa: F401  (the plug-ins build on the example)
    except ImportError:
        pytest.fail("the example plug-in is not installed: run 'pip install -e examples/mpiec-replica'")
    return install(tmp_path, monkeypatch, {"h38plugins": PLUGINS},
                   {"h38-own-tag": "h38plugins:OwnTag", "h38-broken-replica": "h38plugins:BrokenReplica"})


def test_a_hand_picked_tag_fails_the_contract(plugins, tmp_path):
    with pytest.raises(ContractError) as err:
        contract.check_failure_free(Case("h38-own-tag", "h38-own-tag"), "", tmp_path)
    message = str(err.value)
    assert "a message with a tag that is not the strategy's" in message, message
    assert "tag 7301" in message and "RankEnv.tags" in message, message


def test_the_contract_names_the_first_divergent_step_and_shard(plugins, tmp_path):
    # the author's command, as a command: the plug-in is registered for the processes this test starts
    proc = subprocess.run([sys.executable, "-P", "-m", "mpiec.contract", "h38-broken-replica",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=560)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr[-2000:]
    assert "PASS  failure-free" in out, out  # the replica is never read without a failure
    line = next(ln for ln in out.splitlines() if ln.startswith("FAIL  planned kills"))
    found = re.search(r"first divergence: server (\d+) at step (\d+) \(as training resumed after a "
                      r"recovery\): (\d+) of \d+ rows differ from the failure-free run; global rows \d", line)
    assert found, line
    server_kill = re.search(r"server:(\d+)@step=(\d+)", contract.KILLS)
    assert server_kill
    # the rebuilt server, at the step its rows were restored to: after the skipped step, before the kill
    assert int(found[1]) == int(server_kill[1]), line
    assert SKIPPED <= int(found[2]) < int(server_kill[2]) and int(found[3]) > 0, line
    assert list((tmp_path / "shard-digests").glob("server*/step*.npy"))  # recorded failure-free
