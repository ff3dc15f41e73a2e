"""The contract every registered strategy passes (``mpiec.contract``; docs/runtime.md, "Failures").

* failure-free, it trains exactly what ``none`` trains (same ``param_checksum``);
* every planned kill fires exactly once, and a strategy that recovers ends with
  the failure-free checksum (strategies that claim ``lossless``) or says it lost the run;
* the result file has the required fields, and every strategy summary key has a
  merge rule;
* no run sends a point-to-point message with a tag outside ``RankEnv.tags`` (the contract's runs
  audit the strategy's communicators: ``mpiec.comm.tags``; ``test_contract_checks.py`` shows it failing).

Every strategy of the registry is a case, an installed plug-in included (``mpiec.contract``'s
``default_cases``); the variants below add built-ins' non-default configurations. A plug-in's
author runs the same checks with ``python -m mpiec.contract NAME``.
"""

from __future__ import annotations

import pytest

from mpiec import contract
from mpiec.contract import Case

pytestmark = [pytest.mark.mpirun, pytest.mark.timeout(300)]

CNR_DIFFS = [Case(f"cnr:diff={d}", "cnr", ["--set", f"strategy.diff='{d}'",
                                         "--set", "strategy.quantization='none'"])
             for d in ("one-shot", "consecutive", "intermittent")]
ECRM_CODES = [Case("ecrm:code=rs:r=1", "ecrm", ["--set", "strategy.code='rs'"]),
              Case("ecrm:code=rs:k=2:r=2", "ecrm", ["--set", "strategy.code='rs'", "--set", "strategy.k=2",
                                                    "--set", "strategy.r=2", "--set", "layout.servers=4"]),
              Case("ecrm:code=sum", "ecrm", ["--set", "strategy.code='sum'"], lossless=False),  # sums drift
              Case("ecrm:parity_every=4", "ecrm", ["--set", "strategy.parity_every=4"])]  # batched commits
LOG_SPILL = [Case("log:log_memory_mb=0", "log", ["--set", "strategy.log_memory_mb=0"])]  # every record spills
CASES = [c for c in contract.default_cases() if c.name != "cnr"] + CNR_DIFFS + ECRM_CODES + LOG_SPILL


@pytest.fixture(scope="module")
def reference(failure_free):
    # what contract.reference_checksum runs (none on contract.BASE), shared with the kill matrix's
    return failure_free(*contract.BASE)["param_checksum"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_declarations(case):
    contract.check_declarations(case.name)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_failure_free_run_trains_what_none_trains(case, reference, tmp_path):
    contract.check_failure_free(case, reference, tmp_path)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_planned_kill_fires_once(case, reference, tmp_path):
    contract.check_kills(case, reference, tmp_path)
