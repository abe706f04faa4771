"""The chain's credentials as swarm secrets: made for a push, given to its tasks as files,
removed once no service refers to them.

A swarm task reads a secret as a file, so no credential is written to the stack file or to a
service's environment. The internal token lives as long as the chain (old and new tasks of a
rolling update must trust each other); the API key, the chain's own secrets and the TLS
certificates of the chainlets are made anew by every push, labelled with it, and those of
earlier pushes go once the swarm has rolled every service over to the new ones. A push that
fails removes the secrets it made (:meth:`PushSecrets.discard`).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

from chains.errors import ChainsUsageError
from chains.targets.docker_engine import LABEL, Engine
from chains.targets.swarm_stack import SwarmTlsSecrets, swarm_secret_variables
from chains.targets.wiring import ChainWiring

__all__ = ["PushSecrets", "chain_secrets", "remove_unused_secrets"]


class PushSecrets:
    """The swarm secrets one push makes for chain ``chain`` (its stack ``stack``), each
    remembered in ``created`` so that a push that fails can take them back."""

    def __init__(self, engine: Engine, chain: str, stack: str, deploy_id: str) -> None:
        self.engine = engine
        self.chain = chain
        self.stack = stack
        self.deploy_id = deploy_id
        self.created: list[str] = []

    def credentials(
        self,
        wiring: ChainWiring,
        api_key: str | None,
        given: Mapping[str, str],
        jobs: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Every credential as a swarm secret: variable name -> secret name.

        The internal token is made once per chain and kept across pushes, so that old and new
        tasks trust each other while a rolling update runs. The API key and the chain's secrets
        (``given``, by key) may change from push to push: each push makes its own, as for the
        entrypoint's job store variables (``jobs``, from
        :func:`~chains.targets.job_env.shared_job_environment`).
        """
        engine, deploy_id = self.engine, self.deploy_id
        names: dict[str, str] = {}
        labels = {LABEL: self.chain}
        token = [
            s
            for s in chain_secrets(engine, self.chain)
            if (s.attrs.get("Spec", {}).get("Labels") or {}).get("chains.secret") == "CHAINS_INTERNAL_TOKEN"
        ]
        if token:
            names["CHAINS_INTERNAL_TOKEN"] = str(token[0].name)
        else:
            name = f"{self.stack}-internal-token-{secrets.token_hex(4)}"
            engine.client.secrets.create(
                name=name,
                data=secrets.token_urlsafe(32).encode(),
                labels={**labels, "chains.secret": "CHAINS_INTERNAL_TOKEN"},
            )
            self.created.append(name)
            names["CHAINS_INTERNAL_TOKEN"] = name
        values: dict[str, str] = dict(jobs or {})
        if api_key:
            values["CHAINS_API_KEY"] = api_key
        for chainlet in wiring.chainlets:
            for variable in swarm_secret_variables(wiring, chainlet, False)[1:]:
                key = variable[len("CHAINS_SECRET_") :]
                if key in given:
                    values[variable] = given[key]
        for variable, value in sorted(values.items()):
            name = f"{self.stack}-{variable.lower().replace('_', '-')}-{deploy_id[-6:]}"
            engine.client.secrets.create(
                name=name,
                data=value.encode(),
                labels={**labels, "chains.secret": variable, "chains.deployment": deploy_id},
            )
            self.created.append(name)
            names[variable] = name
        missing = sorted(
            {
                variable
                for chainlet in wiring.chainlets
                for variable in swarm_secret_variables(wiring, chainlet, bool(api_key), bool(jobs))
                if variable not in names
            }
        )
        if missing:
            keys = ", ".join(m.removeprefix("CHAINS_SECRET_") for m in missing)
            raise ChainsUsageError(
                f"no value for secret(s) {keys}: pass --secret KEY=VALUE or --secrets-file"
            )
        return names

    def tls(self, wiring: ChainWiring) -> SwarmTlsSecrets:
        """The chain's CA certificate and a fresh certificate and key for every internal
        chainlet, each a swarm secret of this push; the CA's key stays on this machine."""
        from chains.targets.certificates import LOOPBACK_NAMES, ChainAuthority

        authority = ChainAuthority.load_or_create(self.chain)
        labels = {LABEL: self.chain, "chains.deployment": self.deploy_id}

        def secret(owner: str, kind: str, data: bytes) -> str:
            # Swarm secret names: at most 64 characters.
            digest = hashlib.sha256(owner.encode()).hexdigest()[:6]
            name = f"{owner[:36].rstrip('-_')}-{digest}-tls-{kind}-{self.deploy_id[-6:]}"
            self.engine.client.secrets.create(
                name=name, data=data, labels={**labels, "chains.secret": f"tls-{kind}"}
            )
            self.created.append(name)
            return name

        certificates = {}
        for chainlet in wiring.chainlets:
            if chainlet.is_entrypoint:
                continue  # serves its published port in plain HTTP: docs/deploy.md
            # Dependants reach it by its service name on the stack's network.
            issued = authority.issue([chainlet.service, *LOOPBACK_NAMES])
            certificates[chainlet.name] = (
                secret(chainlet.service, "cert", issued.cert_pem),
                secret(chainlet.service, "key", issued.key_pem),
            )
        return SwarmTlsSecrets(secret(self.stack, "ca", authority.cert_pem), certificates)

    def discard(self) -> None:
        """Remove the secrets this push made, as far as the engine lets: the push failed."""
        for name in self.created:
            with contextlib.suppress(Exception):
                self.engine.client.secrets.get(name).remove()


def chain_secrets(engine: Engine, chain: str) -> list[Any]:
    """Every swarm secret chains made for ``chain``, of any push."""
    return list(engine.client.secrets.list(filters={"label": f"{LABEL}={chain}"}))


def remove_unused_secrets(engine: Engine, chain: str) -> None:
    """Secrets of earlier pushes that no service refers to any more."""
    used = {
        str(ref.get("SecretName"))
        for service in engine.client.services.list(filters={"label": f"{LABEL}={chain}"})
        for ref in service.attrs["Spec"]["TaskTemplate"]["ContainerSpec"].get("Secrets") or []
    }
    for secret in chain_secrets(engine, chain):
        if secret.name not in used:
            with contextlib.suppress(engine.errors.DockerException):
                secret.remove()
