"""The fleet simulator: replays a workload through modelled replicas under each balancer.

Entry points: :func:`trimtab.sim.running.run_scenario` and the ``sim`` click command in
:mod:`trimtab.sim.command`. Imports ``trimtab.api``, ``trimtab.policy`` and ``trimtab.replica``;
never kopf, never the network.
"""
