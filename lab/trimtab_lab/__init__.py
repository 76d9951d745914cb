"""trimtab's lab: the replica model, fleet simulator, HTTP emulator, demo and Envoy runner.

Offline tooling beside the operator: it may import :mod:`trimtab`, never the reverse, and the
operator image does not carry it.
"""
