"""The strategy registry: names, lazy imports, and the error for an unknown name."""

import subprocess
import sys

import pytest

from mpiec.errors import ConfigError
from mpiec.strategies import STRATEGIES, available, get_strategy_class
from mpiec.strategies.base import Strategy


def test_every_registered_class_is_a_strategy_named_as_its_key():
    assert len(STRATEGIES) == len(available()) >= 9
    for name, cls in STRATEGIES.items():
        assert issubclass(cls, Strategy) and cls.name == name


def test_an_unknown_name_lists_the_available_ones():
    with pytest.raises(ConfigError, match="unknown strategy 'nope'.*ckpt"):
        get_strategy_class("nope")


def test_asking_for_one_strategy_imports_no_other_and_no_mpi():
    code = ("import sys\n"
            "from mpiec.strategies import get_strategy_class\n"
            "get_strategy_class('ckpt')\n"
            "print(sorted(m for m in sys.modules if m.startswith('mpiec.strategies.')))\n"
            "print('mpi4py.MPI' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, mpi = out.splitlines()
    assert "ecrm" not in loaded and "cnr" not in loaded and "mpiec.strategies.ckpt" in loaded
    assert mpi == "False"
