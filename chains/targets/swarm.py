"""The swarm target: the chain as a Docker Swarm stack, its replicas spread over the swarm's nodes.

``chains push FILE --target swarm`` talks to a swarm manager (the engine ``DOCKER_HOST``
names). It builds the chainlets' images there as the docker target does, loads them into
every other node's engine (``CHAINS_SWARM_NODES``: their addresses, space- or
comma-separated; a swarm does not move images between nodes by itself:
:mod:`chains.targets.swarm_nodes`), makes the chain's credentials swarm secrets
(:mod:`chains.targets.swarm_secrets`), and runs ``docker stack deploy`` on the stack file that
:func:`chains.targets.swarm_stack.swarm_document` describes:

- one service per chainlet, its replicas placed by the swarm's scheduler, reached by its
  dependants through the swarm's DNS (``endpoint_mode: dnsrr``: round robin over the tasks'
  own addresses; virtual IPs need IPVS on every node);
- one overlay network, encrypted between nodes (IPsec) unless ``CHAINS_SWARM_ENCRYPT=0``;
- TLS between chainlets (unless ``CHAINS_SWARM_TLS=0``): a certificate authority of the chain,
  kept on the pushing machine (:mod:`chains.targets.certificates`), issues each internal
  chainlet a certificate; they serve HTTPS and call each other verifying that authority
  only. The entrypoint's published port serves plain HTTP (see docs/deploy.md);
- the internal token, the API key and the chain's secrets as swarm secrets, given to each
  task as files, never written to the stack file or the services' environment;
- the entrypoint published on its manager node's own address (``mode: host``);
- health checks on ``/readyz``; a re-push rolls each service over (new task first, except
  for the entrypoint, which holds a port) and rolls back one that does not become healthy.

The push waits until every service runs its new tasks, healthy; ``status``, ``logs``,
``call`` and ``stop`` work as on every running target.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from chains import progress
from chains.errors import ChainsRuntimeError, ChainsUsageError
from chains.model import Chain
from chains.progress import Board, Stage
from chains.targets import Capabilities, SettingGroup, Target, TargetKind, Wording
from chains.targets.compose import DEFAULT_ENTRY_PORT, project_name
from chains.targets.docker_engine import LABEL, Engine, connect, engine_time
from chains.targets.image_builds import build_images
from chains.targets.job_env import check_postgres_driver, shared_job_environment
from chains.targets.logs import merge_followed
from chains.targets.options import SwarmOptions
from chains.targets.state import (
    ChainletProcess,
    ChainState,
    ContainerRecord,
    ImageRecord,
    Pushed,
    chain_dir,
    current_state,
    make_current,
    new_deployment_dir,
    write_private,
)
from chains.targets.swarm_nodes import (
    check_placement,
    distribute_images,
    docker_cli,
    manager_of,
    node_address,
    node_name,
    unreachable_nodes,
)
from chains.targets.swarm_overlay import check_overlay
from chains.targets.swarm_secrets import PushSecrets, chain_secrets, remove_unused_secrets
from chains.targets.swarm_stack import SWARM_NETWORK, swarm_document
from chains.targets.wiring import LABEL_NAME, PORT, ChainWiring, wire

__all__ = ["SwarmTarget"]

STACK_LABEL = "com.docker.stack.namespace"  # what `docker stack deploy` labels its objects with
DEPLOY_TIMEOUT_SEC = 120.0  # `docker stack deploy` itself; readiness is bounded by --timeout
STOP_TIMEOUT_SEC = 60.0  # beyond the grace: tasks to shut down, the network to go
_POLL_SEC = 0.5
_LOG_TAIL_LINES = 30
_FAILED_TASKS_LIMIT = 3  # a service whose new tasks fail this often fails the push

TaskState = Literal["starting", "ready", "failed", "stopped", "gone"]
_NODE_ENGINES = "nodes.json"  # in the deployment's folder: node ID -> its engine's address


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _switch(name: str) -> bool:
    raw = os.environ.get(name, "1").strip().lower()
    if raw not in ("0", "1", "false", "true", "no", "yes"):
        raise ChainsUsageError(f"{name}={raw!r}: use 1 (the default) or 0")
    return raw in ("1", "true", "yes")


def encryption_wanted() -> bool:
    return _switch("CHAINS_SWARM_ENCRYPT")


def tls_wanted() -> bool:
    """Whether the chainlets call each other over TLS (``CHAINS_SWARM_TLS``, on by default)."""
    return _switch("CHAINS_SWARM_TLS")


@dataclass(frozen=True)
class _Stack:
    chain: str
    name: str  # the stack's name: every service is <name>_<service>

    @classmethod
    def of(cls, chain: str) -> _Stack:
        return cls(chain, project_name(chain))

    def service(self, short: str) -> str:
        return f"{self.name}_{short}"


class SwarmTarget:
    """Deploys, updates, watches and removes a chain's stack on a swarm.

    Used through ``chains push FILE --target swarm`` or the Python API, with ``DOCKER_HOST``
    naming a manager and ``CHAINS_SWARM_NODES`` the other nodes' engines::

        with chains.push("chain.py", target="swarm") as chain:
            print(chain.call(text="hi"))
    """

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self.log = log or _stderr

    # -- push ------------------------------------------------------------------------------------

    def push(self, chain: Chain, source_file: Path, options: SwarmOptions) -> Pushed:
        from chains_codegen import DEFAULT_BASE_IMAGE, generate  # the generator is only needed when pushing

        engine = connect()
        manager = manager_of(engine)
        check_placement(engine, chain.entrypoint.name, chain.entrypoint.remote_config.compute.replicas)
        stack = _Stack.of(chain.name)
        previous = current_state(chain.name)
        existing = _services(engine, stack)
        deploy_dir = new_deployment_dir(chain.name)
        base_image = options.base_image or os.environ.get("CHAINS_BASE_IMAGE") or DEFAULT_BASE_IMAGE
        made = PushSecrets(engine, stack.chain, stack.name, deploy_dir.name)
        try:
            result = generate(chain, source_file, deploy_dir / "generated", base_image=base_image)
            # The entrypoint's job store must be a server every node reaches (docs/jobs.md).
            jobs = shared_job_environment(chain_dir(chain.name), "swarm", self.log)
            entry = chain.entrypoint.name
            check_postgres_driver(jobs, result.chainlets[entry].directory / "requirements.txt", entry)
            # The docker target's builds, on the manager: same tags, same layer cache.
            images = build_images(engine, chain, result, base_image, self.log)
            engines = distribute_images(engine, manager, images, self.log)
            write_private(deploy_dir / _NODE_ENGINES, json.dumps(engines, indent=2) + "\n")
            tls = tls_wanted()
            wiring = wire(
                chain,
                {name: c.code_version for name, c in result.chainlets.items()},
                registry=None,
                environment="swarm",
                scheme="https" if tls else "http",
            )
            secret_names = made.credentials(wiring, options.api_key, options.secrets, jobs)
            tls_secrets = made.tls(wiring) if tls else None
            entry_port = self._entry_port(options, previous)
            document = swarm_document(
                wiring,
                images,
                secret_names,
                entry_port=entry_port,
                encrypted=encryption_wanted(),
                labels={LABEL: chain.name, "chains.deployment": deploy_dir.name},
                tls=tls_secrets,
            )
            stack_file = deploy_dir / "stack.json"
            # JSON is YAML: the stack file names secrets, never holds them.
            stack_file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
            started = time.monotonic()
            self.log(f"deploying stack {stack.name} ({len(wiring.chainlets)} service(s)) on the swarm")
            self._deploy(stack, stack_file)
            self._wait(engine, stack, wiring, options.timeout)
            self.log(f"every service runs healthy after {time.monotonic() - started:.1f}s")
            self._check_overlay(engine, manager.node_id, stack)
            state = self._state(engine, stack, chain, wiring, deploy_dir.name, source_file, entry_port)
            state.images = ImageRecord(base_image=base_image)
            write_private(deploy_dir / "state.json", state.model_dump_json(indent=2))
        except BaseException:
            if not existing:
                # A first push leaves nothing behind; a failed update was rolled back by the swarm.
                with contextlib.suppress(ChainsRuntimeError):
                    self._remove_stack(engine, stack, grace=1.0)
            made.discard()
            shutil.rmtree(deploy_dir, ignore_errors=True)
            raise
        make_current(chain.name, deploy_dir)
        # A previous deployment on the swarm is this stack, updated; one on another target is
        # stopped by chains.deploy, as every replaced deployment is.
        return Pushed(
            state,
            replaced=[previous] if previous is not None else [],
            forget_others=previous is not None,
            settle=lambda: remove_unused_secrets(engine, chain.name),
        )

    def _check_overlay(self, engine: Engine, manager_node: str, stack: _Stack) -> None:
        """A call across nodes on the stack's network: a healthy service proves only that each
        task answers on its own node (see :mod:`chains.targets.swarm_overlay`)."""
        nodes = {str(n.id): node_name(n.attrs) for n in engine.client.nodes.list()}
        unchecked = check_overlay(
            engine,
            manager_node,
            stack.service(SWARM_NETWORK),
            _services(engine, stack),
            PORT,
            encrypted=encryption_wanted(),
            nodes=nodes,
        )
        if unchecked is not None and len(nodes) > 1:
            self.log(f"note: calls between the nodes were not checked ({unchecked})")

    def _entry_port(self, options: SwarmOptions, previous: ChainState | None) -> int:
        if options.entry_port is not None:
            return options.entry_port
        if previous is not None and previous.target == "swarm":
            return int(previous.entrypoint_url.rsplit(":", 1)[1])
        return DEFAULT_ENTRY_PORT

    def _deploy(self, stack: _Stack, stack_file: Path) -> None:
        cli = docker_cli()
        # --resolve-image never: the images are on the nodes already, under tags no registry
        # knows; each task starts from the node's own copy.
        command = [
            cli,
            "stack",
            "deploy",
            "--resolve-image",
            "never",
            "--prune",
            "-c",
            str(stack_file),
            stack.name,
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=DEPLOY_TIMEOUT_SEC, check=False
            )
        except subprocess.TimeoutExpired:
            raise ChainsRuntimeError(
                f"`docker stack deploy` did not finish within {DEPLOY_TIMEOUT_SEC:.0f}s"
            ) from None
        if done.returncode != 0:
            raise ChainsRuntimeError(
                f"`docker stack deploy` failed (exit {done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}"
            )

    def _wait(self, engine: Engine, stack: _Stack, wiring: ChainWiring, timeout: float) -> None:
        """Until every service runs as many healthy tasks of its current spec as it asks for."""
        with progress.board("to run healthy", title="starting the services", log=self.log) as board:
            self._wait_shown(engine, stack, wiring, timeout, board)

    def _wait_shown(
        self, engine: Engine, stack: _Stack, wiring: ChainWiring, timeout: float, board: Board
    ) -> None:
        deadline = time.monotonic() + timeout
        waiting = {stack.service(c.service): c.spec.remote_config.compute.replicas for c in wiring.chainlets}
        while waiting:
            for name, replicas in list(waiting.items()):
                service = _service(engine, name)
                update = (service.attrs.get("UpdateStatus") or {}).get("State")
                if update in ("rollback_started", "rollback_completed", "rollback_paused", "paused"):
                    message = (service.attrs.get("UpdateStatus") or {}).get("Message", "")
                    raise ChainsRuntimeError(
                        f"the update of service {name} failed and the swarm rolled it back ({update}: "
                        f"{message}){self._service_tail(service)}"
                    )
                template = service.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]
                current = [t for t in service.tasks() if _same_spec(t, template)]
                running = [
                    t for t in current if _task_state(t) == "ready" and t.get("DesiredState") == "running"
                ]
                failed = [t for t in current if t.get("Status", {}).get("State") in ("failed", "rejected")]
                if len(failed) >= _FAILED_TASKS_LIMIT * replicas:
                    errors = sorted(
                        {str(t["Status"].get("Err") or t["Status"].get("Message")) for t in failed}
                    )
                    raise ChainsRuntimeError(
                        f"service {name} failed to start {len(failed)} times: {'; '.join(errors)}"
                        f"{self._service_tail(service)}"
                    )
                healthy = len(running) >= replicas and update in (None, "completed")
                stage = Stage.DONE if healthy else Stage.WORKING
                board.update(name, stage, f"{len(running)}/{replicas} running")
                if healthy:
                    del waiting[name]
            if waiting and time.monotonic() > deadline:
                tails = "".join(self._service_tail(_service(engine, n)) for n in waiting)
                raise ChainsRuntimeError(
                    f"not healthy after {timeout:.0f}s: {', '.join(waiting)} "
                    f"(raise --timeout if they are slow){tails}"
                )
            if waiting:
                board.tick()
                time.sleep(_POLL_SEC)

    def _service_tail(self, service: Any) -> str:
        with contextlib.suppress(Exception):
            chunks = service.logs(stdout=True, stderr=True, tail=_LOG_TAIL_LINES)
            text = b"".join(chunks).decode(errors="replace").rstrip()
            if text:
                return f"\n--- last lines of {service.name} ---\n{text}"
        return ""

    def _state(
        self,
        engine: Engine,
        stack: _Stack,
        chain: Chain,
        wiring: ChainWiring,
        deploy_id: str,
        source_file: Path,
        entry_port: int,
    ) -> ChainState:
        state = ChainState(
            chain=chain.name,
            deployment=deploy_id,
            target="swarm",
            source=str(source_file),
            entrypoint=chain.entrypoint.name,
            entrypoint_kind=chain.entrypoint.endpoint.output_kind.name,
            entrypoint_url=f"http://127.0.0.1:{entry_port}",
            processes=[],
        )
        state.processes = [
            ChainletProcess(chainlet=c.name, replica=0, port=PORT, url="") for c in wiring.chainlets
        ]  # the chainlets' order, for _refresh
        self._refresh(engine, state)
        return state

    # -- status, logs, stop ----------------------------------------------------------------------

    def _refresh(self, engine: Engine, state: ChainState) -> bool:
        """Read every task of the chain's stack into ``state.processes``; whether each of its
        chainlets has its service.

        A task on a node that is down, or whose engine does not answer, is "gone" at once:
        the manager lists it as running until it has missed that node's heartbeats for a while.
        A task's restarts are the tasks of its slot before it, of the same spec (the swarm keeps
        a few of them: ``docker swarm update --task-history-limit``)."""
        stack = _Stack.of(state.chain)
        nodes = {n.id: n.attrs for n in engine.client.nodes.list()}
        lost = unreachable_nodes(_node_engines(state)) | {
            node_id for node_id, node in nodes.items() if (node.get("Status") or {}).get("State") != "ready"
        }
        entry_port = int(state.entrypoint_url.rsplit(":", 1)[1])
        found = {_chainlet_of(s): s for s in _services(engine, stack)}
        order = state.chainlet_names() or [state.entrypoint]
        processes: list[ChainletProcess] = []
        complete = bool(found) and all(name in found for name in order)
        for chainlet in [*order, *sorted(set(found) - set(order))]:
            service = found.get(chainlet)
            if service is None:
                continue
            spec = service.attrs["Spec"]
            template = spec["TaskTemplate"]["ContainerSpec"]
            short = service.name.removeprefix(f"{stack.name}_")
            every = service.tasks()
            tasks = [t for t in every if t.get("DesiredState") == "running"]
            tasks.sort(key=lambda t: int(t.get("Slot") or 0))
            is_entry = chainlet == state.entrypoint
            scheme = (
                "https"
                if any(e.startswith("CHAINS_TLS_CERT_FILE=") for e in template.get("Env") or [])
                else "http"
            )
            for task in tasks:
                node = nodes.get(str(task.get("NodeID")), {})
                status: TaskState = "gone" if task.get("NodeID") in lost else _task_state(task)
                slot = task.get("Slot")
                earlier = [t for t in every if t.get("Slot") == slot and _same_spec(t, template)]
                url = (
                    f"http://{node_address(node)}:{entry_port}" if is_entry else f"{scheme}://{short}:{PORT}"
                )
                processes.append(
                    ChainletProcess(
                        chainlet=chainlet,
                        replica=max(int(slot or 1) - 1, 0),
                        port=entry_port if is_entry else PORT,
                        url=url,
                        state=status,
                        restarts=max(len(earlier) - 1, 0),
                        started_at=engine_time(task.get("Status", {}).get("Timestamp")) or time.time(),
                        container=ContainerRecord(
                            name=f"{service.name}.{slot} on {node_name(node)}", image=template["Image"]
                        ),
                    )
                )
                if is_entry and status == "ready":
                    state.entrypoint_url = url
        state.processes = processes
        return complete

    def alive(self, state: ChainState) -> bool:
        """Whether the manager answers and the chain's stack has every service; refreshes each
        task's state. A replica gone or failing does not make the chain stale: its service
        runs on (the swarm replaces the task), and ``chains status`` shows that replica's state."""
        try:
            engine = connect(timeout=10)
        except ChainsRuntimeError:
            return False
        try:
            return self._refresh(engine, state)
        except engine.errors.APIError:  # e.g. the engine is no swarm manager (any more)
            return False

    def logs(self, state: ChainState, chainlet: str | None, follow: bool, lines: int) -> Iterator[str]:
        engine = connect()
        services = {_chainlet_of(s): s for s in _services(engine, _Stack.of(state.chain))}
        order = {name: i for i, name in enumerate(state.chainlet_names())}
        found = sorted(
            ((name, s) for name, s in services.items() if chainlet in (None, name)),
            key=lambda item: order.get(item[0], len(order)),
        )
        if not found:
            raise ChainsRuntimeError(
                f"chain {state.chain!r} has no services on the swarm any more; push it again"
            )
        if len(found) == 1:
            yield from _log_lines(found[0][1], follow, lines)
            return
        if not follow:
            for name, service in found:
                for line in _log_lines(service, False, lines):
                    yield f"{name} | {line}"
            return
        yield from merge_followed([(name, _log_lines(service, True, lines)) for name, service in found])

    def stop(self, state: ChainState, grace: float) -> None:
        """Remove the chain's services (each task gets SIGTERM and its stop grace period to
        drain), then its network and its secrets."""
        try:
            engine = connect()
        except ChainsRuntimeError as exc:
            raise ChainsRuntimeError(
                f"{exc}\nchain {state.chain!r} was not stopped: its services may still run; run "
                f"`chains stop {state.chain}` again once the manager answers"
            ) from None
        self._remove_stack(engine, _Stack.of(state.chain), grace)
        problems = engine.remove_each(chain_secrets(engine, state.chain), "secret")
        if problems:
            raise ChainsRuntimeError(
                f"chain {state.chain!r} was not fully removed:\n  " + "\n  ".join(problems)
            )

    def _remove_stack(self, engine: Engine, stack: _Stack, grace: float) -> None:
        for service in _services(engine, stack):
            with contextlib.suppress(engine.errors.NotFound):
                service.remove()
        # The network goes once its tasks are gone (each gets its stop grace period to drain),
        # and is gone only once the manager no longer lists it: a deploy right after would
        # otherwise find it and not make it again.
        deadline = time.monotonic() + grace + STOP_TIMEOUT_SEC
        while True:
            networks = engine.client.networks.list(filters={"label": f"{STACK_LABEL}={stack.name}"})
            if not networks:
                return
            problems = engine.remove_each(networks, "network")
            if time.monotonic() > deadline:
                break
            time.sleep(_POLL_SEC)
        left = problems or [f"network {n.name} is still listed" for n in networks]
        raise ChainsRuntimeError(f"stack {stack.name} was not fully removed:\n  " + "\n  ".join(left))


def _node_engines(state: ChainState) -> dict[str, str]:
    """Node ID -> engine address of the nodes the push loaded images into (empty if unknown)."""
    path = chain_dir(state.chain) / "deployments" / state.deployment / _NODE_ENGINES
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _chainlet_of(service: Any) -> str:
    return str((service.attrs["Spec"].get("Labels") or {}).get(LABEL_NAME) or service.name)


def _service(engine: Engine, name: str) -> Any:
    return engine.client.services.get(name)  # type: ignore[no-untyped-call]


def _services(engine: Engine, stack: _Stack) -> list[Any]:
    return list(engine.client.services.list(filters={"label": f"{STACK_LABEL}={stack.name}"}))


def _same_spec(task: dict[str, Any], template: dict[str, Any]) -> bool:
    spec = (task.get("Spec") or {}).get("ContainerSpec") or {}
    return bool(
        spec.get("Image") == template.get("Image")
        and _digest(spec.get("Secrets")) == _digest(template.get("Secrets"))
        and spec.get("Env") == template.get("Env")
    )


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _task_state(task: dict[str, Any]) -> TaskState:
    state = str(task.get("Status", {}).get("State") or "")
    if state == "running":
        return "ready"  # a task with a health check turns running once healthy
    if state in ("failed", "rejected", "orphaned"):
        return "failed"
    if state in ("shutdown", "complete", "remove"):
        return "stopped"
    return "starting"


def _log_lines(service: Any, follow: bool, lines: int) -> Iterator[str]:
    stream = service.logs(stdout=True, stderr=True, follow=follow, tail=lines)
    pending = b""
    for chunk in stream:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode(errors="replace").rstrip("\r")
    if pending:
        yield pending.decode(errors="replace")


TARGET = Target(
    name="swarm",
    kind=TargetKind.RUNNING,
    options=SwarmOptions,
    acts_on=frozenset({SettingGroup.BUILD_COMMANDS, SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
    build=SwarmTarget,
    capabilities=Capabilities(updates_in_place=True),
    wording=Wording(
        units="service(s)",
        per_chainlet=True,
        gone="its stack or the swarm manager is gone",
        gone_detail="the swarm manager does not answer at DOCKER_HOST, or the chain's services are gone",
    ),
)
