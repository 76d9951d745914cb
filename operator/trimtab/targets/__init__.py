"""Where decisions go: the built-in xDS server, file or ConfigMap EDS, or status only.

Every target implements :class:`trimtab.targets.base.Target`: it takes a pool's whole decision
and reports through ``state`` whether the data plane holds it.
"""
