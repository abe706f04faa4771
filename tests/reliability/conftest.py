"""What the reliability tests share: pushed chains, process facts, and the figures file.

Every process a fixture starts is stopped by it; every wait is bounded. Traffic goes to
127.0.0.1 only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from chains.deploy import ChainHandle, push_chain, stop_chain
from chains.loader import load_chain
from chains.targets import PushOptions
from chains.targets.state import ChainState, Deployment, chain_dir, read_state
from tests.nginx import nginx_binary

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
SAMPLE = HERE / "sample_chains" / "reliability_chains.py"


def record(test: str, **figures: object) -> None:
    """Write a test's figures to ``results/<test>.json``, which docs/reliability.md is filled from."""
    RESULTS.mkdir(exist_ok=True)
    body = {"test": test, "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S"), **figures}
    (RESULTS / f"{test}.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


# -- pushed chains ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chains_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A CHAINS_HOME of the module's own; whatever still runs in it at the end is stopped."""
    home = tmp_path_factory.mktemp("chains-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHAINS_HOME", str(home))
        try:
            yield home
        finally:
            for state in home.glob("*/state.json"):
                stop_chain(state.parent.name, grace=5)


@contextmanager
def pushed(entrypoint: str, name: str, file: Path = SAMPLE, timeout: float = 60) -> Iterator[ChainHandle]:
    """Push chain ``name`` with ``entrypoint`` from ``file`` (as ``chains push`` does) and stop it after."""
    chain = load_chain(file, entrypoint, name)
    handle = push_chain(chain, file, "local", PushOptions(timeout=timeout))
    try:
        yield handle
    finally:
        stop_chain(name, grace=5)


def processes(name: str, chainlet: str) -> list[int]:
    """The pids of ``chainlet``'s replicas now, as the supervisor recorded them."""
    return [p.pid for p in read_state(name).replicas(chainlet) if p.pid]


def deployment(name: str) -> Deployment:
    state = read_state(name)
    path = chain_dir(name) / "deployments" / state.deployment / "deployment.json"
    return Deployment.model_validate_json(path.read_text())


def token_of(name: str) -> str:
    """The chain's internal token, read from its owner-only deployment file, as its owner may."""
    return deployment(name).chainlets[0].env["CHAINS_INTERNAL_TOKEN"]


def all_ready(name: str) -> bool:
    state: ChainState = read_state(name)
    return all(p.state == "ready" for p in state.processes)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the ``chains`` command line (with this process's CHAINS_HOME)."""
    return subprocess.run(
        [sys.executable, "-m", "chains", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def status_restarts(name: str) -> dict[str, int]:
    """The RESTARTS column of ``chains status NAME``, by the CHAINLET column."""
    result = cli("status", name)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line.split() for line in lines if line.strip().startswith("CHAINLET"))
    column = header.index("RESTARTS")
    rows = [
        line.split() for line in lines if line.startswith("  ") and not line.strip().startswith("CHAINLET")
    ]
    return {row[0]: int(row[column]) for row in rows}


def rss_kib(pid: int) -> int:
    """The resident set size of ``pid`` (VmRSS in /proc/<pid>/status), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def metric(url: str, name: str) -> float:
    """One sample of a chainlet's /metrics, by its full name with labels (0 when absent)."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture(scope="session")
def nginx_bin() -> str:
    return nginx_binary()
