"""The ``compose`` export target: one ``compose.yaml`` for ``docker compose up``, wired like Kubernetes.

``chains push FILE --target compose --dry-run --out DIR`` writes::

    DIR/compose.yaml          one service per chainlet, named as its Kubernetes Service
    DIR/.env.example          the variables to fill in (copy it to .env): the token and secrets
    DIR/chainlets/<Chainlet>/ the generated code: each service's build context

Only the entrypoint publishes a port, on 127.0.0.1; the other chainlets are reachable only on
the project's own network, and only with the chain's token. Credentials are read from ``.env``
(which ``docker compose`` loads by itself) and never written by chains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chains.model import Chain
from chains.targets import SettingGroup, Target, TargetKind
from chains.targets.files import export_code, header, regenerate_command, write_export
from chains.targets.k8s_manifests import cpu_quantity
from chains.targets.options import ComposeOptions
from chains.targets.wiring import LABEL_NAME, LABEL_PART_OF, PORT, ChainletWiring, ChainWiring, wire
from chains.targets.yamltext import dump

__all__ = [
    "CHAINLETS_DIR",
    "ComposeTarget",
    "SwarmTlsSecrets",
    "compose_document",
    "env_example",
    "swarm_document",
    "swarm_secret_variables",
]

CHAINLETS_DIR = "chainlets"
ENVIRONMENT = "compose"
DEFAULT_ENTRY_PORT = 8000
_STOP_MARGIN_SEC = 5
_HEALTHCHECK = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/readyz', timeout=4)"


def project_name(chain: str) -> str:
    """A compose project name (lowercase letters, digits, '-', '_'; starting alphanumeric)."""
    text = re.sub(r"[^a-z0-9_-]+", "-", chain.lower()).strip("-_")
    return text or "chain"


def _required(variable: str, what: str) -> str:
    return f"${{{variable}:?set {what} in .env (see .env.example)}}"


def _environment(wiring: ChainWiring, chainlet: ChainletWiring) -> dict[str, str]:
    env = {name: value.replace("$", "$$") for name, value in chainlet.env.items()}
    env["CHAINS_INTERNAL_TOKEN"] = _required("CHAINS_INTERNAL_TOKEN", "the chain's internal token")
    if chainlet.is_entrypoint:
        env["CHAINS_API_KEY"] = "${CHAINS_API_KEY:-}"
    for key in chainlet.secret_keys:
        variable = wiring.secret_env(key)
        env[variable] = _required(variable, f"secret {key!r}")
    return dict(sorted(env.items()))


def _published(chainlet: ChainletWiring, entry_port: int) -> str:
    replicas = chainlet.spec.remote_config.compute.replicas
    return str(entry_port) if replicas == 1 else f"{entry_port}-{entry_port + replicas - 1}"


def _service(
    wiring: ChainWiring, chainlet: ChainletWiring, chainlets_dir: str, entry_port: int
) -> dict[str, Any]:
    compute = chainlet.spec.remote_config.compute
    service: dict[str, Any] = {
        "image": chainlet.image,
        "build": {"context": f"{chainlets_dir}/{chainlet.name}"},
        "environment": _environment(wiring, chainlet),
        "labels": {
            LABEL_NAME: chainlet.name,
            LABEL_PART_OF: wiring.chain,
            "chains/code-version": chainlet.code_version,
        },
        "healthcheck": {
            "test": ["CMD", "python", "-c", _HEALTHCHECK],
            "interval": "10s",
            "timeout": "5s",
            "retries": 3,
            "start_period": "10s",
        },
        "restart": "unless-stopped",
        # SIGTERM starts the server's drain; compose kills the container after this long.
        "stop_grace_period": f"{math.ceil(chainlet.grace_sec) + _STOP_MARGIN_SEC}s",
        "deploy": {
            # Replicas share the service's DNS name; callers' connections spread over them.
            "replicas": compute.replicas,
            "resources": {
                "limits": {
                    "cpus": cpu_quantity_compose(compute.cpu_count),
                    "memory": memory_compose(compute.memory_bytes),
                }
            },
        },
    }
    if compute.gpu is not None:
        # Compose asks the engine's NVIDIA runtime for a count; the type is the host's own.
        service["deploy"]["resources"]["reservations"] = {
            "devices": [{"driver": "nvidia", "count": compute.gpu_count, "capabilities": ["gpu"]}]
        }
    dependencies = sorted({dep.name for dep in chainlet.spec.dependencies})
    if dependencies:
        service["depends_on"] = {
            wiring.get(name).service: {"condition": "service_healthy"} for name in dependencies
        }
    if chainlet.is_entrypoint:
        # The short syntax: Compose v1 (docker-compose 1.x) refuses host_ip in the long one.
        service["ports"] = [f"127.0.0.1:{_published(chainlet, entry_port)}:{PORT}/tcp"]
    return service


def memory_compose(size: int) -> str:
    """A byte count as compose writes sizes: the largest of g, m, k (powers of 1024) that divides it."""
    for unit, factor in (("g", 2**30), ("m", 2**20), ("k", 2**10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}b"


def cpu_quantity_compose(cpu_count: float) -> str:
    """CPUs as compose takes them: a decimal number of cores."""
    quantity = cpu_quantity(cpu_count)
    return f"{int(quantity[:-1]) / 1000:g}" if quantity.endswith("m") else quantity


def compose_document(
    wiring: ChainWiring, chainlets_dir: str, entry_port: int = DEFAULT_ENTRY_PORT
) -> dict[str, Any]:
    """The compose file's content: services named as the chain's Kubernetes Services."""
    services = {c.service: _service(wiring, c, chainlets_dir, entry_port) for c in wiring.chainlets}
    return {"name": project_name(wiring.chain), "services": dict(sorted(services.items()))}


def env_example(wiring: ChainWiring, head: str) -> str:
    """``.env.example``: every variable the compose file reads, with no values."""
    lines = [f"# {line}" for line in head.splitlines()]
    lines += [
        "# Copy to .env and fill in; .env holds credentials: keep it out of version control.",
        "#",
        "# The token chainlets of this chain send each other, e.g. the output of `openssl rand -hex 32`.",
        "CHAINS_INTERNAL_TOKEN=",
        "# Optional: an API key callers of the entrypoint must send (Authorization: Bearer KEY).",
        "CHAINS_API_KEY=",
    ]
    for key in wiring.secret_keys:
        users = ", ".join(c.name for c in wiring.chainlets if key in c.secret_keys)
        lines += [f"# Secret {key!r} (read by {users}).", f"{wiring.secret_env(key)}="]
    return "\n".join(lines) + "\n"


def _steps(wiring: ChainWiring, entry_port: int) -> str:
    return "\n".join(
        [
            "",
            "Steps: build the images (`chains push --target docker` builds and tags them as named here; or",
            "put a wheel of the chains SDK in each build context's wheels/ and add --build), then:",
            "  cp .env.example .env   # and fill it in",
            "  docker compose up -d --wait",
            f"  curl -sN http://127.0.0.1:{entry_port}/run_remote -H 'Content-Type: application/json' \\",
            "       -d '{...the arguments...}'",
            f"Entrypoint: {wiring.entrypoint.name} ({wiring.entrypoint.service}); "
            "the other services are not published.",
        ]
    )


def write_compose(
    chain: Chain,
    source_file: Path,
    code_versions: dict[str, str],
    out_dir: Path,
    *,
    registry: str | None,
    command: str,
    entry_port: int = DEFAULT_ENTRY_PORT,
    chainlets_dir: str = CHAINLETS_DIR,
    cors_origins: Iterable[str] = (),
) -> tuple[ChainWiring, list[Path]]:
    wiring = wire(chain, code_versions, registry=registry, environment=ENVIRONMENT, cors_origins=cors_origins)
    head = header(source_file, chain.name, command)
    files = {
        "compose.yaml": dump(
            compose_document(wiring, chainlets_dir, entry_port), header=head + _steps(wiring, entry_port)
        ),
        ".env.example": env_example(wiring, head),
    }
    return wiring, write_export(out_dir, files, owned=("compose.yaml", ".env.example"))


class ComposeTarget:
    """Writes ``compose.yaml``, ``.env.example`` and the generated code each image is built from."""

    def export(self, chain: Chain, source_file: Path, options: ComposeOptions) -> list[Path]:
        out_dir, generated = export_code(
            chain,
            source_file,
            options,
            target="compose",
            code_dir=CHAINLETS_DIR,
            apply_hint="run `docker compose up` in the output",
        )
        entry_port = options.entry_port or DEFAULT_ENTRY_PORT
        given = []
        if options.registry:
            given += ["--registry", options.registry]
        if options.entry_port:
            given += ["--port", str(options.entry_port)]
        given += [arg for origin in options.cors_origins for arg in ("--cors-origin", origin)]
        _, written = write_compose(
            chain,
            source_file,
            {name: c.code_version for name, c in generated.chainlets.items()},
            out_dir,
            registry=options.registry,
            command=regenerate_command(source_file, "compose", out_dir, *given),
            entry_port=entry_port,
            cors_origins=options.cors_origins,
        )
        return [*written, *(c.directory for c in generated.chainlets.values())]


# -- the swarm variant: `docker stack deploy` of the same services ------------------------------

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


def swarm_secret_variables(wiring: ChainWiring, chainlet: ChainletWiring, with_api_key: bool) -> list[str]:
    """The credentials ``chainlet`` gets in a swarm, as the variable names the server reads."""
    names = ["CHAINS_INTERNAL_TOKEN"]
    if chainlet.is_entrypoint and with_api_key:
        names.append("CHAINS_API_KEY")
    names += [wiring.secret_env(key) for key in chainlet.secret_keys]
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
    variables = swarm_secret_variables(wiring, chainlet, "CHAINS_API_KEY" in secrets)
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
        "stop_grace_period": f"{math.ceil(chainlet.grace_sec) + _STOP_MARGIN_SEC}s",
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


TARGET = Target(
    name="compose",
    kind=TargetKind.EXPORT,
    options=ComposeOptions,
    acts_on=frozenset({SettingGroup.BUILD_COMMANDS, SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
    build=ComposeTarget,
)
