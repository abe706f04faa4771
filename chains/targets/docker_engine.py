"""The container engine, as the docker target uses it: connecting, base images, builds, health.

Everything goes through the Docker Engine API (the ``docker`` SDK, the ``chains-sdk[docker]``
extra), so any engine that speaks it works: dockerd, Docker Desktop, Podman's socket.
Every wait here has a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from chains.errors import BuildFailed, ChainsRuntimeError, ChainsUsageError
from chains.targets.wheelhouse import TargetPython, cache_dir

if TYPE_CHECKING:
    from docker.models.containers import Container

    import docker

__all__ = [
    "LABEL",
    "Build",
    "BuildFailed",
    "Engine",
    "build_network",
    "connect",
    "engine_address",
    "engine_time",
    "started_at",
]

LABEL = "chains.chain"  # on every image, container, network and secret chains makes for a chain

API_TIMEOUT_SEC = 120.0  # one request; builds and log streams read with no timeout of their own
_BUILD_LOG_TAIL = 40

Log = Callable[[str], None]


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _sdk() -> Any:
    try:
        import docker
    except ImportError:
        raise ChainsUsageError(
            "the docker target needs the docker SDK, which is not installed: pip install 'chains-sdk[docker]'"
        ) from None
    return docker


def connect(timeout: float = API_TIMEOUT_SEC) -> Engine:
    """The engine at ``DOCKER_HOST`` (or the default socket); a clear error when none answers."""
    sdk = _sdk()
    try:
        client = sdk.DockerClient(base_url=engine_address(), timeout=int(timeout))
        client.ping()
    except sdk.errors.DockerException as exc:
        raise ChainsRuntimeError(
            f"no container engine answers at {engine_address()} ({_reason(exc)}); start one (dockerd, "
            "Docker Desktop, or docker/start-engine.sh from the chains repository) and point DOCKER_HOST "
            "at it, e.g. DOCKER_HOST=unix:///run/docker.sock"
        ) from None
    return Engine(client)


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Connection refused", "No such file or directory", "Permission denied", "timed out"):
        if marker in text:
            return marker.lower()
    return text.splitlines()[0][:200] if text else type(exc).__name__


@dataclass(frozen=True)
class Build:
    """One image to build: a generated chainlet directory plus the wheels it installs."""

    chainlet: str
    tag: str
    directory: Path
    wheels: Path  # dependency wheels, copied to wheels/
    sdk_wheel: Path  # copied to sdk/
    labels: Mapping[str, str]
    # Installing from wheels in the context needs no network, and an engine may have no default
    # bridge for build steps to use; only apt requirements need one (and a reachable mirror).
    needs_network: bool = False


def build_network() -> str | None:
    """The network of build steps that need one: ``CHAINS_BUILD_NETWORK`` (``docker build
    --network``; ``host`` where the engine has no default bridge or only the host reaches the
    mirror), else the engine's default."""
    return os.environ.get("CHAINS_BUILD_NETWORK") or None


class Engine:
    """A connected engine: the few operations the docker target needs, with readable errors."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.sdk = _sdk()
        self._probe_lock = threading.Lock()

    @property
    def errors(self) -> Any:
        return self.sdk.errors

    def remove_each(self, objects: Iterable[Any], what: str) -> list[str]:
        """Remove each of ``objects`` (networks, secrets): one already gone is fine, any other
        failure becomes a line naming ``what`` and the object, for the caller to report."""
        problems = []
        for item in objects:
            try:
                item.remove()
            except self.errors.NotFound:
                pass
            except self.errors.DockerException as exc:
                problems.append(f"{what} {item.name}: {exc}")
        return problems

    def cpu_count(self) -> int:
        return int(self.client.info().get("NCPU") or os.cpu_count() or 1)

    # -- images ----------------------------------------------------------------------------------

    def image_id(self, reference: str) -> str | None:
        try:
            return str(self.client.images.get(reference).id)
        except self.errors.ImageNotFound:
            return None

    def base_image(self, reference: str, log: Log) -> str:
        """The ID of base image ``reference``, pulled when the engine does not have it."""
        found = self.image_id(reference)
        if found:
            return found
        log(f"pulling base image {reference} ...")
        try:
            return str(self.client.images.pull(reference).id)
        except self.errors.DockerException as exc:
            raise ChainsRuntimeError(
                f"base image {reference} is not on the engine and cannot be pulled ({_reason(exc)}); "
                "with no registry in reach, build one with docker/build-base-image.sh and pass it with "
                "--base-image (or CHAINS_BASE_IMAGE)"
            ) from None

    def python_of(self, image_id: str) -> TargetPython:
        """The Python of an image (run once per image, remembered on disk)."""
        record = cache_dir() / "images" / f"{image_id.replace(':', '-')}.json"
        with contextlib.suppress(OSError, ValueError, KeyError):
            return TargetPython.from_probe(record.read_text())
        with self._probe_lock:
            try:
                output = self.client.containers.run(
                    image_id,
                    ["python3", "-c", TargetPython.PROBE],
                    remove=True,
                    network_disabled=True,
                    entrypoint=[],
                    user="0",
                )
            except self.errors.DockerException as exc:
                raise ChainsRuntimeError(
                    f"the base image {image_id[:19]} has no working python3 ({_reason(exc)}); chainlet "
                    "images need a base image with Python 3.11 or newer and its venv module"
                ) from None
            text = output.decode() if isinstance(output, bytes) else str(output)
            target = TargetPython.from_probe(text)
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(text.strip().splitlines()[-1] + "\n")
            return target

    def build(self, build: Build, log: Log, deadline: float) -> str:
        """Build one image, streaming its steps to ``log``; the image's ID."""
        api = self.sdk.APIClient(base_url=engine_address(), timeout=int(max(deadline - time.monotonic(), 30)))
        tail: list[str] = []
        seen_ids: list[str] = []
        image: str | None = None
        try:
            with _context_archive(build) as context:
                stream = api.build(
                    fileobj=context,
                    custom_context=True,
                    tag=build.tag,
                    labels=dict(build.labels),
                    rm=True,
                    forcerm=True,
                    pull=False,
                    decode=True,
                    network_mode=build_network() if build.needs_network else "none",
                )
                for chunk in stream:
                    if time.monotonic() > deadline:
                        raise BuildFailed(
                            build.chainlet, "the build took longer than the push's timeout", tail
                        )
                    if "error" in chunk:
                        raise BuildFailed(build.chainlet, str(chunk["error"]).strip(), tail)
                    image = chunk.get("aux", {}).get("ID", image)
                    for line in str(chunk.get("stream", "")).splitlines():
                        if not line.strip():
                            continue
                        tail = [*tail[-_BUILD_LOG_TAIL + 1 :], line]
                        if line.startswith(" ---> ") and not line.startswith(" ---> Running"):
                            seen_ids.append(line.split()[-1])
                        if line.startswith("Step "):
                            log(line)
        except BuildFailed:
            self._remove_leftovers(seen_ids)
            raise
        except self.errors.DockerException as exc:
            self._remove_leftovers(seen_ids)
            raise BuildFailed(build.chainlet, _reason(exc), tail) from None
        finally:
            api.close()
        return image or self.image_id(build.tag) or build.tag

    def _remove_leftovers(self, ids: Sequence[str]) -> None:
        """Remove the untagged layers a failed build left (newest first); shared ones stay."""
        for image_id in reversed(ids):
            with contextlib.suppress(self.errors.DockerException):
                attrs = self.client.api.inspect_image(image_id)  # type: ignore[no-untyped-call]
                if not attrs.get("RepoTags"):
                    self.client.api.remove_image(image_id, noprune=False)

    # -- containers ------------------------------------------------------------------------------

    def containers(self, labels: Mapping[str, str]) -> list[Container]:
        filters: dict[str, str | list[str] | bool] = {"label": [f"{k}={v}" for k, v in labels.items()]}
        return list(self.client.containers.list(all=True, filters=filters))

    def container(self, name: str) -> Container | None:
        try:
            return self.client.containers.get(name)
        except self.errors.NotFound:
            return None

    def health(self, container: Container) -> tuple[str, dict[str, Any]]:
        """``ready``, ``starting``, ``failed`` (exited, restarted or unhealthy) or ``gone``."""
        try:
            container.reload()
        except self.errors.NotFound:
            return "gone", {}
        state: dict[str, Any] = container.attrs.get("State", {})
        restarts = int(container.attrs.get("RestartCount") or 0)
        if state.get("Status") in ("exited", "dead") or state.get("Restarting") or restarts:
            return "failed", state
        health = (state.get("Health") or {}).get("Status")
        if health == "unhealthy":
            return "failed", state
        if health == "healthy" or (health is None and state.get("Status") == "running"):
            return "ready", state
        return "starting", state

    def log_tail(self, container: Container, lines: int) -> str:
        with contextlib.suppress(self.errors.DockerException):
            data = container.logs(tail=lines)
            return data.decode(errors="replace") if isinstance(data, bytes) else str(data)
        return ""

    def log_lines(self, container: Container, follow: bool, lines: int) -> Iterator[str]:
        """The last ``lines`` of a container's output, then (with ``follow``) each new one."""
        stream = container.logs(stream=True, follow=follow, tail=lines)
        pending = b""
        try:
            for chunk in stream:
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    yield line.decode(errors="replace").rstrip("\r")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            with contextlib.suppress(Exception):
                stream.close()


@contextlib.contextmanager
def _context_archive(build: Build) -> Iterator[IO[bytes]]:
    """The build context as a tar: the generated directory, ``wheels/`` and ``sdk/``.

    Written here rather than copying the wheels into the generated directory, which stays
    as the generator wrote it.
    """
    with tempfile.TemporaryFile() as handle:
        with tarfile.open(fileobj=handle, mode="w") as archive:
            archive.add(build.directory, arcname=".", filter=_normalized)
            _add_folder(archive, "wheels", sorted(build.wheels.glob("*.whl")))
            _add_folder(archive, "sdk", [build.sdk_wheel])
        handle.seek(0)
        yield handle


def _add_folder(archive: tarfile.TarFile, name: str, files: Sequence[Path]) -> None:
    folder = tarfile.TarInfo(name)
    folder.type = tarfile.DIRTYPE
    folder.mode = 0o755
    archive.addfile(folder)
    for path in files:
        archive.add(path, arcname=f"{name}/{path.name}", filter=_normalized)


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    # Owner and times play no part in what the image does; the build cache compares content.
    if "__pycache__" in Path(info.name).parts:
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def describe_state(state: Mapping[str, Any]) -> str:
    """What a failed container's state says, in words."""
    if state.get("Status") in ("exited", "dead", "restarting"):
        reason = (
            " (killed for using more memory than Compute(memory=...) allows)"
            if state.get("OOMKilled")
            else ""
        )
        return f"exited with code {state.get('ExitCode')}{reason}"
    if (state.get("Health") or {}).get("Status") == "unhealthy":
        log = (state.get("Health") or {}).get("Log") or [{}]
        output = str(log[-1].get("Output", "")).strip()
        return "turned unhealthy (its /readyz probe failed)" + (f": {output[:300]}" if output else "")
    if state.get("Restarting"):
        return f"exited with code {state.get('ExitCode')} (the engine restarts it)"
    return f"is {state.get('Status', 'in an unknown state')}"


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def engine_time(text: object) -> float | None:
    """A time as the engine writes it (RFC 3339, in nanoseconds) as a Unix timestamp; None
    for none (the engine's zero time included)."""
    text = str(text or "")
    if not text or text.startswith("0001-"):
        return None
    # The engine writes nanoseconds, which datetime does not parse: cut to microseconds.
    head, _, rest = text.partition(".")
    fraction = "".join(ch for ch in rest if ch.isdigit())[:6]
    try:
        return datetime.fromisoformat(f"{head}.{fraction or '0'}+00:00").timestamp()
    except ValueError:
        return None


def started_at(attrs: Mapping[str, Any]) -> float | None:
    """When a container (its ``attrs`` as the engine describes it) last started."""
    return engine_time(attrs.get("State", {}).get("StartedAt"))
