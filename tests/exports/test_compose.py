"""The compose export: valid against the Compose specification, wired like Kubernetes, no secrets."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from chains.targets.wiring import PORT
from tests.exports.conftest import CHAINS, SECRET_VALUES, Export, all_text, export, tree_bytes


def compose_schema() -> dict[str, Any]:
    # The Compose specification's schema, as check-jsonschema ships it (no download).
    text = (
        resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


def document(exported: Export) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((exported.out / "compose.yaml").read_text())
    return data


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_compose_file_is_valid_against_the_compose_specification(
    compose: dict[str, Export], name: str
) -> None:
    schema = compose_schema()
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document(compose[name]))]
    assert errors == []


def test_the_schema_catches_a_misspelt_field(compose: dict[str, Export]) -> None:
    data = document(compose["hello"])
    next(iter(data["services"].values()))["helthcheck"] = {}
    assert not jsonschema.Draft202012Validator(compose_schema()).is_valid(data)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_services_are_wired_as_on_kubernetes(
    compose: dict[str, Export], k8s: dict[str, Export], name: str
) -> None:
    services = document(compose[name])["services"]
    k8s_services = {
        o["metadata"]["name"]
        for f in k8s[name].documents("kustomization.yaml")[0]["resources"]
        for o in k8s[name].documents(f)
        if o["kind"] == "Service"
    }
    assert set(services) == k8s_services
    by_chainlet = {s["labels"]["app.kubernetes.io/name"]: (n, s) for n, s in services.items()}
    entry = compose[name].chain.entrypoint.name
    for spec in compose[name].chain.chainlets:
        _, service = by_chainlet[spec.name]
        assert service["build"] == {"context": f"chainlets/{spec.name}"}
        assert (compose[name].out / "chainlets" / spec.name / "Dockerfile").is_file()
        env = service["environment"]
        wanted = sorted({d.name for d in spec.dependencies})
        urls = json.loads(env.get("CHAINS_DEPENDENCY_URLS", "{}"))
        assert sorted(urls) == wanted
        for dependency, [url] in urls.items():
            assert url == f"http://{by_chainlet[dependency][0]}:{PORT}"
        assert sorted(service.get("depends_on", {})) == sorted(by_chainlet[d][0] for d in wanted)
        if spec.name == entry:
            assert service["ports"] == [f"127.0.0.1:8000:{PORT}/tcp"]
            assert env["CHAINS_IS_ENTRYPOINT"] == "1"
        else:
            assert "ports" not in service and "expose" not in service
            assert env["CHAINS_IS_ENTRYPOINT"] == "0"
        assert "/readyz" in " ".join(service["healthcheck"]["test"])


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_credentials_come_from_the_env_file_only(compose: dict[str, Export], name: str) -> None:
    exported = compose[name]
    text = all_text(exported.out)
    for value in SECRET_VALUES.values():
        assert value not in text
    assert not (exported.out / ".env").exists(), "the user's .env is never written"
    example = (exported.out / ".env.example").read_text()
    variables = {line.split("=")[0] for line in example.splitlines() if line and not line.startswith("#")}
    assert all(line.endswith("=") for line in example.splitlines() if line and not line.startswith("#"))
    for service in document(exported)["services"].values():
        for variable, value in service["environment"].items():
            if variable.startswith("CHAINS_SECRET_") or variable == "CHAINS_INTERNAL_TOKEN":
                assert value.startswith(f"${{{variable}:?"), "a missing credential stops `docker compose up`"
                assert variable in variables
            elif variable in ("CHAINS_API_KEY", "CHAINS_WEBHOOK_SECRET"):
                assert value == f"${{{variable}:-}}" and variable in variables
            elif variable == "CHAINS_JOBS_STORE":
                # Optional: .env may name a PostgreSQL URL (it holds a password), else SQLite.
                assert value == "${CHAINS_JOBS_STORE:-/var/lib/chains/jobs/jobs.sqlite}"
                assert variable in variables
            else:
                assert not re.search(r"(?<!\$)\$\{", value), f"{variable} is a plain value"


def test_compute_becomes_replicas_limits_and_stop_grace(compose: dict[str, Export]) -> None:
    services = document(compose["rich"])["services"]
    store = services["rich-chain-store"]
    assert store["deploy"]["replicas"] == 3
    assert store["deploy"]["resources"]["limits"] == {"cpus": "2", "memory": f"{10**9}b"}
    assert store["stop_grace_period"] == "55s"  # the 50 s drain and a margin
    embed = services["rich-chain-embed-model"]["deploy"]["resources"]
    assert embed["limits"] == {"cpus": "0.5", "memory": "1536m"}
    # Compute(gpu="T4"): one GPU reserved from the engine's NVIDIA runtime.
    assert embed["reservations"] == {"devices": [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]}
    assert "reservations" not in store["deploy"]["resources"]


def test_output_is_deterministic(compose: dict[str, Export], tmp_path: Path) -> None:
    again = export("compose", CHAINS["rich"], tmp_path)
    assert tree_bytes(again.out) == tree_bytes(compose["rich"].out)


def test_the_entrypoint_keeps_its_jobs_on_the_project_volume(compose: dict[str, Export]) -> None:
    doc = document(compose["rich"])
    assert doc["volumes"] == {"jobs": {}}
    for service in doc["services"].values():
        is_entrypoint = service["environment"]["CHAINS_IS_ENTRYPOINT"] == "1"
        assert (service.get("volumes") == ["jobs:/var/lib/chains/jobs"]) == is_entrypoint
        assert ("CHAINS_JOBS_STORE" in service["environment"]) == is_entrypoint
