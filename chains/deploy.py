"""``chains.push``: check, generate and start a chain, and the handle to the running chain."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from chains.chainlet import ChainletBase
from chains.endpoint import EndpointSpec
from chains.errors import ChainsRuntimeError, ChainsUsageError
from chains.loader import load_chain
from chains.model import Chain
from chains.origins import check_origin
from chains.server.settings import check_api_key
from chains.stubs import StubBase, StubOptions
from chains.targets import (
    PushOptions,
    for_target,
    is_alive,
    options_for,
    running_target,
    target,
    target_names,
)
from chains.targets.state import ChainState, Pushed, chain_dir, chain_lock, forget, read_state, stop_grace

if TYPE_CHECKING:
    from chains.streaming import StreamTypes

__all__ = [
    "ChainHandle",
    "StreamContents",
    "collect_secrets",
    "find_state",
    "parse_dotenv",
    "push",
    "push_chain",
    "restart_chain",
    "stop_chain",
]

# How long a push or stop waits for another push or stop of the same chain to finish.
LOCK_WAIT_ENV = "CHAINS_LOCK_WAIT_SEC"
_LOCK_WAIT_SEC = 180.0


def parse_dotenv(text: str, origin: str = "secrets file") -> dict[str, str]:
    """``KEY=VALUE`` lines (``export`` prefix, quotes and ``#`` comments allowed)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ChainsUsageError(f"{origin}:{number}: expected KEY=VALUE, got {raw!r}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def collect_secrets(
    chain: Chain,
    given: Mapping[str, str] | None = None,
    secrets_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every secret the chain declares, from (by precedence) ``given``, the file, then
    ``CHAINS_SECRET_<KEY>`` variables; a declared secret with no value is an error naming it."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    from_env = {
        k.removeprefix("CHAINS_SECRET_"): v for k, v in environ.items() if k.startswith("CHAINS_SECRET_")
    }
    values.update(from_env)
    if secrets_file is not None:
        path = Path(secrets_file)
        try:
            values.update(parse_dotenv(path.read_text(), str(path)))
        except FileNotFoundError:
            raise ChainsUsageError(f"secrets file {path} does not exist") from None
    values.update(given or {})
    missing = []
    needed: dict[str, str] = {}
    for spec in chain.chainlets:
        for key in spec.remote_config.assets.secret_keys:
            if key in values:
                needed[key] = values[key]
            else:
                missing.append(f"{key!r} (chainlet {spec.name})")
    if missing:
        first = missing[0].split("'")[1]
        raise ChainsUsageError(
            f"missing secret {', '.join(missing)}: pass --secret {first}=VALUE, put it in a --secrets-file, "
            f"or set CHAINS_SECRET_{first}"
        )
    return needed


@dataclass(frozen=True)
class StreamContents:
    """A whole structured stream, read and typed: what ``ChainHandle.call`` returns for an
    entrypoint that streams with ``stream_types``::

        with chains.push(Entry) as chain:
            answer = chain.call(prompt="hi")
            print(answer.header, [token.text for token in answer.items], answer.footer)

    ``header`` and ``footer`` are None when the stream's types have none.
    """

    items: list[Any]
    header: Any = None
    footer: Any = None

    @classmethod
    async def read(cls, types: StreamTypes[Any, Any, Any], source: AsyncIterator[bytes]) -> StreamContents:
        """Read ``source``, the framed bytes of a structured stream, to its end."""
        from chains.streaming import stream_reader

        reader: Any = stream_reader(types, source)
        async with reader:
            header = await reader.read_header() if types.header_type is not None else None
            items = [item async for item in reader.read_items()]
            footer = await reader.read_footer() if types.footer_type is not None else None
        return cls(items, header, footer)


@dataclass
class ChainHandle:
    """A running chain: its URLs, a way to call it, and ``stop()``. A context manager::

    with chains.push(Entry) as chain:
        print(chain.call(prompt="hi"))
    """

    name: str
    target: str
    entrypoint_url: str
    chainlets: dict[str, list[str]]
    endpoint: EndpointSpec
    state: ChainState
    api_key: str | None = None

    def _client(self) -> StubBase:
        # A stub per call: its HTTP session belongs to the event loop it was opened on, and
        # call() runs each call on a loop of its own, in whichever thread calls it.
        stub_cls = type(f"{self.endpoint.chainlet}Client", (StubBase,), {"endpoint": self.endpoint})
        stub: StubBase = stub_cls(
            self.entrypoint_url,
            name=self.endpoint.chainlet,
            options=StubOptions(retries=2),
            token=self.api_key,
        )
        return stub

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """Call the entrypoint; a stream is collected into a list, and a structured stream
        (``stream_types``) into a :class:`StreamContents` of typed items, header and footer."""
        client = self._client()
        try:
            types = self.endpoint.stream_types
            if types is not None:
                return await StreamContents.read(types, client.stream_remote(*args, **kwargs))
            if self.endpoint.is_stream:
                return [item async for item in client.stream_remote(*args, **kwargs)]
            return await client.call_remote(*args, **kwargs)
        finally:
            await client.aclose()

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Call the entrypoint from sync code, from any thread; a stream is collected into a list."""
        return asyncio.run(self.acall(*args, **kwargs))

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Call a streaming entrypoint and yield its items as they arrive."""
        client = self._client()
        try:
            async for item in client.stream_remote(*args, **kwargs):
                yield item
        finally:
            await client.aclose()

    def stop(self) -> None:
        stop_chain(self.name)

    def __enter__(self) -> ChainHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def push_chain(
    chain: Chain, source_file: Path, target: str = "local", options: PushOptions | None = None
) -> ChainHandle:
    """Start an already loaded and checked chain on a running ``target``.

    ``options`` are the target's own type (``LocalOptions``, ``DockerOptions``, ...; see
    ``chains.targets.options``), or the :class:`PushOptions` every target takes::

        push_chain(chain, source, "docker", DockerOptions(entry_port=8000, timeout=120))
    """
    options = for_target(target, options or PushOptions())
    if options.api_key:
        check_api_key(options.api_key)
    runner = running_target(target)
    options = dataclasses.replace(options, secrets=collect_secrets(chain, options.secrets))
    with _locked(chain.name):
        state = _replace(chain.name, target, runner.push(chain, source_file, options))
    return ChainHandle(
        name=chain.name,
        target=target,
        entrypoint_url=state.entrypoint_url,
        chainlets={name: [p.url for p in state.replicas(name)] for name in state.chainlet_names()},
        endpoint=chain.entrypoint.endpoint,
        state=state,
        api_key=options.api_key,
    )


def _replace(name: str, target_name: str, pushed: Pushed) -> ChainState:
    """Stop what the new deployment replaced, the same way on every target: each replaced
    deployment may drain for its own grace (:func:`stop_grace`), and one that cannot be
    stopped (its engine does not answer) is named, not a failure: the new one is current.
    A target that updates in place leaves its own previous deployment as it was: it is the
    new one."""
    in_place = target(target_name).capabilities.updates_in_place
    for old in pushed.replaced:
        if in_place and old.target == target_name:
            continue
        try:
            running_target(old.target).stop(old, stop_grace(old))
        except ChainsRuntimeError as exc:
            warnings.warn(
                f"chain {name!r} now runs its new deployment, but the one it replaced "
                f"({old.deployment} on target {old.target}) could not be stopped: {exc}",
                stacklevel=3,
            )
    if pushed.forget_others:
        forget(name, keep=pushed.state.deployment)
    pushed.settle()
    return pushed.state


def stop_chain(name: str, grace: float | None = None) -> list[ChainState]:
    """Stop chain ``name`` on whatever target runs it, and forget it (its logs stay).

    ``grace`` is how long each deployment may drain before it is killed; by default its own
    drain period and a margin. Works on stale state too: whatever of it still runs is
    stopped. A local deployment the state file lost track of (a truncated or deleted file) is
    found from its folder and stopped as well. Returns what was stopped: empty when nothing
    of the chain ran.
    """
    try:
        state: ChainState | None = read_state(name)
    except ChainsUsageError:
        if not chain_dir(name).is_dir():
            raise
        state = None
    with _locked(name):
        if state is not None:
            state = _reread(name, state)
        strays = [s for s in _local_deployments(name) if state is None or s.deployment != state.deployment]
        if state is None and not strays and not _has_state(name):
            read_state(name)  # nothing of the chain here: the usual error
        stopped = [*([state] if state is not None else []), *strays]
        for one in stopped:
            # By default as long as the deployment's own drain takes, so no call is cut.
            wait = grace if grace is not None else stop_grace(one)
            running_target(one.target).stop(one, wait)
        forget(name)
    return stopped


def restart_chain(state: ChainState, chainlet: str | None, timeout: float = 60.0) -> list[str]:
    """Restart ``chainlet`` (every chainlet when None) of a running local chain without a
    re-push; the chainlets restarted, once ready."""
    if not target(state.target).capabilities.restart:
        able = ", ".join(n for n in target_names() if target(n).capabilities.restart)
        raise ChainsUsageError(
            f"chain {state.chain!r} runs on target {state.target!r}; `chains restart` is for the {able} "
            "target: push the chain again to restart it"
        )
    if not is_alive(state):
        raise ChainsUsageError(f"chain {state.chain!r} is stale (its supervisor is gone): push it again")
    from chains.targets.local import control

    folder = chain_dir(state.chain) / "deployments" / state.deployment
    answer = control(folder, {"cmd": "restart", "chainlet": chainlet, "timeout": timeout}, timeout + 30)
    if not answer.get("ok"):
        raise ChainsRuntimeError(f"restarting chain {state.chain!r}: {answer.get('error')}")
    restarted = answer.get("restarted")
    return [str(n) for n in restarted] if isinstance(restarted, list) else []


def find_state(name: str) -> ChainState:
    """The state of chain ``name``; when its state file is lost (truncated, deleted), the
    state of its newest local deployment that still runs, asked of its supervisor."""
    try:
        return read_state(name)
    except ChainsUsageError:
        found = _local_deployments(name)
        if not found:
            raise
        return found[-1]


def _reread(name: str, state: ChainState) -> ChainState:
    # A push may have finished while this stop waited for the lock.
    try:
        return read_state(name)
    except ChainsUsageError:
        return state


def _has_state(name: str) -> bool:
    folder = chain_dir(name)
    deployments = folder / "deployments"
    link = folder / "state.json"
    return link.is_symlink() or link.exists() or (deployments.is_dir() and any(deployments.iterdir()))


def _local_deployments(name: str) -> list[ChainState]:
    from chains.targets.local import running_deployments  # the local target's own lookup

    return running_deployments(name)


def _locked(name: str) -> contextlib.AbstractContextManager[None]:
    """One push or stop of chain ``name`` at a time (across processes)."""
    return chain_lock(name, float(os.environ.get(LOCK_WAIT_ENV) or _LOCK_WAIT_SEC))


def push(
    entrypoint: type[ChainletBase] | str | Path,
    *,
    target: str = "local",
    name: str | None = None,
    secrets: Mapping[str, str] | None = None,
    port: int | None = None,
    timeout: float = 60.0,
    api_key: str | None = None,
    cors_origins: Iterable[str] = (),
) -> ChainHandle:
    """Check, generate and start the chain of ``entrypoint`` (a chainlet class or a file).

    ``cors_origins`` lets web pages of those origins call the entrypoint from a browser
    (besides the entrypoint's ``RemoteConfig(cors_origins=...)``). Returns once every
    chainlet is ready::

        with chains.deploy.push(Entry, name="demo") as chain:
            assert chain.call(prompt="hi")

    ``chains.push`` is this push behind ``chains.truss_compat.push``, which takes Truss
    Chains' arguments too (the chain name by position, its Baseten-only options).
    """
    if isinstance(entrypoint, str | Path):
        source = Path(entrypoint)
        chain = load_chain(source, name=name)
    else:
        file = inspect.getsourcefile(entrypoint)
        if file is None:
            raise ChainsUsageError(
                f"cannot find the source file of {entrypoint.__name__}; pass the file instead"
            )
        source = Path(file)
        chain = load_chain(source, entrypoint.__name__, name)
    options = options_for(
        target,
        secrets=dict(secrets or {}),
        entry_port=port,
        timeout=timeout,
        api_key=api_key,
        cors_origins=tuple(check_origin(origin) for origin in cors_origins),
    )
    return push_chain(chain, source, target, options)
