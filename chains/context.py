"""What a running chainlet knows about its deployment: secrets, peers, data dir, environment."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from chains.errors import ChainsUsageError
from chains.rpc_options import StubOptions

if TYPE_CHECKING:
    from chains.metrics import Metrics

__all__ = [
    "BASETEN_API_KEY_SECRET",
    "DeployedServiceDescriptor",
    "DeploymentContext",
    "Secrets",
    "ServiceDescriptor",
]

# The secret holding the API key that calls to deployed models send (``Api-Key <key>``). As in
# Truss Chains, every chainlet may read it without declaring it.
BASETEN_API_KEY_SECRET = "baseten_api_key"
_IMPLICIT_SECRETS = (BASETEN_API_KEY_SECRET,)


class Secrets(Mapping[str, str]):
    """A read-only mapping of the secrets a chainlet declared in ``Assets(secret_keys=...)``.

    Reading a key that was not declared is a usage error even when a value exists, so that
    what a chainlet can read is visible in its config::

        token = context.secrets["hf_token"]
    """

    def __init__(self, values: Mapping[str, str], declared: Collection[str], chainlet: str = "") -> None:
        self._declared = (*declared, *(key for key in _IMPLICIT_SECRETS if key not in declared))
        self._values = {key: values[key] for key in self._declared if key in values}
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
class DeployedServiceDescriptor:
    """Where a service is served and how to call it: a chainlet's replicas (``urls``), or a
    deployed model's ``predict_url``, with the options its stub calls with.

    >>> d = DeployedServiceDescriptor("LLM", predict_url="http://127.0.0.1:8080/predict")
    >>> d.display_name
    'LLM'
    """

    name: str
    predict_url: str | None = None
    options: StubOptions = field(default_factory=StubOptions)
    display_name: str = ""
    urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name)


# The name this type had before Truss Chains' name was adopted.
ServiceDescriptor = DeployedServiceDescriptor


@dataclass(frozen=True)
class DeploymentContext:
    """Passed to a chainlet that asks for it with ``chains.depends_context()``.

    >>> ctx = DeploymentContext(secrets=Secrets({"k": "v"}, ["k"]), environment="local")
    >>> ctx.secrets["k"]
    'v'
    """

    secrets: Secrets = field(default_factory=lambda: Secrets({}, ()))
    chainlet_to_service: Mapping[str, DeployedServiceDescriptor] = field(default_factory=dict)
    data_dir: Path | None = None
    environment: str | None = None
    # The serving chainlet's metrics, so that stubs made from this context (``from_url``)
    # count their calls and retries where its chainlet stubs do.
    metrics: Metrics | None = field(default=None, repr=False, compare=False)

    def get_service_descriptor(self, chainlet_name: str) -> DeployedServiceDescriptor:
        """The descriptor of a dependency or of a service given to ``run_local(chainlet_to_service=...)``::

        llm = LLM.from_url(context.get_service_descriptor("LLM").predict_url, context)
        """
        try:
            return self.chainlet_to_service[chainlet_name]
        except KeyError:
            known = sorted(self.chainlet_to_service) or "none"
            raise ChainsUsageError(
                f"no service {chainlet_name!r} in this chainlet's context (known: {known}); a chainlet "
                "knows its dependencies, and run_local(chainlet_to_service={...}) adds more"
            ) from None

    def get_baseten_api_key(self) -> str:
        """The API key that calls to deployed models send, from the secret ``baseten_api_key``::

        headers = {"Authorization": f"Api-Key {context.get_baseten_api_key()}"}
        """
        try:
            value = self.secrets[BASETEN_API_KEY_SECRET]
        except KeyError:
            value = ""
        if not value:
            raise ChainsUsageError(
                f"the secret {BASETEN_API_KEY_SECRET!r} (the API key sent to deployed models as "
                f"`Authorization: Api-Key <key>`) has no value; pass it with `chains push --secret "
                f"{BASETEN_API_KEY_SECRET}=...`, CHAINS_SECRET_{BASETEN_API_KEY_SECRET}, or "
                f"run_local(secrets={{{BASETEN_API_KEY_SECRET!r}: ...}})"
            )
        return value
