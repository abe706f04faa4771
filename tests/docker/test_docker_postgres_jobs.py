"""Async calls on the docker target with the jobs in a real PostgreSQL server, named by the
pushing shell's CHAINS_JOBS_STORE: the entrypoint's image gets the psycopg wheel from the
pushing machine's wheelhouse, its container reaches the server across the engine's bridge,
and the jobs outlive ``chains stop`` in the server, with no volume of the chain's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import Cli, remove_chain
from tests.helpers import write_chain
from tests.jobs.conftest import ENDED, Api
from tests.jobs.postgres import ReachablePostgres

pytestmark = pytest.mark.docker

NAME = "dk-pgjobs"
SHOUT = """
    import chains


    @chains.mark_entrypoint("dk-pgjobs")
    class Shout(chains.ChainletBase):
        remote_config = chains.RemoteConfig(
            docker_image=chains.DockerImage(pip_requirements=["psycopg[binary]"])
        )

        async def run_remote(self, text: str) -> str:
            return text.upper()
"""


def test_jobs_in_postgres_outlive_a_stop_with_no_volume(
    engine: Any, cli: Cli, container_postgres: ReachablePostgres, tmp_path: Path
) -> None:
    import psycopg

    remove_chain(engine, NAME)
    file = write_chain(tmp_path / "chain", SHOUT)
    cli.env["CHAINS_JOBS_STORE"] = container_postgres.url
    try:
        pushed = cli.push(str(file), "--timeout", "120")
        assert container_postgres.server.password
        assert container_postgres.server.password not in cli.run("status", NAME).stdout
        api = Api(pushed["entrypoint_url"])
        with api.http as http:
            ids = [api.submit({"text": f"job {i}"}) for i in range(4)]
            assert api.wait_all(ids, ENDED, timeout=60) == ["SUCCEEDED"] * 4
            assert http.get(f"/async_request/{ids[1]}/output").json() == "JOB 1"
        (entry,) = engine.containers({"chains.chain": NAME})
        address = next(iter(entry.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        with psycopg.connect(container_postgres.local_url) as db:
            # The entrypoint's store keeps its connection: from the container's own address, so
            # across the bridge, not through any port of the host's loopback.
            clients = db.execute(
                "SELECT host(client_addr) FROM pg_stat_activity WHERE client_addr IS NOT NULL"
            ).fetchall()
        assert (address,) in clients, (address, clients)

        cli.run("stop", NAME)
        assert engine.containers({"chains.chain": NAME}) == []
        with psycopg.connect(container_postgres.local_url) as db:
            rows = db.execute(
                "SELECT id, status FROM chains_dk_pgjobs.jobs WHERE id = ANY(%s)", (ids,)
            ).fetchall()
        assert sorted(rows) == sorted((job, "SUCCEEDED") for job in ids)

        again = cli.push(str(file), "--timeout", "120")
        api = Api(again["entrypoint_url"])
        with api.http as http:
            assert http.get(f"/async_request/{ids[3]}/output").json() == "JOB 3"
            late = api.submit({"text": "after"})
            assert api.wait_all([late], ENDED, timeout=60) == ["SUCCEEDED"]
        with psycopg.connect(container_postgres.local_url) as db:
            count = db.execute("SELECT count(*) FROM chains_dk_pgjobs.jobs").fetchone()
        assert count == (5,)
        # The default store, a SQLite file in a volume of the chain's, was never made.
        assert engine.client.volumes.list(filters={"label": f"chains.chain={NAME}"}) == []
        assert f"chains-{NAME}-jobs" not in {v.name for v in engine.client.volumes.list()}
    finally:
        cli.run("stop", NAME, check=False)
        remove_chain(engine, NAME)
        with psycopg.connect(container_postgres.local_url, autocommit=True) as db:
            db.execute("DROP SCHEMA IF EXISTS chains_dk_pgjobs CASCADE")
