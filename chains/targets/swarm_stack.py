"""The stack file of the ``swarm`` target: the compose export's services, as swarm services.

:func:`swarm_document` is what ``docker stack deploy`` is given. It differs from
``compose.yaml`` where a swarm does: credentials are swarm secrets (files a loader turns into
the variables the server reads), one overlay network joins the nodes, the entrypoint is
published on a manager's own port, and updates roll one task at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chains.jobs.settings import JOBS_STORE_ENV, WEBHOOK_SECRET_ENV
from chains.targets.compose import DEFAULT_ENTRY_PORT, STOP_MARGIN_SEC, cpu_quantity_compose, memory_compose
from chains.targets.wiring import LABEL_NAME, LABEL_PART_OF, PORT, ChainletWiring, ChainWiring

__all__ = ["SWARM_NETWORK", "SwarmTlsSecrets", "swarm_document", "swarm_secret_variables"]

SWARM_NETWORK = "chain"
SWARM_SECRETS_DIR = "/run/secrets"
# Swarm hands secrets to a task as files, never as environment variables. The server reads its
# credentials from the environment, so each task starts with this: it copies every
# /run/secrets/CHAINS_* file into a variable of that name and becomes the image's command.
SWARM_SECRET_LOADER = "\n".join(
    [
        "import os, sys",
        f"folder = {SWARM_SECRETS_DIR!r}",
        "env = dict(os.environ)",
        "for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:",
        "    if name.startswith('CHAINS_'):",
        "        with open(os.path.join(folder, name), encoding='utf-8') as handle:",
        "            env[name] = handle.read()",
        "os.execvpe(sys.argv[1], sys.argv[1:], env)",
    ]
)
SERVER_COMMAND = ("python", "server.py", "--host", "0.0.0.0", "--port", str(PORT))
_CHAINLET_UID = "10001"  # the `chains` user of every chainlet image
# TLS files as the tasks see them: lower-case names, so the loader above leaves them files.
_TLS_FILES = {
    "CHAINS_TLS_CA_FILE": "chains-tls-ca.pem",
    "CHAINS_TLS_CERT_FILE": "chains-tls-cert.pem",
    "CHAINS_TLS_KEY_FILE": "chains-tls-key.pem",
}
# The image's probe of /readyz, over TLS verified with the chain's CA: the name it checks
# (localhost) is on every chainlet's certificate.
_TLS_HEALTHCHECK = "; ".join(
    [
        "import socket, ssl, sys",
        f"c = ssl.create_default_context(cafile='{SWARM_SECRETS_DIR}/{_TLS_FILES['CHAINS_TLS_CA_FILE']}')",
        f"s = c.wrap_socket(socket.create_connection(('127.0.0.1', {PORT}), 2), server_hostname='localhost')",
        "s.sendall(b'GET /readyz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n')",
        "sys.exit(s.recv(16)[9:12] != b'200')",
    ]
)


@dataclass(frozen=True)
class SwarmTlsSecrets:
    """The swarm secrets of TLS between a chain's chainlets (see :mod:`chains.tls`).

    ``ca`` holds the chain's CA certificate, which every chainlet verifies its dependencies
    with; ``certificates`` maps each chainlet that serves HTTPS (all but the entrypoint, whose
    published port serves plain HTTP) to the secrets holding its certificate and its key.
    """

    ca: str
    certificates: Mapping[str, tuple[str, str]]


def swarm_secret_variables(
    wiring: ChainWiring, chainlet: ChainletWiring, with_api_key: bool, with_jobs: bool = False
) -> list[str]:
    """The credentials ``chainlet`` gets in a swarm, as the variable names the server reads;
    ``with_jobs``: the entrypoint's job store (its URL holds a password) and webhook secret."""
    names = ["CHAINS_INTERNAL_TOKEN"]
    if chainlet.is_entrypoint and with_api_key:
        names.append("CHAINS_API_KEY")
    names += [wiring.secret_env(key) for key in chainlet.secret_keys]
    if chainlet.is_entrypoint and with_jobs:
        names += [JOBS_STORE_ENV, WEBHOOK_SECRET_ENV]
    return names


def _swarm_service(
    wiring: ChainWiring,
    chainlet: ChainletWiring,
    image: str,
    entry_port: int,
    secrets: set[str],
    labels: dict[str, str],
    tls: SwarmTlsSecrets | None,
) -> dict[str, Any]:
    compute = chainlet.spec.remote_config.compute
    env = {name: value.replace("$", "$$") for name, value in chainlet.env.items()}
    env["CHAINS_ENVIRONMENT"] = "swarm"
    variables = swarm_secret_variables(
        wiring, chainlet, "CHAINS_API_KEY" in secrets, JOBS_STORE_ENV in secrets
    )
    tls_files = _swarm_tls_files(chainlet, tls)
    for variable, (_, target, _) in tls_files.items():
        env[variable] = f"{SWARM_SECRETS_DIR}/{target}"
    # The entrypoint publishes a port on its node, which one task at a time can hold: its old
    # task stops before the new one starts. Every other chainlet starts its new task first.
    order = "stop-first" if chainlet.is_entrypoint else "start-first"
    service_labels = {
        LABEL_NAME: chainlet.name,
        LABEL_PART_OF: wiring.chain,
        "chains/code-version": chainlet.code_version,
        **labels,
    }
    service: dict[str, Any] = {
        "image": image,
        "entrypoint": ["python", "-I", "-c", SWARM_SECRET_LOADER],
        "command": list(SERVER_COMMAND),
        "environment": dict(sorted(env.items())),
        "secrets": [
            {
                "source": name,
                "target": name,
                "uid": _CHAINLET_UID,
                "gid": _CHAINLET_UID,
                "mode": 0o400,
            }
            for name in variables
        ]
        + [
            {"source": source, "target": target, "uid": _CHAINLET_UID, "gid": _CHAINLET_UID, "mode": mode}
            for source, target, mode in tls_files.values()
        ],
        "labels": service_labels,
        "networks": [SWARM_NETWORK],
        # The image's own probe of /readyz, run more often: a task counts as running (and its
        # address is handed out by the swarm's DNS) only once it answers.
        "healthcheck": {"interval": "2s", "timeout": "3s", "retries": 3, "start_period": "60s"},
        "stop_grace_period": f"{math.ceil(chainlet.grace_sec) + STOP_MARGIN_SEC}s",
        "deploy": {
            "mode": "replicated",
            "replicas": compute.replicas,
            # DNS round robin over the tasks' own addresses: no virtual IP, which needs IPVS in
            # the kernel of every node.
            "endpoint_mode": "dnsrr",
            "labels": service_labels,
            "resources": {
                "limits": {
                    "cpus": cpu_quantity_compose(compute.cpu_count),
                    "memory": memory_compose(compute.memory_bytes),
                }
            },
            "restart_policy": {"condition": "any", "delay": "1s"},
            "update_config": {
                "parallelism": 1,
                "order": order,
                "failure_action": "rollback",
                "monitor": "5s",
            },
            "rollback_config": {"parallelism": 1, "order": order},
        },
    }
    if "CHAINS_TLS_CERT_FILE" in tls_files:
        service["healthcheck"]["test"] = ["CMD", "python", "-I", "-S", "-c", _TLS_HEALTHCHECK]
    if compute.gpu is not None:
        service["deploy"]["resources"]["reservations"] = {
            "generic_resources": [{"discrete_resource_spec": {"kind": "gpu", "value": compute.gpu_count}}]
        }
    if chainlet.is_entrypoint:
        # Published on the node that runs it (no routing mesh: that needs IPVS too); on a
        # manager, whose address the pusher knows, one task per node.
        service["ports"] = [{"target": PORT, "published": entry_port, "protocol": "tcp", "mode": "host"}]
        service["deploy"]["placement"] = {"constraints": ["node.role == manager"], "max_replicas_per_node": 1}
    return service


def _swarm_tls_files(
    chainlet: ChainletWiring, tls: SwarmTlsSecrets | None
) -> dict[str, tuple[str, str, int]]:
    """Variable -> (secret, file name, mode) of the TLS files ``chainlet``'s tasks get."""
    if tls is None:
        return {}
    files = {"CHAINS_TLS_CA_FILE": (tls.ca, _TLS_FILES["CHAINS_TLS_CA_FILE"], 0o444)}
    if chainlet.name in tls.certificates:
        cert, key = tls.certificates[chainlet.name]
        files["CHAINS_TLS_CERT_FILE"] = (cert, _TLS_FILES["CHAINS_TLS_CERT_FILE"], 0o444)
        files["CHAINS_TLS_KEY_FILE"] = (key, _TLS_FILES["CHAINS_TLS_KEY_FILE"], 0o400)
    return files


def swarm_document(
    wiring: ChainWiring,
    images: dict[str, str],
    secret_names: dict[str, str],
    *,
    entry_port: int = DEFAULT_ENTRY_PORT,
    encrypted: bool = True,
    labels: dict[str, str] | None = None,
    tls: SwarmTlsSecrets | None = None,
) -> dict[str, Any]:
    """The stack file for ``docker stack deploy``: the compose services, as swarm services.

    ``images`` maps each chainlet to the image it runs (present on every node);
    ``secret_names`` maps each credential's variable (``CHAINS_INTERNAL_TOKEN``,
    ``CHAINS_API_KEY``, ``CHAINS_SECRET_<key>``) to the swarm secret that holds it, created
    beforehand: the file names secrets, never their values. One overlay network joins the
    services, its traffic between nodes encrypted (IPsec) when ``encrypted``. With ``tls``
    (secrets made beforehand, as the credentials are), the chainlets call each other over
    HTTPS: ``wiring`` must have been made with ``scheme="https"``. For example::

        document = swarm_document(wiring, {"Entry": "chains/hello-entry:3f2a"},
                                  {"CHAINS_INTERNAL_TOKEN": "hello-internal-token-1a2b"})
        json.dump(document, open("stack.json", "w"))  # then: docker stack deploy -c stack.json hello
    """
    extra = dict(labels or {})
    services = {
        c.service: _swarm_service(wiring, c, images[c.name], entry_port, set(secret_names), extra, tls)
        for c in wiring.chainlets
    }
    if tls is not None and any(c.scheme != "https" for c in wiring.chainlets):
        raise ValueError("TLS between chainlets needs a wiring made with scheme='https'")
    network: dict[str, Any] = {"driver": "overlay", "labels": extra}
    if encrypted:
        network["driver_opts"] = {"encrypted": ""}
    # Credentials are referred to by the variable they fill; TLS files by their own name. Each
    # is a swarm secret made before the deploy.
    declared = {variable: {"external": True, "name": name} for variable, name in secret_names.items()}
    for chainlet in wiring.chainlets:
        for source, _, _ in _swarm_tls_files(chainlet, tls).values():
            declared[source] = {"external": True, "name": source}
    return {
        "version": "3.8",
        "services": dict(sorted(services.items())),
        "networks": {SWARM_NETWORK: network},
        "secrets": dict(sorted(declared.items())),
    }
