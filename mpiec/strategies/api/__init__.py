"""The strategy API: what a strategy (built-in or plug-in) implements and what the runtime calls.

* ``base`` — ``Strategy``, the factory: its declarations and one agent per role;
* ``agents`` — ``Coordinator``, ``TrainerAgent``, ``ServerAgent``, ``ParityAgent``, ``Agent``: the
  hooks and when each runs;
* ``env`` — ``RankEnv`` (a rank as an agent sees it) and the role-state protocols;
* ``params`` — typed ``strategy.KEY`` parameters (``param``);
* ``header`` — named bit fields of the step header's word;
* ``plan`` — ``Failure``, ``RecoveryPlan``, ``Scope``, ``ServerShard``;
* ``compose`` — agents made of parts;
* ``costs`` — ``CostModel``, the simulator's price of a strategy;
* ``cover`` — ``CorruptionCover``, what a strategy sees of a silent corruption.

A plug-in imports these modules (``from mpiec.strategies.api.base import Strategy``); the older
paths ``mpiec.strategies.base``, ``.agents``, ``.env``, ``.params``, ``.costs`` and ``.compose``
re-export them for plug-ins written before this folder existed. The API imports no strategy and
no role (``tests/test_import_graph.py``).
"""
