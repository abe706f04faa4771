"""Async calls on the swarm with the jobs in a real PostgreSQL server, named by the pushing
shell's CHAINS_JOBS_STORE (a swarm secret of the push): the entrypoint's task (on node 1, the
manager, where entrypoints run) reaches the server on the host's end of the link between the
nodes, its image has the psycopg wheel, and the jobs outlive ``chains stop`` in the server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.helpers import unique_port, write_chain
from tests.jobs.conftest import ENDED, Api
from tests.jobs.postgres import ReachablePostgres
from tests.swarm.conftest import Cli, Swarm, remove_stack, service_tasks

NAME = "sw-pgjobs"
SHOUT = """
    import chains


    @chains.mark_entrypoint("sw-pgjobs")
    class Shout(chains.ChainletBase):
        remote_config = chains.RemoteConfig(
            docker_image=chains.DockerImage(pip_requirements=["psycopg[binary]"]),
        )

        async def run_remote(self, text: str) -> str:
            return text.upper()
"""


def test_jobs_in_postgres_outlive_a_stop_on_the_swarm(
    swarm: Swarm, swarm_postgres: ReachablePostgres, tmp_path: Path, cache_dir: Path
) -> None:
    import psycopg

    remove_stack(swarm, NAME)
    file = write_chain(tmp_path / "chain", SHOUT)
    cli = Cli(swarm, tmp_path / "home", cache_dir)
    cli.env["CHAINS_JOBS_STORE"] = swarm_postgres.url
    port = str(unique_port())
    try:
        pushed = cli.push(str(file), "--timeout", "180", "--port", port)
        assert swarm_postgres.server.password
        assert swarm_postgres.server.password not in cli.run("status", NAME).stdout
        service = f"{NAME}_{NAME}-shout"
        assert [t["State"] for t in service_tasks(swarm, service)] == ["running"]
        api = Api(pushed["entrypoint_url"])
        with api.http as http:
            ids = [api.submit({"text": f"job {i}"}) for i in range(6)]
            assert api.wait_all(ids, ENDED, timeout=90) == ["SUCCEEDED"] * 6
            assert http.get(f"/async_request/{ids[4]}/output").json() == "JOB 4"
        (container,) = swarm.docker(
            "ps", "--filter", f"label=com.docker.swarm.service.name={service}", "--no-trunc", "-q"
        ).split()
        # A task's endpoint on docker_gwbridge is not in its own inspect output, only the network's.
        bridge = json.loads(swarm.docker("network", "inspect", "docker_gwbridge"))[0]
        address = bridge["Containers"][container]["IPv4Address"].split("/")[0]
        with psycopg.connect(swarm_postgres.local_url) as db:
            clients = db.execute(
                "SELECT host(client_addr) FROM pg_stat_activity WHERE client_addr IS NOT NULL"
            ).fetchall()
        # The task's connection comes from its own address on the node's docker_gwbridge: the
        # URL from the swarm secret, across the bridge, not through the host's loopback.
        assert (address,) in clients, (address, clients)

        cli.run("stop", NAME)
        with psycopg.connect(swarm_postgres.local_url) as db:
            rows = db.execute(
                "SELECT id, status FROM chains_sw_pgjobs.jobs WHERE id = ANY(%s)", (ids,)
            ).fetchall()
        assert sorted(rows) == sorted((job, "SUCCEEDED") for job in ids)

        again = cli.push(str(file), "--timeout", "180", "--port", port)
        with httpx.Client(base_url=again["entrypoint_url"], timeout=30) as http:
            assert http.get(f"/async_request/{ids[1]}/output").json() == "JOB 1"
    finally:
        cli.run("stop", NAME, check=False)
        remove_stack(swarm, NAME)
        with psycopg.connect(swarm_postgres.local_url, autocommit=True) as db:
            db.execute("DROP SCHEMA IF EXISTS chains_sw_pgjobs CASCADE")
