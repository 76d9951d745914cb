"""The fleet simulator: replays a workload through modelled replicas under each balancer.

Entry points: :func:`trimtab_lab.sim.running.run_scenario` and the ``sim`` click command in
:mod:`trimtab_lab.sim.command`. Imports ``trimtab.api``, ``trimtab.policy`` and
``trimtab_lab.replica``;
never kopf, never the network.
"""
