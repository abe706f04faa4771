"""How one chainlet server is set up: read from ``CHAINS_*`` environment variables.

Deploy targets (local processes, containers) start the generated server with these set;
nothing is read from files the image was built with, so secrets never end up in images.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chains.errors import ChainsUsageError

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ServerSettings"]

DEFAULT_MAX_BODY_BYTES = 32 * 2**20
DEFAULT_MAX_FRAME_BYTES = 64 * 2**20

SECRET_PREFIX = "CHAINS_SECRET_"


@dataclass(frozen=True)
class ServerSettings:
    """Everything a chainlet server needs besides the chainlet class itself."""

    chain: str = "chain"
    is_entrypoint: bool = False
    internal_token: str | None = None
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    concurrency: int | None = None  # None: the chainlet's Compute(concurrency=...)
    max_queue: int | None = None  # calls waiting for a slot before 503; None: 4x concurrency
    grace_sec: float = 30.0
    # A client must send a request's line and headers within this, and its body within
    # body_timeout_sec; otherwise the connection is closed (408 for a body). Slow clients
    # (slowloris) would hold connections and their file descriptors for good otherwise.
    header_timeout_sec: float = 30.0
    body_timeout_sec: float = 60.0
    dependency_urls: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    data_dir: Path | None = None
    environment: str | None = None
    docs: bool | None = None  # None: only on the entrypoint
    ready_file: Path | None = None  # created once the chainlet is built (for a supervisor)

    def __repr__(self) -> str:
        # Never print credentials: settings end up in logs and tracebacks.
        return (
            f"ServerSettings(chain={self.chain!r}, is_entrypoint={self.is_entrypoint}, "
            f"dependencies={sorted(self.dependency_urls)})"
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerSettings:
        """Settings from ``CHAINS_*`` variables; a malformed value names the variable."""
        env = os.environ if env is None else env

        def number(name: str, default: float | None) -> float | None:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ChainsUsageError(f"{name}={raw!r} is not a number") from None
            if value <= 0:
                raise ChainsUsageError(f"{name} must be more than zero, got {raw!r}")
            return value

        urls_raw = env.get("CHAINS_DEPENDENCY_URLS", "{}")
        try:
            urls = json.loads(urls_raw)
            dependency_urls = {str(k): tuple(str(u) for u in v) for k, v in urls.items()}
        except (ValueError, AttributeError, TypeError):
            raise ChainsUsageError(
                'CHAINS_DEPENDENCY_URLS must be a JSON object {"Chainlet": ["http://host:port", ...]}'
            ) from None
        secrets = {k[len(SECRET_PREFIX) :]: v for k, v in env.items() if k.startswith(SECRET_PREFIX)}
        concurrency = number("CHAINS_CONCURRENCY", None)
        max_queue = number("CHAINS_MAX_QUEUE", None)
        docs = env.get("CHAINS_DOCS")
        return cls(
            chain=env.get("CHAINS_CHAIN", "chain"),
            is_entrypoint=env.get("CHAINS_IS_ENTRYPOINT", "") in ("1", "true"),
            internal_token=env.get("CHAINS_INTERNAL_TOKEN") or None,
            api_key=env.get("CHAINS_API_KEY") or None,
            max_body_bytes=int(number("CHAINS_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES) or 0),
            max_frame_bytes=int(number("CHAINS_MAX_FRAME_BYTES", DEFAULT_MAX_FRAME_BYTES) or 0),
            concurrency=int(concurrency) if concurrency is not None else None,
            max_queue=int(max_queue) if max_queue is not None else None,
            grace_sec=number("CHAINS_GRACE_SEC", 30.0) or 30.0,
            header_timeout_sec=number("CHAINS_HEADER_TIMEOUT_SEC", 30.0) or 30.0,
            body_timeout_sec=number("CHAINS_BODY_TIMEOUT_SEC", 60.0) or 60.0,
            dependency_urls=dependency_urls,
            secrets=secrets,
            data_dir=Path(env["CHAINS_DATA_DIR"]) if env.get("CHAINS_DATA_DIR") else None,
            environment=env.get("CHAINS_ENVIRONMENT") or None,
            docs=None if docs is None else docs in ("1", "true"),
            ready_file=Path(env["CHAINS_READY_FILE"]) if env.get("CHAINS_READY_FILE") else None,
        )
