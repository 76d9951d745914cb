"""The ``gatewayAPI`` target: a pool's weights as weight tiers of one HTTPRoute rule.

Gateway API weighs backends (Services), not pods, and a rule takes at most 16 of them, so the
pool's pods are grouped into weight tiers (:mod:`.tiers`); each tier is a selector-less Service
plus EndpointSlices owned by the pool (:mod:`.objects`), and the rule's ``backendRefs`` weigh
the tiers. :mod:`.moves` orders the writes so that no weighted backend is ever empty, and
:mod:`.target` drives it all through an injected :class:`~.target.GatewayAPIWriter`; only
``trimtab.kube`` implements that writer.
"""
