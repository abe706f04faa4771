"""A chain with @chains.route endpoints in the exports: Kubernetes and Compose carry them in the
chainlets' generated servers (the same code every running target serves), Truss refuses the chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from chains.errors import ChainsUsageError
from tests.exports.conftest import CHAINS, Export, export


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
