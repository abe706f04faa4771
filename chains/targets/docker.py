"""The docker target: one image per chainlet, one container per replica, one network per chain.

``chains push FILE --target docker`` generates every chainlet, builds the images that are not
built yet (an image is tagged with the chainlet's code version and a digest of what it
installs, so an unchanged chainlet is never rebuilt), creates a user-defined network for the
deployment and starts a container per replica, named ``<chain>-<chainlet>[-<i>]`` and reached
by its dependants by that name on that network. Only the entrypoint is published, on
127.0.0.1. Readiness is the engine's health status (the image's ``HEALTHCHECK`` on
``/readyz``); a container that exits or turns unhealthy fails the push with its last log
lines, and the push leaves nothing of itself behind.

Re-pushing a running chain starts the new containers, on a network of their own, while the
old ones still serve; once they are ready the old ones are removed and the new ones take the
plain names. The entrypoint's host port is the exception: a port can be published by one
container at a time and publishing is fixed when a container is created, so to keep the
entrypoint's URL the old entrypoint is stopped (draining its calls) just before the new one
starts: a gap of about its start-up time (one to two seconds). Pushing with another
``--port`` has no gap. If the new entrypoint does not become ready the old one is started
again.

The entrypoint keeps its async calls in ``jobs.sqlite`` on a volume of the chain's,
``chains-<chain>-jobs``, mounted at :data:`JOBS_MOUNT` in each of its replicas: it is not a
deployment's, so a job accepted before a re-push runs (or is fetched) after it, and ``chains
stop`` keeps it as the local target keeps its file; ``docker volume rm chains-<chain>-jobs``
forgets the chain's jobs. ``CHAINS_JOBS_STORE`` in the pushing shell names a PostgreSQL
server instead, or ``off``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chains import progress
from chains.config import Compute
from chains.errors import ChainsRuntimeError, ChainsUsageError
from chains.jobs.settings import JOBS_STORE_ENV
from chains.model import Chain, ChainletSpec
from chains.progress import Board, Stage
from chains.targets import SettingGroup, Target, TargetKind, is_alive, running_target
from chains.targets.docker_engine import LABEL, Engine, connect, describe_state, started_at
from chains.targets.environment import chainlet_environment
from chains.targets.image_builds import build_images, prune_images
from chains.targets.job_env import JOBS_FILE, JOBS_MOUNT, check_postgres_driver, job_environment, jobs_volume
from chains.targets.logs import merge_followed
from chains.targets.options import DockerOptions
from chains.targets.ports import check_port_free, free_port, port_of
from chains.targets.push_sequence import push_sequence
from chains.targets.state import (
    ChainletProcess,
    ChainState,
    ContainerRecord,
    ImageRecord,
    Pushed,
    chain_dir,
    stop_grace,
    write_private,
)

if TYPE_CHECKING:
    from docker.models.containers import Container

    from chains_codegen import GeneratedChain

__all__ = ["CONTAINER_PORT", "DockerTarget"]

CONTAINER_PORT = 8000  # what every chainlet listens on inside its container
_LOG_TAIL_LINES = 30
_POLL_SEC = 0.1


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# A container's health as a board shows it.
_STAGES = {"ready": Stage.DONE, "failed": Stage.FAILED, "gone": Stage.FAILED}
_SHOWN = {"ready": "healthy"}


@dataclass
class _Replica:
    spec: ChainletSpec
    index: int
    alias: str  # the name dependants reach it by, and the container's final name
    name: str  # the container's name now (the alias, or a temporary one during a re-push)
    is_entrypoint: bool
    container: Container | None = None
    host_port: int | None = None


@dataclass
class _Plan:
    """One push in progress: what it created, so that a failure removes exactly that."""

    chain: Chain
    deploy_id: str
    network: str
    replicas: list[_Replica] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)  # chainlet -> image tag
    paused: list[Container] = field(default_factory=list)  # old entrypoints stopped for the handoff
    jobs: dict[str, str] = field(default_factory=dict)  # the entrypoint's job store variables

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL: self.chain.name, "chains.deployment": self.deploy_id}


class DockerTarget:
    """Builds, starts, replaces and stops docker deployments of a chain."""

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self.log = log or _stderr

    # -- push ------------------------------------------------------------------------------------

    def push(self, chain: Chain, source_file: Path, options: DockerOptions) -> Pushed:
        """Build what is not built, start the chain's containers and wait until every one is
        healthy; replaces a running deployment of the chain."""
        return push_sequence(chain.name, _DockerLaunch(self, chain, source_file, options))

    def _start(
        self,
        engine: Engine,
        plan: _Plan,
        result: GeneratedChain,
        options: DockerOptions,
        previous: ChainState | None,
        source_file: Path,
        token: str,
    ) -> ChainState:
        chain = plan.chain
        previous_live = previous is not None and is_alive(previous)
        entry_port = options.entry_port
        if entry_port is None and previous is not None and previous.target == "docker" and previous_live:
            entry_port = port_of(previous.entrypoint_url)  # keep the entrypoint's URL across pushes
        handoff = previous is not None and previous_live and entry_port == port_of(previous.entrypoint_url)
        if entry_port is not None and not handoff:
            check_port_free(entry_port)
        engine.client.networks.create(plan.network, driver="bridge", labels=plan.labels, check_duplicate=True)
        if plan.jobs.get(JOBS_STORE_ENV, "").startswith(JOBS_MOUNT):
            _ensure_jobs_volume(engine, chain.name)
        for spec in chain.chainlets:
            count = spec.remote_config.compute.replicas
            for index in range(count):
                alias = f"{chain.name}-{spec.name}" + (f"-{index}" if count > 1 else "")
                name = self._free_name(engine, alias, chain.name, plan.deploy_id, previous)
                plan.replicas.append(_Replica(spec, index, alias, name, spec is chain.entrypoint))
        urls: dict[str, list[str]] = {}
        for replica in plan.replicas:
            urls.setdefault(replica.spec.name, []).append(f"http://{replica.alias}:{CONTAINER_PORT}")
        cpus = engine.cpu_count()
        started = time.monotonic()
        self.log(f"starting {len(plan.replicas)} container(s) on network {plan.network}")
        for replica in plan.replicas:
            port = None
            if replica.is_entrypoint:
                # Always an explicit host port: a stopped container started again (the old
                # entrypoint after a failed handoff, every container after an engine restart)
                # gets a new random port otherwise, and the chain's URL would change.
                port = entry_port if replica.index == 0 and entry_port is not None else free_port()
            replica.container = self._create(engine, plan, replica, token, urls, options, port, cpus)
        entry = [r for r in plan.replicas if r.is_entrypoint]
        inner = [r for r in plan.replicas if not r.is_entrypoint]
        deadline = time.monotonic() + options.timeout
        if handoff:
            # Everything but the entrypoint first, while the old deployment still serves.
            self._run(engine, inner, deadline, options.timeout)
            assert previous is not None
            self.log(f"[{chain.entrypoint.name}] taking over port {entry_port} from the running entrypoint")
            plan.paused = self._pause_entrypoints(engine, previous)
            self._run(engine, entry, time.monotonic() + options.timeout, options.timeout)
        else:
            self._run(engine, plan.replicas, deadline, options.timeout)
        self.log(f"every container is healthy after {time.monotonic() - started:.1f}s")
        return ChainState(
            chain=chain.name,
            deployment=plan.deploy_id,
            target="docker",
            source=str(source_file),
            entrypoint=chain.entrypoint.name,
            entrypoint_kind=chain.entrypoint.endpoint.output_kind.name,
            entrypoint_url=f"http://127.0.0.1:{entry[0].host_port}",
            processes=[self._record(r, result, plan.images[r.spec.name]) for r in plan.replicas],
        )

    def _free_name(
        self, engine: Engine, alias: str, chain: str, deploy_id: str, previous: ChainState | None
    ) -> str:
        """``alias`` when no container has it, else a temporary name until the old one is gone."""
        existing = engine.container(alias)
        if existing is None:
            return alias
        labels = existing.labels or {}
        if labels.get(LABEL) != chain:
            raise ChainsUsageError(
                f"a container named {alias} exists and is not part of chain {chain!r}; remove it "
                f"(docker rm -f {alias}) or push the chain under another --name"
            )
        if previous is None or labels.get("chains.deployment") != previous.deployment:
            # Left by a push or a stop that was cut short: nothing records it any more.
            with contextlib.suppress(engine.errors.DockerException):
                existing.remove(force=True)
            return alias
        return f"{alias}-{deploy_id[-6:]}"

    def _create(
        self,
        engine: Engine,
        plan: _Plan,
        replica: _Replica,
        token: str,
        urls: Mapping[str, list[str]],
        options: DockerOptions,
        entry_port: int | None,
        cpus: int,
    ) -> Container:
        chain, spec = plan.chain, replica.spec
        # The same variables as a local process gets (secrets, API key, options), from the same sources.
        env = chainlet_environment(chain, spec, token, options, "docker")
        env["CHAINS_DEPENDENCY_URLS"] = json.dumps({d.name: urls[d.name] for d in spec.dependencies})
        volumes: dict[str, dict[str, str]] = {}
        if replica.is_entrypoint:
            env.update(plan.jobs)
            if plan.jobs.get(JOBS_STORE_ENV, "").startswith(JOBS_MOUNT):
                # The chain's volume, not the deployment's: every replica of every push opens the
                # same file (WAL lets processes of one host share it).
                volumes[jobs_volume(chain.name)] = {"bind": JOBS_MOUNT, "mode": "rw"}
        compute = spec.remote_config.compute
        if compute.cpu_count > cpus:
            self.log(
                f"[{spec.name}] Compute(cpu_count={compute.cpu_count:g}) is more than the engine's {cpus} "
                f"CPU(s): limited to {cpus}"
            )
        binding: Any = ("127.0.0.1", entry_port)
        ports = {f"{CONTAINER_PORT}/tcp": binding} if replica.is_entrypoint else {}
        labels = {**plan.labels, "chains.chainlet": spec.name, "chains.replica": str(replica.index)}
        try:
            container: Container = engine.client.containers.create(
                plan.images[spec.name],
                name=replica.name,
                hostname=replica.alias if len(replica.alias) <= 63 else None,  # a DNS label's limit
                environment=env,  # secrets too: set when the container starts, never in an image
                labels=labels,
                network=plan.network,
                networking_config={
                    plan.network: engine.client.api.create_endpoint_config(aliases=[replica.alias])
                },
                ports=ports,
                volumes=volumes,
                nano_cpus=int(min(compute.cpu_count, cpus) * 1e9),
                mem_limit=compute.memory_bytes,
                device_requests=_gpus(engine, compute),
                healthcheck=_fast_healthcheck(engine, plan.images[spec.name]),
                # Like the local supervisor: a crashed chainlet is restarted, a few times.
                restart_policy={"Name": "on-failure", "MaximumRetryCount": 5},
                detach=True,
            )
        except engine.errors.APIError as exc:
            raise ChainsRuntimeError(
                f"the container of chainlet {spec.name} could not be created: {exc.explanation or exc}"
            ) from None
        return container

    def _run(self, engine: Engine, replicas: list[_Replica], deadline: float, timeout: float) -> None:
        """Start ``replicas`` and wait until the engine reports every one healthy."""
        with progress.board("to turn healthy", title="starting the containers", log=self.log) as board:
            self._run_shown(engine, replicas, deadline, timeout, board)

    def _run_shown(
        self, engine: Engine, replicas: list[_Replica], deadline: float, timeout: float, board: Board
    ) -> None:
        for replica in replicas:
            assert replica.container is not None
            try:
                replica.container.start()
            except engine.errors.APIError as exc:
                reason = exc.explanation or str(exc)
                if "address already in use" in str(reason) or "port is already allocated" in str(reason):
                    raise ChainsUsageError(
                        f"the entrypoint's port on 127.0.0.1 is in use ({reason}); pick another with --port"
                    ) from None
                gpu = replica.spec.remote_config.compute.gpu
                if gpu is not None and "device driver" in str(reason):
                    raise ChainsRuntimeError(
                        f"chainlet {replica.spec.name} asks for a GPU (Compute(gpu={gpu!r})), and this "
                        f"engine cannot give it one ({reason}); install the NVIDIA Container Toolkit on "
                        "the engine's host, or run the chain with --target local"
                    ) from None
                raise ChainsRuntimeError(f"chainlet {replica.spec.name} did not start: {reason}") from None
        waiting = list(replicas)
        while waiting:
            for replica in list(waiting):
                assert replica.container is not None
                health, state = engine.health(replica.container)
                board.update(replica.name, _STAGES.get(health, Stage.WORKING), _SHOWN.get(health, health))
                if health == "ready":
                    waiting.remove(replica)
                    if replica.is_entrypoint:
                        replica.host_port = _published_port(replica.container)
                elif health in ("failed", "gone"):
                    tail = engine.log_tail(replica.container, _LOG_TAIL_LINES)
                    raise ChainsRuntimeError(
                        f"chainlet {replica.spec.name} failed to start: its container {replica.name} "
                        f"{describe_state(state) if state else 'is gone'}{_tail_section(replica.name, tail)}"
                    )
            if waiting and time.monotonic() > deadline:
                names = ", ".join(r.name for r in waiting)
                tails = "".join(
                    _tail_section(r.name, engine.log_tail(r.container, _LOG_TAIL_LINES))
                    for r in waiting
                    if r.container is not None
                )
                raise ChainsRuntimeError(
                    f"not healthy after {timeout:.0f}s: {names} (raise --timeout if they are slow){tails}"
                )
            if waiting:
                board.tick()
                time.sleep(_POLL_SEC)

    def _pause_entrypoints(self, engine: Engine, previous: ChainState) -> list[Container]:
        """Stop the previous deployment's entrypoint containers, freeing the published port."""
        # The old entrypoint drains as any replaced deployment does (stop_grace) before the
        # new one takes its port.
        if previous.target != "docker":
            # A local supervisor cannot hand its port over on its own: stop that deployment.
            running_target(previous.target).stop(previous, grace=stop_grace(previous))
            return []
        entry = previous.entrypoint
        old = [
            c
            for c in engine.containers({LABEL: previous.chain, "chains.deployment": previous.deployment})
            if (c.labels or {}).get("chains.chainlet") == entry
        ]
        for container in old:
            with contextlib.suppress(engine.errors.DockerException):
                container.stop(timeout=math.ceil(stop_grace(previous)))
        return old

    def _record(self, replica: _Replica, result: GeneratedChain, image: str) -> ChainletProcess:
        assert replica.container is not None
        host_port = replica.host_port
        url = (
            f"http://127.0.0.1:{host_port}"
            if replica.is_entrypoint
            else f"http://{replica.alias}:{CONTAINER_PORT}"  # reachable on the chain's network only
        )
        generated = result.chainlets[replica.spec.name]
        return ChainletProcess(
            chainlet=replica.spec.name,
            replica=replica.index,
            port=host_port or CONTAINER_PORT,
            url=url,
            state="ready",
            started_at=started_at(replica.container.attrs) or time.time(),
            directory=str(generated.directory),
            code_version=generated.code_version,
            container=ContainerRecord(name=replica.name, image=image),
        )

    def _take_final_names(self, engine: Engine, plan: _Plan, state: ChainState) -> bool:
        """Rename containers started under temporary names, now that the old ones are gone."""
        renamed = False
        for replica, record in zip(plan.replicas, state.processes, strict=True):
            if replica.name == replica.alias or replica.container is None:
                continue
            try:
                replica.container.rename(replica.alias)
            except engine.errors.APIError as exc:
                self.log(f"[{replica.spec.name}] keeps the name {replica.name}: {exc.explanation or exc}")
                continue
            replica.name = replica.alias
            if record.container is not None:
                record.container.name = replica.alias
            renamed = True
        return renamed

    def _discard(self, engine: Engine, plan: _Plan) -> None:
        """Remove whatever this push created; start again the old entrypoints it stopped."""
        try:
            for container in engine.containers(plan.labels):
                with contextlib.suppress(engine.errors.DockerException):
                    container.remove(force=True)
            for network in engine.client.networks.list(
                filters={"label": f"chains.deployment={plan.deploy_id}"}
            ):
                with contextlib.suppress(engine.errors.DockerException):
                    network.remove()
            for container in plan.paused:
                try:
                    container.start()
                except engine.errors.DockerException as exc:
                    self.log(f"could not start the previous entrypoint {container.name} again: {exc}")
        except engine.errors.DockerException as exc:
            self.log(f"could not remove everything the failed push created: {exc}")

    # -- status, logs, stop ----------------------------------------------------------------------

    def alive(self, state: ChainState) -> bool:
        """Whether every container of the deployment runs; refreshes each process's state from
        the engine as it goes, so that ``chains status`` shows live health."""
        try:
            engine = connect(timeout=10)
            found = _by_replica(
                engine.containers({LABEL: state.chain, "chains.deployment": state.deployment})
            )
        except ChainsRuntimeError:
            return False
        running = bool(state.processes)
        for process in state.processes:
            container = found.get((process.chainlet, process.replica))
            if container is None:
                process.state = "stopped"
                running = False
                continue
            attrs = container.attrs
            status = attrs.get("State", {})
            health = (status.get("Health") or {}).get("Status")
            process.restarts = int(attrs.get("RestartCount") or 0)
            if process.container is None:
                process.container = ContainerRecord(name=str(container.name))
            else:
                process.container.name = str(container.name)
            if status.get("Restarting"):
                process.state = "restarting"
            elif status.get("Status") != "running":
                process.state = "failed" if status.get("ExitCode") else "stopped"
            elif health == "unhealthy":
                process.state = "failed"
            else:
                process.state = "starting" if health == "starting" else "ready"
                process.started_at = started_at(attrs) or process.started_at
            running = running and status.get("Status") == "running"
        return running

    def logs(self, state: ChainState, chainlet: str | None, follow: bool, lines: int) -> Iterator[str]:
        engine = connect()
        found = _by_replica(engine.containers({LABEL: state.chain, "chains.deployment": state.deployment}))
        order = {name: i for i, name in enumerate(state.chainlet_names())}
        chosen = sorted(
            ((key, c) for key, c in found.items() if chainlet is None or key[0] == chainlet),
            key=lambda item: (order.get(item[0][0], len(order)), item[0][1]),
        )
        if not chosen:
            raise ChainsRuntimeError(
                f"chain {state.chain!r} has no containers on the engine any more; push it again"
            )
        counts: dict[str, int] = {}
        for (name, _), _container in chosen:
            counts[name] = counts.get(name, 0) + 1
        labelled = [
            (f"{name}-{index}" if counts[name] > 1 else name, container)
            for (name, index), container in chosen
        ]
        if len(labelled) == 1:
            yield from engine.log_lines(labelled[0][1], follow, lines)
            return
        if not follow:
            for label, container in labelled:
                for line in engine.log_lines(container, False, lines):
                    yield f"{label} | {line}"
            return
        yield from merge_followed([(label, engine.log_lines(c, True, lines)) for label, c in labelled])

    def stop(self, state: ChainState, grace: float) -> None:
        """Stop (SIGTERM, then ``grace`` seconds to drain) and remove every container of the
        deployment, then its network."""
        try:
            engine = connect()
        except ChainsRuntimeError as exc:
            raise ChainsRuntimeError(
                f"{exc}\nchain {state.chain!r} was not stopped: its containers may still run; run "
                f"`chains stop {state.chain}` again once the engine answers"
            ) from None
        labels = {LABEL: state.chain, "chains.deployment": state.deployment}
        containers = engine.containers(labels)

        def remove(container: Container) -> str | None:
            try:
                if container.status == "running":
                    container.stop(timeout=max(1, round(grace)))
                container.remove(force=True)
            except engine.errors.NotFound:
                pass
            except engine.errors.DockerException as exc:
                return f"{container.name}: {exc}"
            return None

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(containers)))) as pool:
            problems = [p for p in pool.map(remove, containers) if p]
        networks = engine.client.networks.list(filters={"label": f"chains.deployment={state.deployment}"})
        problems += engine.remove_each(networks, "network")
        if problems:
            raise ChainsRuntimeError(
                f"chain {state.chain!r} was not fully removed:\n  " + "\n  ".join(problems)
            )


class _DockerLaunch:
    """One push of the docker target: what it built and started, so that a failure removes
    exactly that."""

    def __init__(self, target: DockerTarget, chain: Chain, source_file: Path, options: DockerOptions) -> None:
        self.target = target
        self.chain = chain
        self.source_file = source_file
        self.options = options
        self.engine = connect()
        self.plan: _Plan | None = None
        self.deploy_dir: Path | None = None

    def start(self, deploy_dir: Path, previous: ChainState | None, token: str) -> ChainState:
        from chains_codegen import DEFAULT_BASE_IMAGE, generate  # the generator is only needed when pushing

        chain, options = self.chain, self.options
        self.deploy_dir = deploy_dir
        plan = self.plan = _Plan(chain, deploy_dir.name, f"chains-{chain.name}-{deploy_dir.name}")
        # A SQLite file in the chain's volume unless the pushing shell names a server or off.
        plan.jobs = job_environment(chain_dir(chain.name), default_store=f"{JOBS_MOUNT}/{JOBS_FILE}")
        # As on the command line: CHAINS_BASE_IMAGE also serves chains.push() from Python.
        base_image = options.base_image or os.environ.get("CHAINS_BASE_IMAGE") or DEFAULT_BASE_IMAGE
        result = generate(chain, self.source_file, deploy_dir / "generated", base_image=base_image)
        entry = chain.entrypoint.name
        check_postgres_driver(plan.jobs, result.chainlets[entry].directory / "requirements.txt", entry)
        plan.images = build_images(self.engine, chain, result, base_image, self.target.log)
        state = self.target._start(self.engine, plan, result, options, previous, self.source_file, token)
        state.images = ImageRecord(base_image=base_image)  # what --watch generates and pushes with
        write_private(deploy_dir / "state.json", state.model_dump_json(indent=2))
        return state

    def discard(self) -> None:
        if self.plan is not None:
            self.target._discard(self.engine, self.plan)

    def settle(self, state: ChainState) -> None:
        assert self.plan is not None and self.deploy_dir is not None
        if self.target._take_final_names(self.engine, self.plan, state):
            write_private(self.deploy_dir / "state.json", state.model_dump_json(indent=2))
        prune_images(self.engine, self.chain.name, self.plan.images)


def _ensure_jobs_volume(engine: Engine, chain: str) -> None:
    """The chain's jobs volume, made at its first push, labelled so that ``docker volume ls
    --filter label=chains.chain=<chain>`` finds it; a push never removes it."""
    name = jobs_volume(chain)
    try:
        engine.client.volumes.get(name)
    except engine.errors.NotFound:
        try:
            engine.client.volumes.create(name=name, labels={LABEL: chain})
        except engine.errors.APIError as exc:
            raise ChainsRuntimeError(
                f"the volume {name} for chain {chain!r}'s async calls could not be made: "
                f"{exc.explanation or exc}; or push with CHAINS_JOBS_STORE=off"
            ) from None


def _fast_healthcheck(engine: Engine, image: str) -> dict[str, Any] | None:
    """The image's own health probe, run every second instead of every few seconds.

    The engine runs a container's first probe one interval after it starts, so the interval
    is the floor of every push's time to ready (and of the entrypoint's gap on a re-push).
    Engines from API 1.44 on have a separate start-up interval; the SDK cannot pass it yet,
    so a one-second interval it is, at the price of a probe per second per container (a few
    milliseconds of CPU each).
    """
    config = engine.client.api.inspect_image(image).get("Config") or {}  # type: ignore[no-untyped-call]
    test = (config.get("Healthcheck") or {}).get("Test")
    if not test or test == ["NONE"]:
        return None
    second = 1_000_000_000
    return {
        "test": test,
        "interval": second,
        "timeout": 3 * second,
        "retries": 3,
        "start_period": 60 * second,
    }


def _tail_section(name: str, tail: str) -> str:
    return f"\n--- last lines of {name} ---\n{tail.rstrip()}"


def _by_replica(containers: list[Container]) -> dict[tuple[str, int], Container]:
    found: dict[tuple[str, int], Container] = {}
    for container in containers:
        labels = container.labels or {}
        with contextlib.suppress(KeyError, ValueError):
            found[(labels["chains.chainlet"], int(labels["chains.replica"]))] = container
    return found


def _gpus(engine: Engine, compute: Compute) -> list[Any]:
    """The device request of a chainlet that asks for GPUs: ``gpu_count`` of the host's, by its
    NVIDIA runtime (the type is the host's own)."""
    if compute.gpu is None:
        return []
    return [engine.sdk.types.DeviceRequest(count=compute.gpu_count, capabilities=[["gpu"]])]


def _published_port(container: Container) -> int:
    ports = container.attrs.get("NetworkSettings", {}).get("Ports") or {}
    bindings = ports.get(f"{CONTAINER_PORT}/tcp") or []
    for binding in bindings:
        if binding.get("HostIp") in ("127.0.0.1", "") and binding.get("HostPort"):
            return int(binding["HostPort"])
    raise ChainsRuntimeError(f"the engine did not publish {container.name}'s port on 127.0.0.1")


TARGET = Target(
    name="docker",
    kind=TargetKind.RUNNING,
    options=DockerOptions,
    acts_on=frozenset({SettingGroup.BUILD_COMMANDS, SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
    build=DockerTarget,
)
