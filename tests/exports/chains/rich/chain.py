"""A chain that uses every deployment setting the export targets turn into configuration.

Replicas, autoscaling, a GPU, declared secrets, environment variables, a custom drain time, names
with underscores and capitals, and a dependency used by two callers.
"""

from collections.abc import AsyncIterator

import chains


class Embed_Model(chains.ChainletBase):
    """Autoscales between 2 and 8 replicas, aiming at 4 calls in flight per replica; a T4 each."""

    remote_config = chains.RemoteConfig(
        compute=chains.Compute(cpu_count=0.5, memory="1.5Gi", gpu="T4", concurrency=8, autoscale=(2, 8, 4)),
        assets=chains.Assets(secret_keys=["hf_token"]),
        docker_image=chains.DockerImage(pip_requirements=["numpy>=1.26"]),
    )

    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        self._token = context.secrets["hf_token"]

    async def run_remote(self, text: str) -> list[float]:
        return [float(len(text)), float(len(self._token))]


class Store(chains.ChainletBase):
    """Three fixed replicas, its own secret, and a longer drain."""

    remote_config = chains.RemoteConfig(
        compute=chains.Compute(cpu_count=2, memory="1G", replicas=3),
        assets=chains.Assets(secret_keys=["db_password", "hf_token"]),
        options=chains.ChainletOptions(env_variables={"CHAINS_GRACE_SEC": "50", "LOG_LEVEL": "debug"}),
    )

    def __init__(
        self,
        embed: Embed_Model = chains.depends(Embed_Model),
        context: chains.DeploymentContext = chains.depends_context(),
    ) -> None:
        self._embed = embed
        self._password = context.secrets["db_password"]

    async def run_remote(self, text: str) -> int:
        return len(await self._embed.run_remote(text))


@chains.mark_entrypoint("rich_chain")
class Front(chains.ChainletBase):
    """Streams, and calls both others."""

    def __init__(
        self,
        store: Store = chains.depends(Store, retries=1),
        embed: Embed_Model = chains.depends(Embed_Model, timeout_sec=5),
    ) -> None:
        self._store, self._embed = store, embed

    async def run_remote(self, text: str) -> AsyncIterator[str]:
        yield str(await self._store.run_remote(text))
        for value in await self._embed.run_remote(text):
            yield f" {value}"
