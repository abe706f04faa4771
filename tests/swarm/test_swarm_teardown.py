"""``docker/swarm-cluster.sh stop`` leaves the machine as ``start`` found it.

The session's cluster is stopped and compared with the machine as it was before the session
started it: the filter and nat tables (policies included), forwarding, the links, the mounts
and the network namespaces. Then it is started again for the tests after this one. Before the
stop a service publishes a port through the swarm's routing mesh, on an overlay network of its
own, so that node 1 has made what swarm mode makes (docker_gwbridge and its rules, the
ingress and overlay namespaces' files; DOCKER-INGRESS where the kernel has IPVS).
"""

from __future__ import annotations

import pytest

from tests import helpers
from tests.docker.host_state import changes, host_state
from tests.swarm.conftest import BASE_IMAGE, Swarm


def test_stop_leaves_the_machine_as_start_found_it(swarm: Swarm) -> None:
    if swarm.before is None:
        pytest.skip("CHAINS_SWARM_DIR keeps the cluster running across runs: nothing to compare")
    network = "sw-teardown"
    swarm.docker("network", "create", "--driver", "overlay", network)
    swarm.docker(
        "service", "create", "--detach", "--name", network, "--network", network,
        "--no-resolve-image", "--constraint", "node.role==manager",
        "--publish", f"published={helpers.unique_port()},target=8000",
        BASE_IMAGE, "sleep", "600",
    )  # fmt: skip
    helpers.wait_until(
        lambda: "Running" in swarm.docker("service", "ps", network, "--format", "{{.CurrentState}}"),
        60,
        "the service to run",
        poll=0.5,
    )
    during = changes(swarm.before, host_state())
    made_by_swarm = (
        "+ links docker_gwbridge",
        "+ filter -A FORWARD -o docker_gwbridge",
        "+ namespaces chains-sw-",
    )
    for made in made_by_swarm:
        assert any(line.startswith(made) for line in during), (made, during)

    between = swarm.restart()
    assert changes(swarm.before, between) == []
