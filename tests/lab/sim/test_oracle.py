"""The ``oracle`` balancer: whole KV footprints reserved, FIFO, never a preemption.

Covered: a request waits in the shared queue until a replica's unreserved KV holds its whole
prompt-plus-output footprint, even when its prompt alone would fit now; the head goes to the
replica with the most unreserved KV; reservations return when requests end; a KV-bound burst
that preempts under ``ideal`` never preempts under ``oracle``. Not covered: latency figures.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from trimtab_lab.replica import Replica, get_profile
from trimtab_lab.sim.balancers import SharedQueue
from trimtab_lab.sim.engine import RequestStatus, RunRecord, simulate
from trimtab_lab.sim.oracle import Oracle
from trimtab_lab.sim.workloads import Workload

SMALL = replace(get_profile("llama3-8b-h100"), name="small", num_gpu_blocks=200)


def _run(
    *, requests: list[tuple[float, int, int]], replicas: list[Replica], balancer: object
) -> RunRecord:
    arrival, prompt, output = zip(*requests, strict=True)
    workload = Workload(
        arrival_s=np.array(arrival, dtype=np.float64),
        prompt_tokens=np.array(prompt, dtype=np.int64),
        output_tokens=np.array(output, dtype=np.int64),
        source="test",
    )
    return simulate(
        replicas=replicas,
        workload=workload,
        balancer_factory=lambda: balancer,  # type: ignore[arg-type,return-value]
        duration_s=600.0,
        drain_s=600.0,
    )


def test_oracle_waits_until_the_whole_footprint_fits() -> None:
    oracle = Oracle()
    record = _run(
        requests=[
            (0.0, 160, 2_400),  # 160 blocks reserved of the 198 usable, though it starts at 10
            (0.01, 16, 1_000),  # 64 blocks: its prompt fits now, its footprint does not
        ],
        replicas=[Replica(profile=SMALL)],
        balancer=oracle,
    )
    assert record.status.tolist() == [RequestStatus.COMPLETED] * 2
    assert record.scheduled_s[1] >= record.finish_s[0]
    assert record.preemptions == 0
    # Every reservation came back.
    assert oracle.unreserved_blocks == (198,)


def test_oracle_sends_the_head_to_the_most_unreserved_kv() -> None:
    record = _run(
        requests=[(0.0, 1_000, 1_500), (0.01, 100, 10), (0.02, 100, 10)],
        replicas=[Replica(profile=SMALL), Replica(profile=SMALL), Replica(profile=SMALL)],
        balancer=Oracle(),
    )
    # 0 takes the first empty replica, 1 the next empty one, 2 the last one still empty
    # (198 unreserved blocks against the 191 that 1 left).
    assert record.host.tolist() == [0, 1, 2]


def test_oracle_never_preempts_where_ideal_does() -> None:
    rng = np.random.default_rng(5)
    count = 60
    requests = sorted(
        zip(
            np.sort(rng.uniform(0, 5, count)).tolist(),
            rng.integers(200, 1_200, count).tolist(),
            rng.integers(200, 1_500, count).tolist(),
            strict=True,
        )
    )
    ideal = _run(
        requests=requests,
        replicas=[Replica(profile=SMALL), Replica(profile=SMALL)],
        balancer=SharedQueue(),
    )
    oracle = _run(
        requests=requests,
        replicas=[Replica(profile=SMALL), Replica(profile=SMALL)],
        balancer=Oracle(),
    )
    assert ideal.preemptions > 0
    assert oracle.preemptions == 0
    assert np.all(oracle.status == RequestStatus.COMPLETED)
