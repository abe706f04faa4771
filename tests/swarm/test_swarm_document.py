"""The stack file of the swarm target, as data: no swarm needed (the rest of tests/swarm runs it)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from chains.loader import load_chain
from chains.targets.swarm_stack import SwarmTlsSecrets, swarm_document, swarm_secret_variables
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


def _tls_document(name: str) -> tuple[ChainWiring, dict[str, Any]]:
    chain = load_chain(CHAINS[name])
    wiring = wire(
        chain, {s.name: "v1" for s in chain.chainlets}, registry=None, environment="swarm", scheme="https"
    )
    variables = {v for c in wiring.chainlets for v in swarm_secret_variables(wiring, c, False)}
    secrets = {v: f"swarm-secret-{v.lower()}" for v in variables}
    images = {c.name: f"chains/x-{c.service}:v1-abc" for c in wiring.chainlets}
    tls = SwarmTlsSecrets(
        "tls-ca",
        {
            c.name: (f"tls-cert-{c.service}", f"tls-key-{c.service}")
            for c in wiring.chainlets
            if not c.is_entrypoint
        },
    )
    return wiring, swarm_document(wiring, images, secrets, tls=tls)


@pytest.mark.parametrize("name", ["streaming", "rich"])
def test_with_tls_internal_chainlets_serve_https_and_every_caller_trusts_the_chains_ca(name: str) -> None:
    wiring, document = _tls_document(name)
    validator = jsonschema.Draft202012Validator(compose_schema())
    assert [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)] == []
    called = 0
    for chainlet in wiring.chainlets:
        service = document["services"][chainlet.service]
        env = service["environment"]
        files = {s["target"]: s for s in service["secrets"] if s["source"].startswith("tls-")}
        # Every secret a service names is declared, as one made beforehand.
        assert all(document["secrets"][s["source"]]["external"] for s in service["secrets"])
        # Files, not variables: the secret loader turns only CHAINS_* files into variables.
        assert not any(target.startswith("CHAINS_") for target in files)
        assert env["CHAINS_TLS_CA_FILE"] == "/run/secrets/chains-tls-ca.pem"
        assert files["chains-tls-ca.pem"]["source"] == "tls-ca"
        if chainlet.is_entrypoint:
            # Its published port serves plain HTTP (docs/deploy.md): no certificate, the
            # image's own health check.
            assert "CHAINS_TLS_CERT_FILE" not in env and set(files) == {"chains-tls-ca.pem"}
            assert "test" not in service["healthcheck"]
        else:
            assert env["CHAINS_TLS_CERT_FILE"] == "/run/secrets/chains-tls-cert.pem"
            assert env["CHAINS_TLS_KEY_FILE"] == "/run/secrets/chains-tls-key.pem"
            assert files["chains-tls-key.pem"]["source"] == f"tls-key-{chainlet.service}"
            assert (
                files["chains-tls-key.pem"]["mode"] == 0o400 and files["chains-tls-key.pem"]["uid"] == "10001"
            )
            probe = service["healthcheck"]["test"]
            assert probe[:2] == ["CMD", "python"] and "server_hostname='localhost'" in probe[-1]
        urls = json.loads(env.get("CHAINS_DEPENDENCY_URLS", "{}"))
        for dependency, (url,) in urls.items():
            assert url == f"https://{wiring.get(dependency).service}:8000"
            called += 1
    assert called >= 1


def test_tls_needs_https_wiring() -> None:
    wiring = _wiring("hello")
    with pytest.raises(ValueError, match="scheme='https'"):
        swarm_document(wiring, {c.name: "i" for c in wiring.chainlets}, {}, tls=SwarmTlsSecrets("ca", {}))


def test_the_job_store_url_reaches_the_entrypoint_only_as_a_secret_file() -> None:
    """A postgresql:// URL holds a password: like the API key it is a swarm secret, which the
    loader turns into CHAINS_JOBS_STORE in the entrypoint's tasks alone."""
    wiring = _wiring("rich")
    variables = {v for c in wiring.chainlets for v in swarm_secret_variables(wiring, c, False, True)}
    assert {"CHAINS_JOBS_STORE", "CHAINS_WEBHOOK_SECRET"} <= variables
    secrets = {v: f"swarm-secret-{v.lower()}" for v in variables}
    images = {c.name: f"chains/x-{c.service}:v1-abc" for c in wiring.chainlets}
    document = swarm_document(wiring, images, secrets)
    for chainlet in wiring.chainlets:
        service = document["services"][chainlet.service]
        targets = {s["target"] for s in service["secrets"]}
        has = {"CHAINS_JOBS_STORE", "CHAINS_WEBHOOK_SECRET"} <= targets
        assert has == chainlet.is_entrypoint, (chainlet.name, targets)
        assert "CHAINS_JOBS_STORE" not in service["environment"]
    _, without = _document("rich")
    assert "CHAINS_JOBS_STORE" not in json.dumps(without)
