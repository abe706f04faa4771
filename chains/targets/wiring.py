"""How the chainlets of an exported chain find and trust each other: names, URLs, labels, environment.

Export targets (``kubernetes``, ``compose``) run each chainlet as a service named after the chain
and the chainlet, listening on :data:`PORT`; a dependency's URL is its service's DNS name. This
module decides those names once, so that the manifests, the compose file and the tests agree.

>>> dns_label("hello", "Text_Gen")
'hello-text-gen'
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from chains.errors import ChainsUsageError
from chains.model import Chain, ChainletSpec
from chains.server.settings import SECRET_PREFIX
from chains.targets import cors_env
from chains.targets.images import image_name

__all__ = [
    "LABEL_COMPONENT",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_PART_OF",
    "PORT",
    "PRESTOP_SEC",
    "ChainWiring",
    "ChainletWiring",
    "dns_label",
    "drain_grace",
    "label_value",
    "wire",
]

PORT = 8000
DEFAULT_GRACE_SEC = 30.0
# Seconds a terminating pod keeps serving before its server starts draining: the time the
# cluster takes to stop sending it new connections.
PRESTOP_SEC = 5
_TERMINATION_MARGIN_SEC = 5

LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"

_DNS_MAX = 63

# How chainlets call each other: https where the target serves them TLS (chains/tls.py).
Scheme = Literal["http", "https"]
_LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")


def dns_label(chain: str, chainlet: str) -> str:
    """A DNS label (RFC 1123: lowercase letters, digits, '-'; at most 63) for ``chainlet`` of ``chain``."""
    text = re.sub(r"[^a-z0-9]+", "-", f"{chain}-{chainlet}".lower()).strip("-")
    if len(text) > _DNS_MAX:
        digest = hashlib.sha256(f"{chain}/{chainlet}".encode()).hexdigest()[:8]
        text = f"{text[: _DNS_MAX - 9].rstrip('-')}-{digest}"
    return text or "chainlet"


def label_value(name: str) -> str:
    """``name`` as a Kubernetes label value (at most 63 characters, alphanumeric at both ends)."""
    if _LABEL_VALUE_RE.match(name):
        return name
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", name)[:_DNS_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)


@dataclass(frozen=True)
class ChainletWiring:
    """One chainlet as an exported service."""

    spec: ChainletSpec
    service: str  # DNS label: the Service, Deployment and compose service name
    image: str
    code_version: str
    is_entrypoint: bool
    env: Mapping[str, str]  # plain settings, sorted by name; secrets are never here
    grace_sec: float
    scheme: Scheme = "http"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.service}:{PORT}"

    @property
    def secret_keys(self) -> tuple[str, ...]:
        return tuple(self.spec.remote_config.assets.secret_keys)

    @property
    def termination_grace_sec(self) -> int:
        """How long the platform waits after asking the process to stop: the pre-stop pause,
        the server's drain, and a margin for the process to exit."""
        return PRESTOP_SEC + math.ceil(self.grace_sec) + _TERMINATION_MARGIN_SEC

    def labels(self, chain: str) -> dict[str, str]:
        return {
            LABEL_COMPONENT: "entrypoint" if self.is_entrypoint else "internal",
            LABEL_MANAGED_BY: "chains",
            LABEL_NAME: label_value(self.name),
            LABEL_PART_OF: label_value(chain),
        }

    def selector(self, chain: str) -> dict[str, str]:
        return {LABEL_NAME: label_value(self.name), LABEL_PART_OF: label_value(chain)}


@dataclass(frozen=True)
class ChainWiring:
    """Every chainlet of a chain as a service, dependencies before their callers."""

    chain: str
    chainlets: tuple[ChainletWiring, ...]

    @property
    def entrypoint(self) -> ChainletWiring:
        return next(c for c in self.chainlets if c.is_entrypoint)

    def get(self, name: str) -> ChainletWiring:
        for chainlet in self.chainlets:
            if chainlet.name == name:
                return chainlet
        raise KeyError(name)

    @property
    def secret_keys(self) -> tuple[str, ...]:
        """Every secret key some chainlet declares, sorted."""
        return tuple(sorted({key for c in self.chainlets for key in c.secret_keys}))

    def secret_env(self, key: str) -> str:
        """The environment variable a chainlet server reads secret ``key`` from."""
        return f"{SECRET_PREFIX}{key}"


def drain_grace(spec: ChainletSpec) -> float:
    """How long the chainlet drains on SIGTERM: ``CHAINS_GRACE_SEC`` from its options, or the default."""
    raw = spec.remote_config.options.env_variables.get("CHAINS_GRACE_SEC")
    if raw is None:
        return DEFAULT_GRACE_SEC
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise ChainsUsageError(
            f"chainlet {spec.name}: ChainletOptions(env_variables={{'CHAINS_GRACE_SEC': {raw!r}}}) "
            "must be a number of seconds above zero"
        )
    return value


def wire(
    chain: Chain,
    code_versions: Mapping[str, str],
    *,
    registry: str | None,
    environment: str,
    cors_origins: Iterable[str] = (),
    scheme: Scheme = "http",
) -> ChainWiring:
    """The services of ``chain``; ``code_versions`` maps each chainlet to its generated code version.

    ``cors_origins`` are allowed on the entrypoint besides its RemoteConfig's (``--cors-origin``);
    ``scheme`` is the one of the dependencies' URLs.
    """

    services: dict[str, str] = {}
    labels: dict[str, str] = {}
    for spec in chain.chainlets:
        service = dns_label(chain.name, spec.name)
        if service in services.values():
            # Names that differ only in case or punctuation: keep them apart, deterministically.
            digest = hashlib.sha256(spec.name.encode()).hexdigest()[:6]
            service = f"{service[: _DNS_MAX - 7].rstrip('-')}-{digest}"
        services[spec.name] = service
        label = label_value(spec.name)
        if label in labels.values():
            other = next(n for n, v in labels.items() if v == label)
            raise ChainsUsageError(
                f"chainlets {other} and {spec.name} get the same Kubernetes label {label!r}; "
                "give one a shorter or different name with RemoteConfig(name=...)"
            )
        labels[spec.name] = label
    wired = []
    for spec in chain.chainlets:
        grace = drain_grace(spec)
        env = dict(spec.remote_config.options.env_variables)
        env.update(
            {
                "CHAINS_CHAIN": chain.name,
                "CHAINS_ENVIRONMENT": environment,
                "CHAINS_GRACE_SEC": f"{grace:g}",
                "CHAINS_IS_ENTRYPOINT": "1" if spec is chain.entrypoint else "0",
            }
        )
        if spec is chain.entrypoint:
            env.update(cors_env(chain, cors_origins))
        dependencies = sorted({dep.name for dep in spec.dependencies})
        if dependencies:
            urls = {name: [f"{scheme}://{services[name]}:{PORT}"] for name in dependencies}
            env["CHAINS_DEPENDENCY_URLS"] = json.dumps(urls, sort_keys=True, separators=(",", ":"))
        for name in env:
            if name.startswith(SECRET_PREFIX) or name in ("CHAINS_INTERNAL_TOKEN", "CHAINS_API_KEY"):
                raise ChainsUsageError(
                    f"chainlet {spec.name}: ChainletOptions(env_variables=...) sets {name}, which holds a "
                    "credential; declare it in Assets(secret_keys=[...]) instead, so that its value never "
                    "lands in the exported files"
                )
        version = code_versions[spec.name]
        wired.append(
            ChainletWiring(
                spec=spec,
                service=services[spec.name],
                image=image_name(chain.name, spec.name, version, registry),
                code_version=version,
                is_entrypoint=spec is chain.entrypoint,
                env=dict(sorted(env.items())),
                grace_sec=grace,
                scheme=scheme,
            )
        )
    return ChainWiring(chain.name, tuple(wired))
