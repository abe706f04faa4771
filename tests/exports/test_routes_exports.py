"""A chain with @chains.route endpoints in the exports: Kubernetes and Compose carry them in the
chainlets' generated servers (the same code every running target serves), Truss refuses the chain."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from chains.errors import ChainsUsageError
from tests.exports.conftest import CHAINS, Export, export
from tests.exports.test_kubernetes import VERSIONS, objects


@pytest.mark.parametrize("target", ["k8s", "compose"])
def test_the_front_doors_routes_are_in_the_export(
    target: str, k8s: dict[str, Export], compose: dict[str, Export]
) -> None:
    exported = (k8s if target == "k8s" else compose)["openai"]
    front = next(p for p in exported.out.rglob("Front/src/chain.py"))
    source = front.read_text()
    assert '@chains.route("POST", "/v1/chat/completions", errors=oai.error_body)' in source
    assert (front.parents[1] / "server.py").is_file()


def test_the_truss_export_refuses_routes_it_cannot_serve(tmp_path: Path) -> None:
    with pytest.raises(ChainsUsageError) as info:
        export("truss", CHAINS["openai"], tmp_path)
    message = str(info.value)
    assert "the truss export serves run_remote alone" in message
    assert "Front: POST /v1/chat/completions" in message and "Front: GET /v1/models/{model}" in message
    assert not (tmp_path / "out").exists()


ROUTED = Path(__file__).parents[1] / "routes" / "routed_chain.py"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_chain_whose_dependency_serves_routes_exports_valid_kubernetes_manifests(
    tmp_path: Path, version: str
) -> None:
    # Both chainlets have routes: the entrypoint its own, the Shop those Front's stubs call.
    exported = export("kubernetes", ROUTED, tmp_path, registry="registry.example:5000/team")
    found = objects(exported)
    deployments = {o["metadata"]["name"]: o for o in found if o["kind"] == "Deployment"}
    assert len(deployments) == 2 and {o["kind"] for o in found} >= {"Service", "NetworkPolicy"}
    for obj in found:
        kubernetes_validate.validate(obj, version, strict=True)
    # The routes travel in each chainlet's generated server, and Front's stub of the Shop
    # calls them by method name.
    stub = next(exported.out.rglob("Front/chains_stubs/shop.py")).read_text()
    assert "async def place(" in stub and "await call_method(" in stub
    assert 'stream_method(self, "count"' in stub
