"""The stack file of the swarm target, as data: no swarm needed (the rest of tests/swarm runs it)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from chains.loader import load_chain
from chains.targets.compose import swarm_document, swarm_secret_variables
from chains.targets.wiring import ChainWiring, wire
from tests.exports.conftest import CHAINS
from tests.exports.test_compose import compose_schema


def _wiring(name: str) -> ChainWiring:
    chain = load_chain(CHAINS[name])
    return wire(chain, {s.name: "v1" for s in chain.chainlets}, registry=None, environment="swarm")


def _document(
    name: str, *, api_key: bool = True, encrypted: bool = True
) -> tuple[ChainWiring, dict[str, Any]]:
    wiring = _wiring(name)
    variables = {v for c in wiring.chainlets for v in swarm_secret_variables(wiring, c, api_key)}
    secrets = {v: f"swarm-secret-{v.lower()}" for v in variables}
    images = {c.name: f"chains/x-{c.service}:v1-abc" for c in wiring.chainlets}
    return wiring, swarm_document(wiring, images, secrets, entry_port=8123, encrypted=encrypted)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_stack_file_is_valid_compose(name: str) -> None:
    _, document = _document(name)
    validator = jsonschema.Draft202012Validator(compose_schema())
    assert [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)] == []


def test_credentials_are_external_secrets_read_as_files_named_like_their_variables() -> None:
    wiring, document = _document("rich")
    assert all(
        spec == {"external": True, "name": f"swarm-secret-{v.lower()}"}
        for v, spec in document["secrets"].items()
    )
    for chainlet in wiring.chainlets:
        service = document["services"][chainlet.service]
        targets = sorted(s["target"] for s in service["secrets"])
        assert targets == sorted(swarm_secret_variables(wiring, chainlet, True))
        assert all(s["source"] == s["target"] and s["mode"] == 0o400 for s in service["secrets"])
        # Only the names of credentials reach the environment: none of their values.
        assert not {"CHAINS_INTERNAL_TOKEN", "CHAINS_API_KEY"} & set(service["environment"])
        assert not any(k.startswith("CHAINS_SECRET_") for k in service["environment"])
    # The secret files become variables before the server starts: the image's command, wrapped.
    entry = document["services"][wiring.entrypoint.service]
    assert entry["entrypoint"][:3] == ["python", "-I", "-c"] and "/run/secrets" in entry["entrypoint"][3]
    assert entry["command"][:2] == ["python", "server.py"]
    assert "CHAINS_API_KEY" in [s["target"] for s in entry["secrets"]]
    _, without_key = _document("rich", api_key=False)
    assert "CHAINS_API_KEY" not in json.dumps(without_key)


def test_dnsrr_everywhere_and_only_the_entrypoint_published_in_host_mode() -> None:
    wiring, document = _document("streaming")
    for chainlet in wiring.chainlets:
        service = document["services"][chainlet.service]
        deploy = service["deploy"]
        assert deploy["endpoint_mode"] == "dnsrr" and service["networks"] == ["chain"]
        if chainlet.is_entrypoint:
            assert service["ports"] == [
                {"target": 8000, "published": 8123, "protocol": "tcp", "mode": "host"}
            ]
            assert deploy["placement"]["constraints"] == ["node.role == manager"]
            assert deploy["update_config"]["order"] == "stop-first"  # one task holds the port
        else:
            assert "ports" not in service and "placement" not in deploy
            assert deploy["update_config"]["order"] == "start-first"
        assert deploy["update_config"]["failure_action"] == "rollback"
        assert service["healthcheck"]["interval"] == "2s"


def test_the_overlay_is_encrypted_unless_asked_not_to_be() -> None:
    _, encrypted = _document("hello")
    assert encrypted["networks"]["chain"]["driver_opts"] == {"encrypted": ""}
    _, plain = _document("hello", encrypted=False)
    assert "driver_opts" not in plain["networks"]["chain"]
