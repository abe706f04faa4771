"""How one chainlet server is set up: read from ``CHAINS_*`` environment variables.

Deploy targets (local processes, containers) start the generated server with these set;
nothing is read from files the image was built with, so secrets never end up in images.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chains.environ import positive_number
from chains.errors import ChainsUsageError
from chains.jobs.settings import JobSettings
from chains.server.cors import CorsPolicy
from chains.server.door import DoorLimits
from chains.server.reconnect import ReconnectSettings
from chains.tls import TlsSettings
from chains.wire import DEFAULT_MAX_FRAME_BYTES, RUN_REMOTE

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DependencyAddress", "ServerSettings", "check_api_key"]

DEFAULT_MAX_BODY_BYTES = 32 * 2**20

SECRET_PREFIX = "CHAINS_SECRET_"
_ADDRESS_KEYS = frozenset({"urls", "path", "auth"})
_AUTH_KEYS = frozenset({"scheme", "secret"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*")  # an HTTP token (RFC 9110)
_SWITCH: dict[str, bool | None] = {"": None, "1": True, "true": True, "0": False, "false": False}
_URLS_FORMAT = (
    "CHAINS_DEPENDENCY_URLS must be a JSON object mapping each dependency to its URLs, "
    '{"Chainlet": ["http://host:port", ...]}, or to an address, {"Chainlet": {"urls": [...], '
    '"path": "/predict", "auth": {"scheme": "Api-Key", "secret": "NAME"}}}'
)


def check_api_key(key: str, where: str = "the API key") -> None:
    """Refuse an API key that could not match what a caller sends.

    The key travels in an HTTP header (``Authorization: Bearer KEY`` or ``X-API-Key``), which
    holds ASCII only and whose value is read without its surrounding spaces: a key with other
    characters would be accepted here and then never match. The message names the first
    offending character by position, never the key itself::

        >>> check_api_key("s3cr3t-k3y")
        >>> check_api_key(" s3cr3t")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        chains.errors.ChainsUsageError: the API key has a space at position 1: ...
    """
    for position, char in enumerate(key, start=1):
        if "!" <= char <= "~":
            continue
        if char == " ":
            what = "a space"
        else:
            what = "a non-ASCII character" if ord(char) > 127 else "a control character"
        raise ChainsUsageError(
            f"{where} has {what} at position {position}: an API key travels in an HTTP header, so it "
            "must be printable ASCII without spaces; make one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )


@dataclass(frozen=True)
class DependencyAddress:
    """Where the calls to one dependency go, and the credential they carry.

    Chainlet servers take ``POST <url>/run_remote`` with the chain's token as a bearer token,
    the default. A dependency served behind a platform's gateway (a Truss model on Baseten,
    say) has an endpoint path and a credential of its own: ``auth_secret`` names the secret
    whose value is sent as ``Authorization: <auth_scheme> <value>``.

    >>> DependencyAddress.parse("Greeter", ["http://127.0.0.1:8001"]).path
    '/run_remote'
    """

    urls: tuple[str, ...]
    path: str = RUN_REMOTE
    auth_scheme: str = "Bearer"
    auth_secret: str | None = None  # None: the chain's internal token

    @classmethod
    def parse(cls, name: str, value: object) -> DependencyAddress:
        """One entry of ``CHAINS_DEPENDENCY_URLS``: a list of URLs, or an address object."""
        where = f"CHAINS_DEPENDENCY_URLS[{name!r}]"
        if isinstance(value, dict):
            unknown = sorted(set(value) - _ADDRESS_KEYS)
            if unknown:
                known = sorted(_ADDRESS_KEYS)
                raise ChainsUsageError(f"{where} has unknown key(s) {unknown}; known: {known}")
            urls = _urls(where, value.get("urls"))
            path = value.get("path", RUN_REMOTE)
            if not isinstance(path, str) or not path.startswith("/"):
                raise ChainsUsageError(f"{where}: path must be a string starting with '/', got {path!r}")
            auth = value.get("auth")
            if auth is None:
                return cls(urls, path)
            if not isinstance(auth, dict) or set(auth) != _AUTH_KEYS:
                raise ChainsUsageError(
                    f'{where}: auth must be {{"scheme": "Api-Key", "secret": "SECRET_NAME"}}, got {auth!r}'
                )
            scheme, secret = auth["scheme"], auth["secret"]
            if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
                raise ChainsUsageError(f"{where}: auth scheme must be a word like 'Api-Key', got {scheme!r}")
            if not isinstance(secret, str) or not secret:
                raise ChainsUsageError(f"{where}: auth secret must name a secret, got {secret!r}")
            return cls(urls, path, scheme, secret)
        return cls(_urls(where, value))


def _urls(where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ChainsUsageError(f"{where}: urls must be a non-empty list of URLs, got {value!r}")
    for url in value:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ChainsUsageError(f"{where}: {url!r} is not an http:// or https:// URL")
    return tuple(url.rstrip("/") for url in value)


def _switch(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = env.get(name, "")
    if raw.strip().lower() not in _SWITCH:
        raise ChainsUsageError(f"{name}={raw!r} must be one of 1, true, 0, false")
    value = _SWITCH[raw.strip().lower()]
    return default if value is None else value


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
    max_queue: int | None = None  # calls waiting before 503; None: 4x concurrency (x max_batch_size)
    grace_sec: float = 30.0
    # A client must send its body within this, or it is answered 408: slow clients would
    # hold connections and their file descriptors for good otherwise. The limits on what
    # comes before the body (headers, connections) are the door's (chains/server/door.py).
    body_timeout_sec: float = 60.0
    door: DoorLimits = field(default_factory=DoorLimits)
    dependencies: Mapping[str, DependencyAddress] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    data_dir: Path | None = None
    environment: str | None = None
    docs: bool | None = None  # None: only on the entrypoint
    ready_file: Path | None = None  # created once the chainlet is built (for a supervisor)
    # Stubs retry exceptions their callee raised, as Truss Chains does (see StubOptions).
    retry_user_errors: bool = False
    # Whether the entrypoint sends outside callers every hop's traceback with an error, or only
    # its type, message and request id. None: only to a caller that proves to be the chain's
    # owner (``chains call``, see chains.wire.debug_proof); other callers would read the
    # server's file paths and the chain's internal names. False: to nobody.
    debug_errors: bool | None = None
    # The origins whose web pages may call the entrypoint (see chains/server/cors.py).
    cors: CorsPolicy = field(default_factory=lambda: CorsPolicy(()))
    # One INFO line per call (chainlet, status, duration, stream items, request id).
    request_log: bool = True
    # HTTPS served, and the CA the dependencies are verified with (see chains/tls.py).
    tls: TlsSettings = field(default_factory=TlsSettings)
    # The entrypoint's async calls (docs/jobs.md); None: no async routes.
    jobs: JobSettings | None = None
    # Streams a reader may come back to after a cut (chains/server/reconnect.py).
    reconnect: ReconnectSettings = field(default_factory=ReconnectSettings)

    @property
    def shows_tracebacks(self) -> bool:
        """Whether errors leave the chain with their tracebacks for every caller (see
        ``debug_errors``)."""
        return self.debug_errors is True

    def __repr__(self) -> str:
        # Never print credentials: settings end up in logs and tracebacks.
        return (
            f"ServerSettings(chain={self.chain!r}, is_entrypoint={self.is_entrypoint}, "
            f"dependencies={sorted(self.dependencies)})"
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerSettings:
        """Settings from ``CHAINS_*`` variables; a malformed value names the variable."""
        env = os.environ if env is None else env

        try:
            urls = json.loads(env.get("CHAINS_DEPENDENCY_URLS") or "{}")
        except ValueError:
            raise ChainsUsageError(_URLS_FORMAT) from None
        if not isinstance(urls, dict):
            raise ChainsUsageError(_URLS_FORMAT)
        dependencies = {str(k): DependencyAddress.parse(str(k), v) for k, v in urls.items()}
        secrets = {k[len(SECRET_PREFIX) :]: v for k, v in env.items() if k.startswith(SECRET_PREFIX)}
        concurrency = positive_number(env, "CHAINS_CONCURRENCY", None)
        max_queue = positive_number(env, "CHAINS_MAX_QUEUE", None)
        docs = env.get("CHAINS_DOCS")
        api_key = env.get("CHAINS_API_KEY") or None
        if api_key is not None:
            check_api_key(api_key, "CHAINS_API_KEY")
        debug_errors = env.get("CHAINS_DEBUG_ERRORS", "")
        if debug_errors.strip().lower() not in _SWITCH:
            raise ChainsUsageError(f"CHAINS_DEBUG_ERRORS={debug_errors!r} must be one of 1, true, 0, false")
        return cls(
            chain=env.get("CHAINS_CHAIN", "chain"),
            is_entrypoint=env.get("CHAINS_IS_ENTRYPOINT", "") in ("1", "true"),
            internal_token=env.get("CHAINS_INTERNAL_TOKEN") or None,
            api_key=api_key,
            max_body_bytes=int(positive_number(env, "CHAINS_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES) or 0),
            max_frame_bytes=int(positive_number(env, "CHAINS_MAX_FRAME_BYTES", DEFAULT_MAX_FRAME_BYTES) or 0),
            concurrency=int(concurrency) if concurrency is not None else None,
            max_queue=int(max_queue) if max_queue is not None else None,
            grace_sec=positive_number(env, "CHAINS_GRACE_SEC", 30.0) or 30.0,
            door=DoorLimits.from_env(env),
            body_timeout_sec=positive_number(env, "CHAINS_BODY_TIMEOUT_SEC", 60.0) or 60.0,
            dependencies=dependencies,
            secrets=secrets,
            data_dir=Path(env["CHAINS_DATA_DIR"]) if env.get("CHAINS_DATA_DIR") else None,
            environment=env.get("CHAINS_ENVIRONMENT") or None,
            docs=None if docs is None else docs in ("1", "true"),
            ready_file=Path(env["CHAINS_READY_FILE"]) if env.get("CHAINS_READY_FILE") else None,
            retry_user_errors=env.get("CHAINS_RETRY_USER_ERRORS", "") in ("1", "true"),
            debug_errors=_SWITCH[debug_errors.strip().lower()],
            cors=_cors(env.get("CHAINS_CORS_ORIGINS", "")),
            request_log=_switch(env, "CHAINS_REQUEST_LOG", default=True),
            tls=TlsSettings.from_env(env),
            jobs=JobSettings.from_env(env) if env.get("CHAINS_IS_ENTRYPOINT", "") in ("1", "true") else None,
            reconnect=ReconnectSettings.from_env(env),
        )


def _cors(text: str) -> CorsPolicy:
    try:
        return CorsPolicy.parse(text)
    except ChainsUsageError as exc:
        raise ChainsUsageError(f"CHAINS_CORS_ORIGINS: {exc}") from None
