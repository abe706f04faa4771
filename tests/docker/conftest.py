"""Tests on a real container engine: real images, containers and networks, no mocks.

They run when an engine answers at ``DOCKER_HOST`` (or the default socket) and has the base
image ``CHAINS_TEST_BASE_IMAGE`` (default ``chains-python:bookworm``, which
``docker/build-base-image.sh`` builds with no registry). Otherwise they are skipped, saying
why; with ``CHAINS_REQUIRE_DOCKER=1`` (CI) they fail instead.

Chains pushed here have names starting with ``dk-``; whatever a test leaves on the engine
under those names is removed after it.

``container_postgres`` is a PostgreSQL server the chains' containers reach: started once for
this folder's tests, when one first asks for it, on the gateway address of a network of the
engine's own (``chains-test-postgres``, which no container joins: the address is the host's, and
every container reaches its host's addresses through its own network's gateway).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chains.errors import ChainsRuntimeError
from tests import helpers
from tests.jobs.postgres import ReachablePostgres, remove, start_postgres

REQUIRED = os.environ.get("CHAINS_REQUIRE_DOCKER") == "1"
BASE_IMAGE = os.environ.get("CHAINS_TEST_BASE_IMAGE") or "chains-python:bookworm"
ROOT = Path(__file__).parents[2]
POSTGRES_NETWORK = "chains-test-postgres"
# Where the engine takes its networks' subnets from: dockerd's default address pools, which
# docker/start-engine.sh leaves as they are. A chain's network is made by its push, so its
# subnet is not known before; the server lets in these, and only with the password.
ENGINE_POOLS = ("172.16.0.0/12", "192.168.0.0/16")


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"CHAINS_REQUIRE_DOCKER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine() -> Any:
    """The engine the tests run on (a ``chains.targets.docker_engine.Engine``)."""
    try:
        import docker  # noqa: F401
    except ImportError:
        unavailable("the docker SDK is not installed (pip install -e '.[dev]')")
    from chains.targets.docker_engine import connect

    try:
        found = connect(timeout=10)
    except ChainsRuntimeError as exc:
        unavailable(f"no container engine: {exc}")
        raise
    if found.image_id(BASE_IMAGE) is None:
        unavailable(
            f"the base image {BASE_IMAGE} is not on the engine; build it with "
            f"docker/build-base-image.sh {BASE_IMAGE}, or name another with CHAINS_TEST_BASE_IMAGE"
        )
    return found


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel cache for the session: wheels are gathered once, by the first push."""
    return tmp_path_factory.mktemp("chains-cache")


class Cli(helpers.Cli):
    """The command line pushing to the docker target, with the session's wheel cache and base image."""

    def __init__(self, home: Path, cache: Path) -> None:
        env = {"CHAINS_CACHE_DIR": str(cache), "CHAINS_BASE_IMAGE": BASE_IMAGE}
        super().__init__(home, env=env, target="docker", timeout=600)


def remove_chain(engine: Any, name: str) -> None:
    """Remove every container, network and volume (its jobs) of chain ``name`` from the engine."""
    for container in engine.containers({"chains.chain": name}):
        container.remove(force=True)
    for network in engine.client.networks.list(filters={"label": f"chains.chain={name}"}):
        network.remove()
    for volume in engine.client.volumes.list(filters={"label": f"chains.chain={name}"}):
        volume.remove(force=True)


@pytest.fixture
def cli(engine: Any, tmp_path: Path, cache_dir: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path / "home", cache_dir)
    yield tool
    for state_file in tool.home.glob("*/state.json"):
        tool.run("stop", state_file.parent.name, check=False)


def dangling_images(engine: Any) -> set[str]:
    return {str(image.id) for image in engine.client.images.list(filters={"dangling": True})}


# Package, not session: the network must be gone before tests/swarm starts its cluster, whose
# node 1 (a dockerd in this host's namespace too) drops every other engine's bridge isolation
# rules when it starts, and tests/swarm/test_swarm_teardown.py then finds them missing.
@pytest.fixture(scope="package")
def container_postgres(engine: Any) -> Iterator[ReachablePostgres]:
    """A PostgreSQL server listening on 127.0.0.1 and on the gateway of the network
    ``chains-test-postgres``, letting in the engine's subnets with a password."""
    with contextlib.suppress(engine.errors.NotFound):
        engine.client.networks.get(POSTGRES_NETWORK).remove()  # left by a run that was killed
    network = engine.client.networks.create(
        POSTGRES_NETWORK, driver="bridge", labels={"chains.test": "postgres"}, check_duplicate=True
    )
    try:
        network.reload()
        gateway = str(network.attrs["IPAM"]["Config"][0]["Gateway"])
        server = start_postgres(also_listen=[gateway], clients=ENGINE_POOLS)
        try:
            yield ReachablePostgres(server, gateway)
        finally:
            remove(server)
    finally:
        network.remove()
