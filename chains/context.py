"""What a running chainlet knows about its deployment: secrets, peers, data dir, environment."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chains.errors import ChainsUsageError

__all__ = ["DeploymentContext", "Secrets", "ServiceDescriptor"]


class Secrets(Mapping[str, str]):
    """A read-only mapping of the secrets a chainlet declared in ``Assets(secret_keys=...)``.

    Reading a key that was not declared is a usage error even when a value exists, so that
    what a chainlet can read is visible in its config::

        token = context.secrets["hf_token"]
    """

    def __init__(self, values: Mapping[str, str], declared: Collection[str], chainlet: str = "") -> None:
        self._values = {key: values[key] for key in declared if key in values}
        self._declared = tuple(declared)
        self._chainlet = chainlet

    def __getitem__(self, key: str) -> str:
        if key not in self._declared:
            owner = f"chainlet {self._chainlet!r}" if self._chainlet else "this chainlet"
            raise ChainsUsageError(
                f"secret {key!r} is not declared by {owner}; add it to "
                f"RemoteConfig(assets=chains.Assets(secret_keys=[..., {key!r}]))"
            )
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(
                f"secret {key!r} is declared but has no value; pass it with "
                f"`chains push --secret {key}=...`, CHAINS_SECRET_{key.upper()}, "
                f"or run_local(secrets={{{key!r}: ...}})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        # Never show values: reprs end up in logs and tracebacks.
        return f"Secrets(keys={sorted(self._values)!r})"


@dataclass(frozen=True)
class ServiceDescriptor:
    """Where a chainlet is served: its name and the URLs of its replicas."""

    name: str
    urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeploymentContext:
    """Passed to a chainlet that asks for it with ``chains.depends_context()``.

    >>> ctx = DeploymentContext(secrets=Secrets({"k": "v"}, ["k"]), environment="local")
    >>> ctx.secrets["k"]
    'v'
    """

    secrets: Secrets = field(default_factory=lambda: Secrets({}, ()))
    chainlet_to_service: Mapping[str, ServiceDescriptor] = field(default_factory=dict)
    data_dir: Path | None = None
    environment: str | None = None
