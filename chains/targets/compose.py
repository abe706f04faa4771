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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chains.jobs.settings import JOBS_STORE_ENV, WEBHOOK_SECRET_ENV
from chains.model import Chain
from chains.targets import SettingGroup, Target, TargetKind
from chains.targets.files import export_code, header, regenerate_command, write_export
from chains.targets.job_env import JOBS_FILE, JOBS_MOUNT
from chains.targets.k8s_manifests import cpu_quantity
from chains.targets.options import ComposeOptions
from chains.targets.wiring import LABEL_NAME, LABEL_PART_OF, PORT, ChainletWiring, ChainWiring, wire
from chains.targets.yamltext import dump

__all__ = [
    "CHAINLETS_DIR",
    "DEFAULT_ENTRY_PORT",
    "STOP_MARGIN_SEC",
    "ComposeTarget",
    "compose_document",
    "cpu_quantity_compose",
    "env_example",
    "memory_compose",
    "project_name",
]

CHAINLETS_DIR = "chainlets"
ENVIRONMENT = "compose"
DEFAULT_ENTRY_PORT = 8000
STOP_MARGIN_SEC = 5
_HEALTHCHECK = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/readyz', timeout=4)"


JOBS_VOLUME = "jobs"  # the entrypoint's job store; compose names it <project>_jobs


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
        # Async calls: SQLite on the project's volume unless .env names a PostgreSQL server.
        env[JOBS_STORE_ENV] = f"${{{JOBS_STORE_ENV}:-{JOBS_MOUNT}/{JOBS_FILE}}}"
        env[WEBHOOK_SECRET_ENV] = f"${{{WEBHOOK_SECRET_ENV}:-}}"
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
        "stop_grace_period": f"{math.ceil(chainlet.grace_sec) + STOP_MARGIN_SEC}s",
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
        # The project's, so that `up` after a change finds the queue; `down -v` forgets it.
        service["volumes"] = [f"{JOBS_VOLUME}:{JOBS_MOUNT}"]
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
    return {
        "name": project_name(wiring.chain),
        "services": dict(sorted(services.items())),
        "volumes": {JOBS_VOLUME: {}},
    }


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
    lines += [
        f"# Optional: where async calls are kept; empty: SQLite in the volume {JOBS_VOLUME}. A",
        "# postgresql://USER:PASSWORD@HOST:5432/DB URL names a server instead; off turns them off.",
        f"{JOBS_STORE_ENV}=",
        "# Optional: the secret async calls' webhooks are signed with (unsigned when empty).",
        f"{WEBHOOK_SECRET_ENV}=",
    ]
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


TARGET = Target(
    name="compose",
    kind=TargetKind.EXPORT,
    options=ComposeOptions,
    acts_on=frozenset({SettingGroup.BUILD_COMMANDS, SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
    build=ComposeTarget,
)
