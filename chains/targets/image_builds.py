"""Building the chainlets' images on an engine, and pruning the old ones.

Shared by the targets that run images they build themselves (docker, swarm): the same tags
for the same code, and the same layer cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chains import progress
from chains.model import Chain
from chains.progress import Board, Stage
from chains.targets.docker_engine import LABEL, Build, Engine
from chains.targets.images import image_name
from chains.targets.wheelhouse import dependency_wheels, sdk_requirements, sdk_wheel, wheelhouse_key

if TYPE_CHECKING:
    from chains_codegen import GeneratedChain

__all__ = ["BUILD_TIMEOUT_SEC", "KEEP_OLD_IMAGES", "build_images", "prune_images"]

BUILD_TIMEOUT_SEC = 1800.0  # all builds of one push: bounded, but far beyond any sane build
KEEP_OLD_IMAGES = 2  # per chainlet, besides the one in use
_BUILD_WORKERS = 4

Log = Callable[[str], None]


def _prefixed(log: Log, chainlet: str) -> Log:
    return lambda line: log(f"[{chainlet}] {line}")


def _steps(board: Board, chainlet: str) -> Callable[[str], None]:
    return lambda line: board.step(chainlet, line)


def _built(board: Board, chainlet: str) -> Callable[[Future[str]], None]:
    def done(future: Future[str]) -> None:
        failed = future.cancelled() or future.exception() is not None
        board.update(chainlet, Stage.FAILED if failed else Stage.DONE, "failed" if failed else "built")

    return done


def build_images(
    engine: Engine, chain: Chain, result: GeneratedChain, base_image: str, log: Log
) -> dict[str, str]:
    """Every chainlet's image tag, building the images the engine does not have yet.

    An image is tagged with its chainlet's code version and a digest of what it installs, so
    an unchanged chainlet is never built again::

        tags = build_images(connect(), chain, generate(chain, source, out), base_image, print)
    """
    sdk = sdk_wheel()
    sdk_reqs = sdk_requirements()
    base_ids: dict[str, str] = {}
    tags: dict[str, str] = {}
    builds: list[tuple[tuple[str, ...], Build]] = []
    for spec in chain.chainlets:
        generated = result.chainlets[spec.name]
        image = spec.remote_config.docker_image
        base = image.base_image_reference or base_image
        if base not in base_ids:
            base_ids[base] = engine.base_image(base, log)
        target = engine.python_of(base_ids[base])
        requirements = [*sdk_reqs, *_requirement_lines(generated.directory / "requirements.txt")]
        wheels_key = wheelhouse_key(requirements, target)
        # The code version covers the generated files (Dockerfile included); what the image
        # installs from outside them is the SDK, the wheels and the base image's content.
        installs = hashlib.sha256(f"{sdk.digest} {wheels_key} {base_ids[base]}".encode()).hexdigest()
        tag = image_name(chain.name, spec.name, f"{generated.code_version[:24]}-{installs[:12]}")
        tags[spec.name] = tag
        if engine.image_id(tag):
            log(f"[{spec.name}] image {tag} is up to date")
            continue
        wheels = dependency_wheels(requirements, target, _prefixed(log, spec.name))
        labels = {
            LABEL: chain.name,
            "chains.chainlet": spec.name,
            "chains.code_version": generated.code_version,
        }
        build = Build(
            spec.name, tag, generated.directory, wheels, sdk.path, labels, bool(image.apt_requirements)
        )
        # Chainlets whose images share every step up to their own code share those layers.
        shared = (base_ids[base], wheels_key, *image.apt_requirements)
        builds.append((shared, build))
    if builds:
        _build_all(engine, builds, log)
    for spec in chain.chainlets:
        # Also tagged with the bare code version: the name the compose and kubernetes
        # exports refer to, so their files run the images this push built.
        repository, _, _ = image_name(chain.name, spec.name, "x").rpartition(":")
        with contextlib.suppress(engine.errors.DockerException):
            engine.client.api.tag(tags[spec.name], repository, result.chainlets[spec.name].code_version)
    return tags


def _build_all(engine: Engine, builds: list[tuple[tuple[str, ...], Build]], log: Log) -> None:
    """Build in parallel: first one image per distinct set of shared steps, then the rest,
    which then find those steps in the engine's cache instead of running them again."""
    deadline = time.monotonic() + BUILD_TIMEOUT_SEC
    leaders: dict[tuple[str, ...], Build] = {}
    for shared, build in builds:
        leaders.setdefault(shared, build)
    rest = [b for _, b in builds if b not in leaders.values()]
    started = time.monotonic()
    names = ", ".join(b.chainlet for _, b in builds)
    log(f"building {len(builds)} image(s): {names}")
    board = progress.board(title="building the images", log=log)
    pool = ThreadPoolExecutor(max_workers=_BUILD_WORKERS, thread_name_prefix="chains-build")
    with board, pool:
        for wave in (list(leaders.values()), rest):
            futures = [pool.submit(engine.build, b, _steps(board, b.chainlet), deadline) for b in wave]
            for build, future in zip(wave, futures, strict=True):
                future.add_done_callback(_built(board, build.chainlet))
            errors = [f.exception() for f in futures]  # waits for every build of the wave
            failed = [e for e in errors if e is not None]
            if failed:
                raise failed[0]
    log(f"built {len(builds)} image(s) in {time.monotonic() - started:.1f}s")


def prune_images(engine: Engine, chain: str, in_use: Mapping[str, str]) -> None:
    """Of chain ``chain``'s images, keep those in use (``in_use``: chainlet -> tag) and the
    newest few before them per chainlet (so that going back to recent code needs no build),
    and remove older ones."""
    for name, current in in_use.items():
        filters: dict[str, Any] = {"label": [f"{LABEL}={chain}", f"chains.chainlet={name}"]}
        with contextlib.suppress(engine.errors.DockerException):
            images = engine.client.images.list(filters=filters)
            others = [i for i in images if current not in i.tags]
            others.sort(key=lambda i: str(i.attrs.get("Created", "")), reverse=True)
            for image in others[KEEP_OLD_IMAGES:]:
                with contextlib.suppress(engine.errors.DockerException):
                    engine.client.images.remove(str(image.id))  # refused while a container uses it


def _requirement_lines(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
