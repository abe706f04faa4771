"""The kubernetes export: valid objects, consistent wiring, no secrets, the same bytes every time."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from chains.targets import KubernetesOptions, export_target
from chains.targets.k8s_manifests import secrets_secret_name, token_secret_name
from chains.targets.wiring import PORT, PRESTOP_SEC
from tests.exports.conftest import CHAINS, SECRET_VALUES, Export, all_text, export, tree_bytes

# The oldest and the newest Kubernetes whose schemas kubernetes-validate ships.
VERSIONS = sorted({kubernetes_validate.utils.all_versions()[0], kubernetes_validate.utils.latest_version()})
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def objects(exported: Export) -> list[dict[str, Any]]:
    kustomization = exported.documents("kustomization.yaml")[0]
    found = []
    for name in kustomization["resources"]:
        found.extend(exported.documents(name))
    return found


def of_kind(exported: Export, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects(exported) if o["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    found: dict[str, Any] = containers[0]
    return found


def env_of(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(deployment)["env"]}


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_schema(
    k8s: dict[str, Export], name: str, version: str
) -> None:
    found = objects(k8s[name])
    assert {o["kind"] for o in found} >= {"Deployment", "Service", "NetworkPolicy"}
    for obj in found:
        # strict: an unknown or misspelt field is an error, as `kubectl apply --validate=strict` has it.
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_kustomization_lists_every_manifest(k8s: dict[str, Export], name: str) -> None:
    exported = k8s[name]
    kustomization = exported.documents("kustomization.yaml")[0]
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    on_disk = sorted(p.name for p in exported.out.glob("*.yaml") if p.name != "kustomization.yaml")
    assert kustomization["resources"] == on_disk


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_builds_it(k8s: dict[str, Export]) -> None:
    exported = k8s["rich"]
    result = subprocess.run(["kubectl", "kustomize", str(exported.out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"^kind: Deployment$", result.stdout, re.MULTILINE)) == len(
        exported.chain.chainlets
    )


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_dependency_urls_name_the_services_of_the_dependencies(k8s: dict[str, Export], name: str) -> None:
    exported = k8s[name]
    deployments = of_kind(exported, "Deployment")
    services = of_kind(exported, "Service")
    assert sorted(deployments) == sorted(services)
    by_chainlet = {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]: d for d in deployments.values()
    }
    for spec in exported.chain.chainlets:
        deployment = by_chainlet[spec.name]
        service = services[deployment["metadata"]["name"]]
        # The Service selects exactly this chainlet's pods, on the port the server listens on.
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert container(deployment)["ports"][0]["containerPort"] == PORT
        env = env_of(deployment)
        wanted = sorted({dep.name for dep in spec.dependencies})
        if not wanted:
            assert "CHAINS_DEPENDENCY_URLS" not in env
            continue
        urls = json.loads(env["CHAINS_DEPENDENCY_URLS"]["value"])
        assert sorted(urls) == wanted
        for dependency, [url] in urls.items():
            target = by_chainlet[dependency]
            host, port = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", url).groups()  # type: ignore[union-attr]
            assert host == target["metadata"]["name"] and host in services
            assert int(port) == services[host]["spec"]["ports"][0]["port"]


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_secret_values_are_never_written(k8s: dict[str, Export], name: str) -> None:
    exported = k8s[name]
    text = all_text(exported.out)
    for value in SECRET_VALUES.values():
        assert value not in text
    for deployment in of_kind(exported, "Deployment").values():
        env = env_of(deployment)
        token = env["CHAINS_INTERNAL_TOKEN"]
        assert "value" not in token
        assert token["valueFrom"]["secretKeyRef"] == {
            "name": token_secret_name(exported.chain.name),
            "key": "token",
        }
        for variable, entry in env.items():
            if variable.startswith("CHAINS_SECRET_"):
                key = variable.removeprefix("CHAINS_SECRET_")
                assert entry["valueFrom"]["secretKeyRef"] == {
                    "name": secrets_secret_name(exported.chain.name),
                    "key": key,
                }
    assert not of_kind(exported, "Secret"), "Secrets are the user's to create, never written"


def test_declared_secrets_reach_exactly_the_chainlets_that_declare_them(k8s: dict[str, Export]) -> None:
    exported = k8s["rich"]
    deployments = of_kind(exported, "Deployment")
    secrets = {
        name: sorted(v for v in env_of(d) if v.startswith("CHAINS_SECRET_"))
        for name, d in deployments.items()
    }
    assert secrets == {
        "rich-chain-embed-model": ["CHAINS_SECRET_hf_token"],
        "rich-chain-store": ["CHAINS_SECRET_db_password", "CHAINS_SECRET_hf_token"],
        "rich-chain-front": [],
    }
    readme = (exported.out / "README.md").read_text()
    assert "kubectl create secret generic rich-chain-secrets --from-literal=db_password=VALUE" in readme
    assert "kubectl create secret generic rich-chain-token" in readme


def test_the_job_store_comes_from_an_optional_secret_on_the_entrypoint_only(k8s: dict[str, Export]) -> None:
    exported = k8s["rich"]
    for name, deployment in of_kind(exported, "Deployment").items():
        env = env_of(deployment)
        if name != "rich-chain-front":
            assert "CHAINS_JOBS_STORE" not in env and "CHAINS_WEBHOOK_SECRET" not in env
            continue
        # Optional: without the Secret the variable is unset and async calls are off.
        assert env["CHAINS_JOBS_STORE"]["valueFrom"]["secretKeyRef"] == {
            "name": "rich-chain-jobs",
            "key": "url",
            "optional": True,
        }
        assert env["CHAINS_WEBHOOK_SECRET"]["valueFrom"]["secretKeyRef"]["key"] == "webhook-secret"
    manifest = (exported.out / "rich-chain-front.yaml").read_text()
    assert "Async calls are off unless Secret rich-chain-jobs" in manifest
    readme = (exported.out / "README.md").read_text()
    assert "kubectl create secret generic rich-chain-jobs --from-literal=url=postgresql://" in readme


def test_compute_becomes_resources_replicas_and_autoscaling(k8s: dict[str, Export]) -> None:
    exported = k8s["rich"]
    deployments = of_kind(exported, "Deployment")
    store, embed = deployments["rich-chain-store"], deployments["rich-chain-embed-model"]
    assert store["spec"]["replicas"] == 3
    assert container(store)["resources"] == {
        "requests": {"cpu": "2", "memory": "1G"},
        "limits": {"cpu": "2", "memory": "1G"},
    }
    # With autoscaling the HorizontalPodAutoscaler owns the count: the Deployment leaves it unset.
    assert "replicas" not in embed["spec"]
    assert container(embed)["resources"]["requests"] == {"cpu": "500m", "memory": "1.5Gi"}
    # Compute(gpu="T4"): one GPU from the device plugin, the type named for a nodeSelector,
    # and the usual GPU-node taint tolerated; Store asks for none of it.
    assert container(embed)["resources"]["limits"] == {
        "cpu": "500m",
        "memory": "1.5Gi",
        "nvidia.com/gpu": "1",
    }
    assert embed["spec"]["template"]["metadata"]["annotations"]["chains/gpu"] == "T4"
    assert embed["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "tolerations" not in store["spec"]["template"]["spec"]
    [hpa] = of_kind(exported, "HorizontalPodAutoscaler").values()
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "rich-chain-embed-model",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    pods_metric = next(m for m in hpa["spec"]["metrics"] if m["type"] == "Pods")["pods"]
    assert pods_metric["metric"]["name"] == "chains_in_flight"
    assert pods_metric["target"] == {"type": "AverageValue", "averageValue": "4"}
    for name in CHAINS:
        for deployment in of_kind(k8s[name], "Deployment").values():
            for amounts in container(deployment)["resources"].values():
                assert all(QUANTITY.match(str(v)) for v in amounts.values()), amounts


def test_probes_and_termination_match_the_server(k8s: dict[str, Export]) -> None:
    deployments = of_kind(k8s["rich"], "Deployment")
    for name, deployment in deployments.items():
        c = container(deployment)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        grace = float(env_of(deployment)["CHAINS_GRACE_SEC"]["value"])
        assert grace == (50 if name == "rich-chain-store" else 30)
        # The pod gets the pre-stop pause plus the server's whole drain before it is killed.
        assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > PRESTOP_SEC + grace
        assert c["lifecycle"]["preStop"]["exec"]["command"][0] == "python"


def test_images_are_named_by_registry_chain_chainlet_and_code_version(k8s: dict[str, Export]) -> None:
    exported = k8s["hello"]
    for deployment in of_kind(exported, "Deployment").values():
        chainlet = deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
        descriptor = json.loads((exported.out / "chainlets" / chainlet / "chainlet.json").read_text())
        assert container(deployment)["image"] == (
            f"registry.example:5000/team/hello-{chainlet.lower()}:{descriptor['code_version']}"
        )


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, "only matchLabels selectors are written"
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_network_policies_select_exactly_the_chains_pods(k8s: dict[str, Export]) -> None:
    # Two chains in one namespace: each policy must pick its own chain's pods and no other.
    pods = {
        (name, d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]): d["spec"]["template"][
            "metadata"
        ]["labels"]
        for name in ("rich", "streaming")
        for d in of_kind(k8s[name], "Deployment").values()
    }
    for name in ("rich", "streaming"):
        exported = k8s[name]
        policies = of_kind(exported, "NetworkPolicy")
        entry = exported.chain.entrypoint.name
        internal = {(name, s.name) for s in exported.chain.chainlets if s.name != entry}
        own = {(name, s.name) for s in exported.chain.chainlets}
        [internal_policy] = [p for p in policies.values() if p["metadata"]["name"].endswith("-internal")]
        [entry_policy] = [p for p in policies.values() if p["metadata"]["name"].endswith("-entrypoint")]
        assert {
            k for k, labels in pods.items() if _selects(internal_policy["spec"]["podSelector"], labels)
        } == internal
        [rule] = internal_policy["spec"]["ingress"]
        [peer] = rule["from"]
        assert set(peer) == {"podSelector"}, "no namespaceSelector or ipBlock: only pods of this namespace"
        assert {k for k, labels in pods.items() if _selects(peer["podSelector"], labels)} == own
        assert rule["ports"] == [{"port": PORT, "protocol": "TCP"}]
        assert internal_policy["spec"]["policyTypes"] == ["Ingress"]
        assert {k for k, labels in pods.items() if _selects(entry_policy["spec"]["podSelector"], labels)} == {
            (name, entry)
        }
        assert entry_policy["spec"]["ingress"] == [{"ports": [{"port": PORT, "protocol": "TCP"}]}]


def test_a_single_chainlet_chain_has_no_internal_policy(tmp_path: Path) -> None:
    source = tmp_path / "solo" / "chain.py"
    source.parent.mkdir()
    source.write_text(
        "import chains\n\n\n@chains.mark_entrypoint('solo')\nclass Solo(chains.ChainletBase):\n"
        "    async def run_remote(self, x: int) -> int:\n        return x\n"
    )
    exported = export("kubernetes", source, tmp_path / "work")
    assert sorted(of_kind(exported, "NetworkPolicy")) == ["solo-entrypoint"]


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_output_is_deterministic(k8s: dict[str, Export], tmp_path: Path, name: str) -> None:
    again = export("kubernetes", CHAINS[name], tmp_path / "elsewhere", registry="registry.example:5000/team")
    assert tree_bytes(again.out) == tree_bytes(k8s[name].out)
    # And once more over the first output: nothing changes, nothing is left behind.
    export("kubernetes", CHAINS[name], tmp_path / "elsewhere", registry="registry.example:5000/team")
    assert tree_bytes(again.out) == tree_bytes(k8s[name].out)


def test_stale_manifests_are_removed_and_foreign_files_kept(tmp_path: Path) -> None:
    first = export("kubernetes", CHAINS["hello"], tmp_path)
    stale = first.out / "hello-old.yaml"
    stale.write_text((first.out / "hello-greeter.yaml").read_text())
    mine = first.out / "my-extra.yaml"
    mine.write_text("kind: ConfigMap\n")
    export("kubernetes", CHAINS["hello"], tmp_path)
    assert not stale.exists() and mine.exists()


def _fake_kubectl(bin_dir: Path, log: Path, *, context: bool) -> None:
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        'if [ "$1 $2" = "config current-context" ]; then\n'
        + (
            "  echo test-context; exit 0\n"
            if context
            else "  echo 'error: current-context is not set' >&2; exit 1\n"
        )
        + "fi\nexit 0\n"
    )
    script.chmod(0o755)


@pytest.mark.parametrize("context", [True, False])
def test_apply_runs_kubectl_when_there_is_a_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], context: bool
) -> None:
    log = tmp_path / "kubectl.log"
    _fake_kubectl(tmp_path / "bin", log, context=context)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    from chains.loader import load_chain

    chain = load_chain(CHAINS["hello"])
    out = tmp_path / "out"
    export_target("kubernetes").export(
        chain, CHAINS["hello"], KubernetesOptions(out_dir=out, apply=True, timeout=7)
    )
    calls = log.read_text().splitlines()
    err = capsys.readouterr().err
    if context:
        assert calls == [
            "config current-context",
            f"apply -k {out}",
            "rollout status deployment/hello-greeter --timeout=7s",
            "rollout status deployment/hello-hello --timeout=7s",
        ]
        assert "applying to context 'test-context'" in err
    else:
        assert calls == ["config current-context"]
        assert "no current context" in err and f"kubectl apply -k {out}" in err


def test_a_websocket_chainlets_service_port_says_it_speaks_websocket(k8s: dict[str, Export]) -> None:
    services = of_kind(k8s["realtime"], "Service")
    assert services and all(
        s["spec"]["ports"][0]["appProtocol"] == "kubernetes.io/ws" for s in services.values()
    )
    assert all("appProtocol" not in s["spec"]["ports"][0] for s in of_kind(k8s["hello"], "Service").values())
