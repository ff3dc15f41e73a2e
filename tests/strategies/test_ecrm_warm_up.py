"""``ecrm``'s warm-up loads every kernel a rebuild runs, before the clock (issue 40: a fresh
clone compiled them inside its first recovery, a round of seconds)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# a fresh process: in this one other tests may have loaded the kernels already
PROBE = """
import json
from mpiec.kernels import gf256, rebuild
from mpiec.kernels.codes import make_code
from mpiec.strategies.ecrm.member import warm_up
kernels = {"take_rows": rebuild._take_rows, "combine_into": rebuild._combine_into,
           "pending_rows": rebuild._pending_rows, "gf_mat_inv": gf256.gf_mat_inv,
           "gf_matmul": gf256.gf_matmul}
if gf256.gfni_active():
    kernels["combine_tiles"] = rebuild._combine_tiles
before = {name: len(k.signatures) for name, k in kernels.items()}
warm_up(make_code("CODE", 2, R), 64)
print(json.dumps({name: (before[name], len(k.signatures)) for name, k in kernels.items()}))
"""


@pytest.mark.slow  # a fresh process: numba's import and cache loads, seconds
@pytest.mark.parametrize("code,r", [("xor", 1), ("rs", 2)])
def test_the_warm_up_loads_every_rebuild_kernel(code, r):
    probe = PROBE.replace("CODE", code).replace("R)", f"{r})")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    loaded = json.loads(out)
    assert all(before == 0 and after >= 1 for before, after in loaded.values()), loaded
