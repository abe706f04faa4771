from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# Session fixtures shared across folders: one browser for every test that drives a real browser
# (tests/browser, examples/web); one PostgreSQL server for the job stores of tests/jobs and of
# the chains pushed to ray.
pytest_plugins = ["tests.browser_support", "tests.jobs.postgres"]

ROOT = Path(__file__).parent

# `make test` runs the tests on two workers (pytest-xdist, `--dist loadgroup`), and the groups
# are this file's: each runs whole on one worker, in order, and they start in collection order,
# the "host" group and Ray's first, since they are the longest.
# - "host": what changes the machine itself (engines, the swarm, network namespaces, veth
#   links, tmpfs mounts), with the tests that compare the machine before and after
#   (tests/docker/host_state.py); run beside each other, each would see the other's changes.
# - "tests/ray/": the two-node cluster on 127.0.0.2 and 127.0.0.3, started once.
# - a folder whose session fixtures are slow to make (a consumer's venv, every example
#   generated or exported once) is one group, so that they are made once.
# - any other file is a group of its own, so that its module fixtures are made once.
# (pytest-xdist's own `xdist_group` marks are not used: under pytest 9 they group nothing.)
_HOST = (
    "tests/docker/",
    "tests/swarm/",
    "tests/reliability/test_dead_peer.py",
    "tests/reliability/test_state_faults.py",
    "tests/jobs/test_job_faults.py",
)
_FOLDERS = ("tests/ray/", "tests/client/", "tests/codegen/", "tests/exports/")
_FIRST = ("host", "tests/ray/")


def _group(path: str) -> str:
    """The group of the test file at ``path`` (relative to the repository, with slashes)."""
    if path.startswith(_HOST):
        return "host"
    return next((folder for folder in _FOLDERS if path.startswith(folder)), path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        group = _group(item.path.relative_to(ROOT).as_posix())
        return _FIRST.index(group) if group in _FIRST else len(_FIRST)

    items.sort(key=rank)  # stable: the order inside a group stays the collection's


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``, the groups above (a test id starts with its file's path)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False  # the collection's order, not the largest group first
    return Groups(config, log)
