"""The Kubernetes objects of a chain, as plain dicts: what ``chains push --target kubernetes`` writes.

Per chainlet a Deployment, a Service and, with ``Compute(autoscale=...)``, a
HorizontalPodAutoscaler; per chain the NetworkPolicies that keep internal chainlets private.
Credentials are never part of the objects: the chain's token and every declared secret are read
from Secrets the user creates (:func:`token_secret_name`, :func:`secrets_secret_name`).
"""

from __future__ import annotations

import re
from typing import Any

from chains.config import Compute
from chains.jobs.settings import JOBS_STORE_ENV, WEBHOOK_SECRET_ENV
from chains.targets.wiring import (
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_PART_OF,
    PORT,
    PRESTOP_SEC,
    ChainletWiring,
    ChainWiring,
    dns_label,
    label_value,
)

__all__ = [
    "CODE_VERSION_ANNOTATION",
    "IN_FLIGHT_METRIC",
    "chain_objects",
    "chainlet_objects",
    "cpu_quantity",
    "jobs_secret_name",
    "memory_quantity",
    "network_policies",
    "secrets_secret_name",
    "token_secret_name",
]

CODE_VERSION_ANNOTATION = "chains/code-version"
IN_FLIGHT_METRIC = "chains_in_flight"  # the gauge every chainlet serves on /metrics
# Scale up on CPU too, so that autoscaling works on clusters that serve no custom metrics.
_CPU_UTILIZATION = 80
RUN_AS_USER = 10001  # the user the generated Dockerfile creates
TOKEN_KEY = "token"
API_KEY_KEY = "api-key"
JOBS_URL_KEY = "url"  # of the jobs Secret: a postgresql:// URL (it holds a password)
WEBHOOK_SECRET_KEY = "webhook-secret"

Obj = dict[str, Any]


def token_secret_name(chain: str) -> str:
    """The Secret holding the chain's internal token (key ``token``) and, optionally, the
    entrypoint's API key (key ``api-key``)."""
    return dns_label(chain, "token")


def jobs_secret_name(chain: str) -> str:
    """The optional Secret naming the entrypoint's job store (key ``url``, a PostgreSQL URL) and
    its webhook secret (key ``webhook-secret``): without it, async calls are off."""
    return dns_label(chain, "jobs")


def secrets_secret_name(chain: str) -> str:
    """The Secret holding one key per declared secret (``Assets(secret_keys=[...])``)."""
    return dns_label(chain, "secrets")


def cpu_quantity(cpu_count: float) -> str:
    """``Compute.cpu_count`` as a Kubernetes CPU quantity: whole cores, else millicores."""
    if float(cpu_count).is_integer():
        return str(int(cpu_count))
    return f"{max(1, round(cpu_count * 1000))}m"


def memory_quantity(memory: str) -> str:
    """``Compute.memory`` as a Kubernetes quantity (which spells the decimal kilo ``k``)."""
    text = memory.strip().replace(" ", "")
    return re.sub(r"K$", "k", text)


def _env(wiring: ChainWiring, chainlet: ChainletWiring) -> list[Obj]:
    entries: list[Obj] = [{"name": name, "value": value} for name, value in chainlet.env.items()]
    token = token_secret_name(wiring.chain)
    entries.append(
        {"name": "CHAINS_INTERNAL_TOKEN", "valueFrom": {"secretKeyRef": {"name": token, "key": TOKEN_KEY}}}
    )
    if chainlet.is_entrypoint:
        entries.append(
            {
                "name": "CHAINS_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": token, "key": API_KEY_KEY, "optional": True}},
            }
        )
        # Pods spread over nodes, which share no disk: the job store is a server, named by an
        # optional Secret; without it the variable is unset and async calls are off.
        jobs = jobs_secret_name(wiring.chain)
        for variable, key in ((JOBS_STORE_ENV, JOBS_URL_KEY), (WEBHOOK_SECRET_ENV, WEBHOOK_SECRET_KEY)):
            entries.append(
                {
                    "name": variable,
                    "valueFrom": {"secretKeyRef": {"name": jobs, "key": key, "optional": True}},
                }
            )
    secrets = secrets_secret_name(wiring.chain)
    for key in chainlet.secret_keys:
        entries.append(
            {"name": wiring.secret_env(key), "valueFrom": {"secretKeyRef": {"name": secrets, "key": key}}}
        )
    return sorted(entries, key=lambda entry: str(entry["name"]))


GPU_RESOURCE = "nvidia.com/gpu"  # what the NVIDIA device plugin advertises
GPU_ANNOTATION = "chains/gpu"


def _resources(compute: Compute) -> Obj:
    amounts = {"cpu": cpu_quantity(compute.cpu_count), "memory": memory_quantity(compute.memory)}
    limits = dict(amounts)
    if compute.gpu is not None:
        # An extended resource: its request is its limit. The type has no portable name on
        # nodes (each cluster labels it its own way), so only the count is asked for here.
        limits[GPU_RESOURCE] = str(compute.gpu_count)
    return {"requests": dict(amounts), "limits": limits}


def _container(wiring: ChainWiring, chainlet: ChainletWiring) -> Obj:
    compute = chainlet.spec.remote_config.compute
    return {
        "name": "chainlet",
        "image": chainlet.image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": _env(wiring, chainlet),
        "resources": _resources(compute),
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 5,
            "timeoutSeconds": 5,
            "failureThreshold": 2,
        },
        "lifecycle": {
            # Keep serving while the cluster takes the pod out of its Service, then SIGTERM
            # starts the server's drain. Python is the one program every chainlet image has.
            "preStop": {"exec": {"command": ["python", "-c", f"import time; time.sleep({PRESTOP_SEC})"]}}
        },
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }


def _deployment(wiring: ChainWiring, chainlet: ChainletWiring) -> Obj:
    compute = chainlet.spec.remote_config.compute
    labels = chainlet.labels(wiring.chain)
    annotations = {
        CODE_VERSION_ANNOTATION: chainlet.code_version,
        "prometheus.io/path": "/metrics",
        "prometheus.io/port": str(PORT),
        "prometheus.io/scrape": "true",
    }
    pod: Obj = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": chainlet.termination_grace_sec,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(wiring, chainlet)],
    }
    if compute.gpu is not None:
        # The type asked for, for a nodeSelector of the cluster's own labels (docs/deploy.md);
        # GPU nodes are commonly tainted so that only pods asking for GPUs land there.
        annotations[GPU_ANNOTATION] = compute.gpu
        pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    spec: Obj = {}
    if compute.autoscale is None:
        spec["replicas"] = compute.replicas  # with autoscaling the HorizontalPodAutoscaler owns the count
    spec.update(
        {
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": chainlet.selector(wiring.chain)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": pod,
            },
        }
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": chainlet.service,
            "labels": labels,
            "annotations": {CODE_VERSION_ANNOTATION: chainlet.code_version},
        },
        "spec": spec,
    }


def _service(wiring: ChainWiring, chainlet: ChainletWiring) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": chainlet.service, "labels": chainlet.labels(wiring.chain)},
        "spec": {
            "type": "ClusterIP",
            "selector": chainlet.selector(wiring.chain),
            "ports": [_service_port(chainlet)],
        },
    }


def _service_port(chainlet: ChainletWiring) -> Obj:
    port: Obj = {"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}
    if chainlet.spec.endpoint.output_kind.is_socket:
        # Tells a gateway or mesh in front of the Service to pass the WebSocket upgrade on.
        port["appProtocol"] = "kubernetes.io/ws"
    return port


def _autoscaler(wiring: ChainWiring, chainlet: ChainletWiring) -> Obj | None:
    autoscale = chainlet.spec.remote_config.compute.autoscale
    if autoscale is None:
        return None
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": chainlet.service, "labels": chainlet.labels(wiring.chain)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": chainlet.service},
            "minReplicas": autoscale.min_replicas,
            "maxReplicas": autoscale.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": IN_FLIGHT_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(autoscale.target_concurrency)},
                    },
                },
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": _CPU_UTILIZATION},
                    },
                },
            ],
        },
    }


def chainlet_objects(wiring: ChainWiring, chainlet: ChainletWiring) -> list[Obj]:
    """The Deployment, the Service and (with autoscaling) the HorizontalPodAutoscaler of ``chainlet``."""
    objects = [_deployment(wiring, chainlet), _service(wiring, chainlet)]
    autoscaler = _autoscaler(wiring, chainlet)
    if autoscaler is not None:
        objects.append(autoscaler)
    return objects


def network_policies(wiring: ChainWiring) -> list[Obj]:
    """Internal chainlets take connections only from the chain's own pods; the entrypoint from anyone.

    Pods are told apart by their labels: ``app.kubernetes.io/part-of`` names the chain,
    ``app.kubernetes.io/component`` says ``entrypoint`` or ``internal``.
    """
    chain = label_value(wiring.chain)
    meta_labels = {LABEL_MANAGED_BY: "chains", LABEL_PART_OF: chain}
    port = [{"port": PORT, "protocol": "TCP"}]
    policies: list[Obj] = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": dns_label(wiring.chain, "entrypoint"), "labels": meta_labels},
            "spec": {
                "podSelector": {"matchLabels": {LABEL_COMPONENT: "entrypoint", LABEL_PART_OF: chain}},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": port}],
            },
        }
    ]
    if any(not c.is_entrypoint for c in wiring.chainlets):
        policies.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": dns_label(wiring.chain, "internal"), "labels": meta_labels},
                "spec": {
                    "podSelector": {"matchLabels": {LABEL_COMPONENT: "internal", LABEL_PART_OF: chain}},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [
                                {
                                    "podSelector": {
                                        "matchLabels": {LABEL_MANAGED_BY: "chains", LABEL_PART_OF: chain}
                                    }
                                }
                            ],
                            "ports": port,
                        }
                    ],
                },
            }
        )
    return policies


def chain_objects(wiring: ChainWiring) -> dict[str, list[Obj]]:
    """Every object, by the file it goes in: one file per chainlet, and one for the policies (a name
    no Service can have: those hold no underscore)."""
    files = {f"{c.service}.yaml": chainlet_objects(wiring, c) for c in wiring.chainlets}
    files["network_policies.yaml"] = network_policies(wiring)
    return files
