"""A picker in its own process, for the kill test: ``python picker_child.py POOL PODS_JSON``.

Prints ``PORT <n>`` once serving, then serves until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from trimtab.admission import AdmissionSettings, PodCapacity
from trimtab.api.records import PodName
from trimtab.picker import serve_picker


async def main(pool: str, pods: list[dict[str, str]]) -> None:
    async with serve_picker(host="127.0.0.1", port=0, ready=True) as picker:
        picker.pools.update(
            pool=pool,
            pods=[
                PodCapacity(
                    name=PodName(str(p["name"])), address=str(p["address"]), cap=int(p["cap"])
                )  # type: ignore[call-overload]
                for p in pods
            ],
            settings=AdmissionSettings(),
            now=time.monotonic(),
        )
        print(f"PORT {picker.port}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
