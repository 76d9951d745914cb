"""Reading a pool's load from its engines: one :class:`~trimtab.metrics.source.MetricsSource`
interface, two implementations (``prometheus``: batched PromQL; ``direct``: scrape each pod).

:mod:`engines` names each engine's series, :mod:`exposition` parses Prometheus text,
:mod:`rates` turns counters into rates, and :func:`trimtab.metrics.source.build_source` picks
the implementation from a pool's spec.
"""
