"""Tests on a real two-node Ray cluster: the ray target's chains deployed as Serve applications.

The cluster (a head on 127.0.0.2, a worker on 127.0.0.3, see ``cluster.py``) is started once
for the session when Ray Serve is installed, and stopped at its end. Without Ray the tests are
skipped, saying how to enable them; with ``CHAINS_REQUIRE_RAY=1`` (CI) they fail instead.

``CHAINS_TEST_RAY_CLUSTER=DIR`` uses a cluster started beforehand with
``python -m tests.ray.cluster start DIR`` instead (left running).

Chains pushed here have names starting with ``ray-``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import helpers
from tests.ray.cluster import RayCluster

REQUIRED = os.environ.get("CHAINS_REQUIRE_RAY") == "1"
RESULTS = Path(__file__).parent / "results"
SAMPLES = Path(__file__).parent / "sample_chains"
ROOT = Path(__file__).parents[2]


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"CHAINS_REQUIRE_RAY=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """The session's two-node cluster, with Serve's one proxy on the head."""
    try:
        import ray.serve  # noqa: F401
    except ImportError:
        unavailable("Ray Serve is not installed; enable these tests with: pip install -e '.[dev,ray]'")
    given = os.environ.get("CHAINS_TEST_RAY_CLUSTER")
    if given:
        # A cluster started beforehand with `python -m tests.ray.cluster start DIR`: used, not stopped.
        yield RayCluster.load(Path(given))
        return
    cluster = RayCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


class Cli(helpers.Cli):
    """The command line pushing to the session's cluster."""

    def __init__(self, home: Path, cluster: RayCluster) -> None:
        super().__init__(home, env=cluster.env, target="ray", timeout=300)


@pytest.fixture
def cli(ray_cluster: RayCluster, tmp_path: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path / "home", ray_cluster)
    yield tool
    for state_file in tool.home.glob("*/state.json"):
        tool.run("stop", state_file.parent.name, check=False)


def record(test: str, **figures: object) -> None:
    """Write a test's figures to ``results/<test>.json``, which docs/reliability.md is filled from."""
    RESULTS.mkdir(exist_ok=True)
    body = {"test": test, "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S"), **figures}
    (RESULTS / f"{test}.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
