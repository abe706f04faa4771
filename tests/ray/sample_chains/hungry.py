"""One chainlet asking for more CPUs than any node of the test cluster has (4 each): Serve
cannot place its replica, and says so (tests/ray/test_ray_user.py)."""

from __future__ import annotations

import chains

CPUS = 6


@chains.mark_entrypoint("ray-hungry")
class Hungry(chains.ChainletBase):
    remote_config = chains.RemoteConfig(compute=chains.Compute(cpu_count=CPUS, memory="64Mi"))

    async def run_remote(self, text: str) -> str:
        return text
