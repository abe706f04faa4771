"""The environment a chainlet runs with: who it is, the chain's token, its secrets, CORS.

One place for what every running target gives each chainlet, so that a chainlet finds the
same variables from the same sources on each; a target adds its own wiring (dependency
URLs, drain time) on top.
"""

from __future__ import annotations

from collections.abc import Iterable

from chains.model import Chain, ChainletSpec
from chains.origins import check_origin
from chains.targets.options import PushOptions

__all__ = ["chainlet_environment", "cors_env"]


def cors_env(chain: Chain, more: Iterable[str] = ()) -> dict[str, str]:
    """``CHAINS_CORS_ORIGINS`` for the entrypoint: its RemoteConfig's origins and ``more``
    (``chains push --cors-origin``); empty when there are none."""
    given = [*chain.entrypoint.remote_config.cors_origins, *(check_origin(origin) for origin in more)]
    origins = dict.fromkeys(given)
    return {"CHAINS_CORS_ORIGINS": ",".join(origins)} if origins else {}


def chainlet_environment(
    chain: Chain, spec: ChainletSpec, token: str, options: PushOptions, environment: str
) -> dict[str, str]:
    """The variables chainlet ``spec`` of ``chain`` starts with on target ``environment``:
    its own ``env_variables``, then the chain's, its secrets, and on the entrypoint the API
    key and the CORS origins.

    >>> env = chainlet_environment(chain, chain.entrypoint, "tok", PushOptions(), "local")
    >>> env["CHAINS_IS_ENTRYPOINT"], env["CHAINS_ENVIRONMENT"]
    ('1', 'local')
    """
    env = dict(spec.remote_config.options.env_variables)
    env.update(
        {
            "CHAINS_CHAIN": chain.name,
            "CHAINS_INTERNAL_TOKEN": token,
            "CHAINS_IS_ENTRYPOINT": "1" if spec is chain.entrypoint else "0",
            "CHAINS_ENVIRONMENT": environment,
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key in spec.remote_config.assets.secret_keys:
        if key in options.secrets:
            env[f"CHAINS_SECRET_{key}"] = options.secrets[key]
    if spec is chain.entrypoint and options.api_key:
        env["CHAINS_API_KEY"] = options.api_key
    if spec is chain.entrypoint:
        env.update(cors_env(chain, options.cors_origins))
    return env
