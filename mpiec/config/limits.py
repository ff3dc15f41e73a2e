"""The numeric limits of every input: configs, kill plans, strategy parameters.

One module of constants, importing nothing of the package, so that every module that checks an
input (``mpiec.config``, ``mpiec.failures.faults``, the strategies) can import them without importing
each other. Why each limit is what it is:

* ``MAX_RANKS`` (4096): every rank of a run, the monitor, trainers, servers, parity ranks and
  spares together.
* ``MAX_STEPS`` (1e9): ``training.steps``; it keeps what is derived from it finite.
* ``MAX_DEFAULT_TIMEOUT_S`` (1 day): the derived time limit of a run, 180 s + 2 s x steps, is at
  most this (1e9 steps derived a 63-year limit: a hung run was never ended); a longer run states
  its limit (``--timeout``, ``failures.timeout_s``, up to ``MAX_SECONDS``).
* ``MAX_SECONDS`` (1e9 s, about 32 years): ``failures.timeout_s`` and ``failures.mtbf_s``, and
  the times of kill plans; a timer cannot be armed much further (``OverflowError`` in the
  victim's timer thread, mid-run), and no run lasts that long.
* ``MAX_PARAM`` (1e9): every number of ``strategy.params`` (steps, seconds, MB), in magnitude,
  for the same reasons as ``MAX_STEPS`` and ``MAX_SECONDS``; what each strategy then derives
  from it stays in 64 bits.
* ``MAX_INPUT_BYTES`` (64 MiB): a file the launching process reads whole (``--config``, a fault
  trace, ``--costs``, ``--hostfile``; ``mpiec.config.inputs``). The largest real input, the LANL failure
  records (23,739 records), is a few MB; a bigger file is a wrong path, not an input.
"""

from __future__ import annotations

__all__ = ["MAX_DEFAULT_TIMEOUT_S", "MAX_INPUT_BYTES", "MAX_PARAM", "MAX_RANKS", "MAX_SECONDS", "MAX_STEPS"]

MAX_RANKS = 4096  # monitor + trainers + servers + parity ranks + spares
MAX_STEPS = 10**9  # keeps what is derived from training.steps finite
MAX_DEFAULT_TIMEOUT_S = 86400.0  # the derived time limit (180 s + 2 s x steps) at most a day
MAX_SECONDS = 1e9  # failures.timeout_s / mtbf_s, kill times: about 32 years
MAX_PARAM = 1e9  # every number of strategy.params (steps, seconds, MB): as MAX_STEPS and MAX_SECONDS
MAX_INPUT_BYTES = 64 * 2**20  # a config, trace, costs file or hostfile, read whole: mpiec.config.inputs
