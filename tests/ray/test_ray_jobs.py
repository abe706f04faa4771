"""Async calls on the ray target: the entrypoint's replicas, one on each node, share their
jobs in the session's PostgreSQL server (on 127.0.0.1, which both nodes of the test cluster
reach), named by the pushing shell's CHAINS_JOBS_STORE."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.jobs.postgres import Postgres
from tests.ray.cluster import RayCluster
from tests.ray.conftest import SAMPLES, Cli

pytestmark = pytest.mark.ray

PAIR = SAMPLES / "pair.py"


def test_jobs_run_on_both_replicas_and_are_kept_in_postgres(
    ray_cluster: RayCluster, postgres: Postgres, tmp_path: Path
) -> None:
    import psycopg

    cli = Cli(tmp_path / "home", ray_cluster)
    cli.env["CHAINS_JOBS_STORE"] = postgres.url
    try:
        pushed = cli.push(str(PAIR))
        # The URL may hold a password: it is never printed.
        assert postgres.url not in cli.run("status", "ray-pair").stdout
        with httpx.Client(
            base_url=pushed["entrypoint_url"], timeout=30, verify=ray_cluster.ssl_context() or True
        ) as http:
            ids = []
            for i in range(6):
                answer = http.post("/async_run_remote", json={"model_input": {"text": f"job {i}"}})
                assert answer.status_code == 200, answer.text
                ids.append(answer.json()["request_id"])
            deadline = time.monotonic() + 120
            while True:
                statuses = [http.get(f"/async_request/{job}").json()["status"] for job in ids]
                if all(s in ("SUCCEEDED", "FAILED") for s in statuses) or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert statuses == ["SUCCEEDED"] * 6
            assert http.get(f"/async_request/{ids[2]}/output").json() == ["JOB", "2"]
        with psycopg.connect(postgres.url) as connection:
            rows = connection.execute(
                "SELECT id, status FROM chains_ray_pair.jobs WHERE id = ANY(%s)", (ids,)
            ).fetchall()
        assert sorted(rows) == sorted((job, "SUCCEEDED") for job in ids)
    finally:
        cli.run("stop", "ray-pair", check=False)
