"""Locust users for ``scripts/load_service.py``: loaders asking the service for champions.

Each user loops without pause (a closed loop: the figures are the service's throughput at this
many requests in flight, and its latency under that queue) over, by weight:

- 8 ``GET /v1/kernels/best`` at a problem drawn from ``PROBLEMS`` (every path and dtype the
  seeded store has a champion for, at shapes inside their envelopes);
- 1 ``GET /v1/manifest?gpu=nvidia-h200`` without a validator (200, every champion's cubin);
- 1 the same with ``If-None-Match`` set to the manifest's ETag (304, no body): what a loader
  polling the manifest sends.

Any other status is a failure. Run it through ``scripts/load_service.py``, which seeds the store
and starts the service; by hand: ``locust -f scripts/locustfile_service.py --headless -u 16 -r
16 -t 20s --host http://127.0.0.1:8000``.
"""

from __future__ import annotations

import random

from locust import FastHttpUser, constant, task

GPU = "nvidia-h200"
# (dtype, m, n): trsm_small below 64, trsm_small_z64 and trsm_small compared at complex128 m = 64,
# trsm_blocked above 128.
PROBLEMS = [
    ("float32", 32, 32),
    ("float64", 64, 64),
    ("complex64", 48, 17),
    ("complex128", 64, 64),
    ("complex128", 40, 64),
    ("float32", 512, 512),
    ("float64", 1024, 256),
    ("complex64", 2048, 64),
    ("complex128", 256, 256),
]


class ChampionReader(FastHttpUser):
    """A loader: the best kernel for a problem, and the manifest (fresh and conditional)."""

    wait_time = constant(0)

    def on_start(self) -> None:
        response = self.client.get(f"/v1/manifest?gpu={GPU}", name="/v1/manifest (first)")
        self.etag = response.headers.get("etag", "")

    @task(8)
    def best_kernel(self) -> None:
        dtype, m, n = random.choice(PROBLEMS)
        self.client.get(
            f"/v1/kernels/best?op=trsm&dtype={dtype}&gpu={GPU}&m={m}&n={n}",
            name="/v1/kernels/best",
        )

    @task(1)
    def manifest(self) -> None:
        self.client.get(f"/v1/manifest?gpu={GPU}", name="/v1/manifest (200)")

    @task(1)
    def manifest_not_modified(self) -> None:
        with self.client.get(
            f"/v1/manifest?gpu={GPU}",
            headers={"If-None-Match": self.etag},
            name="/v1/manifest (304)",
            catch_response=True,
        ) as response:
            if response.status_code == 304:
                response.success()
            else:
                response.failure(f"expected 304, got {response.status_code}")
