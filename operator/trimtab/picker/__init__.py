"""The endpoint picker: an ext_proc server speaking the Gateway API Inference Extension protocol.

Run it with :func:`serve_picker`; feed it each pool's pods and admission settings with
``PickerServer.pools.update(pool=..., pods=..., settings=..., now=...)``. A request names its
pool by the ``x-trimtab-pool`` gRPC metadata the bootstrap sets per route (else the request
header of the same name; else the one pool, when there is exactly one). A pool the picker does
not know is passed through to Envoy's fallback policy, the weights.
"""

from trimtab.picker.pools import PickerPool, PickerPools
from trimtab.picker.serving import (
    EXT_PROC_SERVICE,
    LIVENESS,
    READINESS,
    PickerServer,
    serve_picker,
)

__all__ = [
    "EXT_PROC_SERVICE",
    "LIVENESS",
    "READINESS",
    "PickerPool",
    "PickerPools",
    "PickerServer",
    "serve_picker",
]
