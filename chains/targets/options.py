"""What ``chains push`` was asked for, beyond the chain itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PushOptions"]


@dataclass(frozen=True)
class PushOptions:
    """What ``chains push`` was asked for, beyond the chain itself."""

    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    entry_port: int | None = None
    timeout: float = 60.0
    api_key: str | None = field(default=None, repr=False)  # required by the entrypoint when set
    base_image: str | None = None  # docker: the image each chainlet's image builds on
    registry: str | None = None  # kubernetes: where images are pushed, e.g. "registry.example/team"
    out_dir: Path | None = None  # export targets: where to write
    apply: bool = False  # kubernetes: run `kubectl apply -k` on the result
    model_urls: Mapping[str, str] = field(default_factory=dict)  # truss: chainlet -> its model's predict URL
    address: str | None = None  # ray: the cluster (ray://HEAD:10001, HEAD:PORT or auto)
    cors_origins: tuple[str, ...] = ()  # more origins whose pages may call the entrypoint
