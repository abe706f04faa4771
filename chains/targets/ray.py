"""The ray target: every chainlet a Ray Serve application on a Ray cluster, behind Serve's proxy.

``chains push FILE --target ray --address ray://HEAD:10001`` (or a GCS address ``HEAD:6379``,
or ``auto``, or ``$RAY_ADDRESS``) deploys each chainlet as a Serve deployment running its
generated ASGI app, reached at ``<proxy>/<chain>/<chainlet>``. Chainlets call each other
through the proxy with the chain's token; Serve places, restarts and scales the replicas.

What maps to what:

- ``Compute(cpu_count, memory, gpu, gpu_count)`` -> ``ray_actor_options`` (``num_cpus``,
  ``memory``, ``num_gpus``, ``accelerator_type``)
- ``Compute(replicas)`` -> ``num_replicas``; ``Compute(autoscale=...)`` -> ``autoscaling_config``
  (``min_replicas``, ``max_replicas``, ``target_ongoing_requests``)
- ``Compute(concurrency)`` -> ``max_ongoing_requests`` (Serve queues the rest in its proxy)
- ``CHAINS_GRACE_SEC`` -> ``graceful_shutdown_timeout_s``

Replicas, their nodes and their logs are read through Ray's dashboard API, which the head
node serves (``ray start --head`` starts it unless told not to): ``chains status`` and
``chains ui`` read them live through :meth:`RayTarget.alive` (``chains.targets.ray_replicas``).
Connecting as a driver (push, stop) is ``chains.targets.ray_connect``'s: it refuses in
seconds what Ray would hang on, and lets Ctrl-C through.

When Serve's proxy serves HTTPS (Serve started with ``http_options`` ``ssl_certfile`` and
``ssl_keyfile``), the chainlets call their dependencies at ``https://`` URLs, so that the
chain's token does not cross the network in clear from a replica on another node.
``CHAINS_RAY_PROXY_CA_FILE``, set when pushing, names the PEM certificate of the authority
that issued the proxy's certificate: it travels with the chain's code, and the chainlets
trust it alone for the proxy (``CHAINS_TLS_CA_FILE``); without it they trust the system's.
The chain's state records it as the entrypoint's authority (``entrypoint_ca``), which
``chains call``, ``status`` and ``ui`` verify the proxy with.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chains import progress
from chains.errors import ChainsRuntimeError, ChainsUsageError
from chains.model import Chain, ChainletSpec
from chains.progress import Board, Stage
from chains.targets import Capabilities, SettingGroup, Target, TargetKind
from chains.targets.environment import chainlet_environment
from chains.targets.job_env import shared_job_environment
from chains.targets.options import RayOptions
from chains.targets.ray_connect import INSTALL_HINT, connect
from chains.targets.ray_replicas import (
    ReplicaInfo,
    dashboard_error,
    get_json,
    live_processes,
    replacements,
    replicas,
    serve_details,
)
from chains.targets.state import (
    ChainletProcess,
    ChainState,
    Deployment,
    DeploymentChainlet,
    Pushed,
    chain_dir,
    current_state,
    make_current,
    new_deployment_dir,
    write_private,
)
from chains.targets.wiring import DEFAULT_GRACE_SEC
from chains.tls import CA_FILE_ENV, client_context

__all__ = ["PROXY_CA_ENV", "RayTarget", "ReplicaInfo", "replicas"]

PROXY_CA_ENV = "CHAINS_RAY_PROXY_CA_FILE"
# Where the proxy's authority goes in the generated folder, which is every replica's working
# directory on every node (relative, as that directory's path differs from node to node).
_PROXY_CA_NAME = "proxy-ca.pem"

_POLL_SEC = 0.5
_RECORD = "ray.json"


def _ray() -> tuple[Any, Any]:
    try:
        import ray
        from ray import serve
    except ImportError:
        raise ChainsUsageError(INSTALL_HINT) from None
    return ray, serve


@dataclass(frozen=True)
class _Record:
    """What the ray target remembers of a deployment, beside its state."""

    address: str
    dashboard_url: str
    proxy_url: str
    apps: dict[str, str]  # chainlet -> Serve application name
    # Replicas of each chainlet that Ray remembers dead, not stopped by Serve, at the push:
    # the restarts of an earlier deployment, left out of this one's.
    restarts_before: dict[str, int] = field(default_factory=dict)

    def save(self, deploy_dir: Path) -> None:
        write_private(deploy_dir / _RECORD, json.dumps(self.__dict__, indent=2))

    @classmethod
    def load(cls, state: ChainState) -> _Record | None:
        path = chain_dir(state.chain) / "deployments" / state.deployment / _RECORD
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls(**data)


def app_name(chain: str, chainlet: str) -> str:
    """The Serve application of ``chainlet`` of ``chain``."""
    return f"{chain}.{chainlet}"


def route_prefix(chain: str, chainlet: str) -> str:
    """Where Serve's proxy routes calls to ``chainlet`` of ``chain``."""
    return "/" + "/".join(urllib.parse.quote(part, safe="") for part in (chain, chainlet))


def _proxy_url(details: Mapping[str, Any]) -> str:
    options = details.get("http_options") or {}
    scheme = "https" if options.get("ssl_certfile") else "http"
    host = str(options.get("host") or "")
    port = int(options.get("port") or 8000)
    if host in ("", "0.0.0.0", "::"):
        # Listening on every address: reach it at the address of a node that runs a proxy.
        proxies = details.get("proxies") or {}
        ips = sorted(str(p.get("node_ip")) for p in proxies.values() if p.get("node_ip"))
        if not ips:
            raise ChainsRuntimeError(
                "Serve runs no HTTP proxy on this cluster; start Serve with HTTP enabled"
            )
        host = ips[0]
    return f"{scheme}://{host}:{port}"


def _proxy_ca(generated_dir: Path) -> str | None:
    """Copy the proxy's authority named by ``$CHAINS_RAY_PROXY_CA_FILE`` beside the chain's
    code; its path relative to the replicas' working directory, or None when unset."""
    given = os.environ.get(PROXY_CA_ENV)
    if not given:
        return None
    try:
        pem = Path(given).read_bytes()
    except OSError as exc:
        raise ChainsUsageError(
            f"{PROXY_CA_ENV}={given!r} cannot be read ({exc.strerror or exc}): it must name the PEM "
            "certificate of the authority that issued the certificate of Serve's proxy"
        ) from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ChainsUsageError(f"{PROXY_CA_ENV}={given!r} holds no PEM certificate")
    (generated_dir / _PROXY_CA_NAME).write_bytes(pem)
    return _PROXY_CA_NAME


def _proxy_context(state: ChainState, proxy_url: str) -> ssl.SSLContext | None:
    """What this process verifies an HTTPS proxy with: the authority the chain was pushed
    with (its copy beside the deployment's code, recorded as the entrypoint's), else the
    system's (None)."""
    if not proxy_url.startswith("https://"):
        return None
    if state.entrypoint_ca is not None:
        return state.entrypoint_context()
    # A state written before the entrypoint's authority was recorded: its copy, if any.
    copy = chain_dir(state.chain) / "deployments" / state.deployment / "generated" / _PROXY_CA_NAME
    return client_context(copy) if copy.exists() else None


def _recorded_ca(proxy_url: str, generated_dir: Path) -> str | None:
    """The entrypoint's authority for the chain's state: the proxy's, copied beside the code
    by :func:`_proxy_ca`, when the proxy serves HTTPS and one was given."""
    copy = generated_dir / _PROXY_CA_NAME
    return str(copy) if proxy_url.startswith("https://") and copy.exists() else None


def _actor_options(spec: ChainletSpec) -> dict[str, Any]:
    compute = spec.remote_config.compute
    options: dict[str, Any] = {"num_cpus": compute.cpu_count, "memory": compute.memory_bytes}
    if compute.gpu is not None:
        options["num_gpus"] = compute.gpu_count
        options["accelerator_type"] = compute.gpu
    return options


def deployment_options(spec: ChainletSpec) -> dict[str, Any]:
    """The Serve deployment options of chainlet ``spec`` (see the module's mapping)."""
    compute = spec.remote_config.compute
    options: dict[str, Any] = {
        "name": spec.name,
        "ray_actor_options": _actor_options(spec),
        "max_ongoing_requests": compute.concurrency,
        "graceful_shutdown_timeout_s": _grace(spec),
        # The chainlet logs one line per call itself; Serve's access line and its INFO chatter
        # in the replica (health checks, say) would double it.
        "logging_config": {"enable_access_log": False, "log_level": "WARNING"},
    }
    if compute.autoscale is not None:
        options["autoscaling_config"] = {
            "min_replicas": compute.autoscale.min_replicas,
            "initial_replicas": compute.autoscale.min_replicas,
            "max_replicas": compute.autoscale.max_replicas,
            "target_ongoing_requests": compute.autoscale.target_concurrency,
        }
    else:
        options["num_replicas"] = compute.replicas
    return options


def _grace(spec: ChainletSpec) -> float:
    raw = spec.remote_config.options.env_variables.get("CHAINS_GRACE_SEC")
    try:
        value = float(raw) if raw is not None else DEFAULT_GRACE_SEC
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise ChainsUsageError(
            f"chainlet {spec.name}: CHAINS_GRACE_SEC={raw!r} must be a number of seconds above zero"
        )
    return value


def _environment(
    chain: Chain,
    spec: ChainletSpec,
    token: str,
    proxy_url: str,
    options: RayOptions,
    proxy_ca: str | None,
    jobs: Mapping[str, str],
) -> dict[str, str]:
    env = chainlet_environment(chain, spec, token, options, "ray")
    if spec is chain.entrypoint:
        env.update(jobs)
    env["CHAINS_GRACE_SEC"] = f"{_grace(spec):g}"
    if proxy_ca is not None:
        env[CA_FILE_ENV] = proxy_ca
    dependencies = sorted({dep.name for dep in spec.dependencies})
    if dependencies:
        urls = {name: [proxy_url + route_prefix(chain.name, name)] for name in dependencies}
        env["CHAINS_DEPENDENCY_URLS"] = json.dumps(urls, sort_keys=True)
    return env


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _previous_token(previous: ChainState | None) -> str | None:
    """The token of the chain's running ray deployment: a re-push keeps it, so that replicas
    of the old and the new version, side by side during Serve's rolling update, accept each
    other's calls."""
    if previous is None or previous.target != "ray":
        return None
    path = chain_dir(previous.chain) / "deployments" / previous.deployment / "deployment.json"
    try:
        deployment = Deployment.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    for chainlet in deployment.chainlets:
        token = chainlet.env.get("CHAINS_INTERNAL_TOKEN")
        if token:
            return token
    return None


def _address_of(context: Any, given: str | None) -> str:
    """The address to reach the cluster again (for ``stop``): a Ray Client address as given,
    otherwise the head's GCS address that ``auto`` or ``$RAY_ADDRESS`` resolved to."""
    if given and given.startswith("ray://"):
        return given
    info = getattr(context, "address_info", None) or {}
    return str(info.get("gcs_address") or given or os.environ.get("RAY_ADDRESS") or "auto")


def _dashboard_url(context: Any) -> str:
    url = str(getattr(context, "dashboard_url", "") or "")
    if not url:
        raise ChainsRuntimeError(
            "the Ray cluster has no dashboard; the ray target reads replicas and logs through Ray's "
            "dashboard API: start the head node with --include-dashboard true"
        )
    return url if url.startswith("http") else f"http://{url}"


class RayTarget:
    """Deploys a chain to a Ray cluster as Serve applications, one per chainlet."""

    def push(self, chain: Chain, source_file: Path, options: RayOptions) -> Pushed:
        """Deploy every chainlet and wait until Serve runs all their replicas."""
        ray, serve = _ray()
        from ray.serve.api import RunTarget

        from chains.targets.ray_app import ChainletDeployment
        from chains_codegen import generate

        previous = current_state(chain.name)
        deploy_dir = new_deployment_dir(chain.name)
        generated_dir = deploy_dir / "generated"
        result = generate(chain, source_file, generated_dir)
        versions = {name: c.code_version for name, c in result.chainlets.items()}
        token = _previous_token(previous) or secrets.token_urlsafe(32)
        proxy_ca = _proxy_ca(generated_dir)
        # The generated code travels with the connection: Ray packs the folder, keeps it in the
        # cluster and unpacks it on each node as its replicas' working directory.
        # A re-push without --address (--watch's, say) goes where the running deployment is.
        earlier = _Record.load(previous) if previous is not None and previous.target == "ray" else None
        address = options.address or (earlier.address if earlier else None)
        try:
            context = connect(address, generated_dir)
            dashboard = _dashboard_url(context)
            try:
                details: Mapping[str, Any] = serve_details(dashboard)
            except ChainsRuntimeError:
                details = {}  # asked again once Serve runs: then it says what is wrong
            if not details.get("proxies"):
                # Only when Serve is not running yet (its options are fixed once it runs): one
                # proxy, on the head, reachable from the other nodes, whose replicas call through it.
                serve.start(proxy_location="HeadOnly", http_options={"host": "0.0.0.0"})
                details = serve_details(dashboard)
            proxy = _proxy_url(details)
            if proxy_ca is not None and not proxy.startswith("https://"):
                raise ChainsUsageError(
                    f"{PROXY_CA_ENV} is set but Serve's proxy serves plain HTTP ({proxy}): start Serve "
                    "with http_options ssl_certfile and ssl_keyfile (docs/deploy.md, Ray), or unset it"
                )
            apps = {spec.name: app_name(chain.name, spec.name) for spec in chain.chainlets}
            # Replicas on any node of the cluster: their jobs in a server they all reach.
            jobs = shared_job_environment(chain_dir(chain.name), "ray", _say)
            envs = {
                spec.name: _environment(chain, spec, token, proxy, options, proxy_ca, jobs)
                for spec in chain.chainlets
            }
            deployment = Deployment(
                chain=chain.name,
                id=deploy_dir.name,
                target="ray",
                source=str(source_file),
                entrypoint=chain.entrypoint.name,
                entrypoint_kind=chain.entrypoint.endpoint.output_kind.name,
                python="",
                chainlets=DeploymentChainlet.all_of(chain, generated_dir, versions, envs),
            )
            write_private(deploy_dir / "deployment.json", deployment.model_dump_json(indent=2))
            record = _Record(
                _address_of(context, address), dashboard, proxy, apps, replacements(dashboard, apps)
            )
            record.save(deploy_dir)
            targets = []
            for spec in chain.chainlets:
                bound = (
                    serve.deployment(ChainletDeployment)
                    .options(**deployment_options(spec))
                    .bind(spec.name, envs[spec.name])
                )
                targets.append(
                    RunTarget(
                        target=bound, name=apps[spec.name], route_prefix=route_prefix(chain.name, spec.name)
                    )
                )
            serve.run_many(targets, wait_for_applications_running=False)
            try:
                _wait_running(serve, list(apps.values()), options.timeout)
            except ChainsRuntimeError:
                if previous is None or previous.target != "ray":
                    _delete(serve, list(apps.values()), timeout=60.0)
                raise
            if earlier is not None:
                gone = sorted(set(earlier.apps.values()) - set(apps.values()))
                if gone:
                    _delete(serve, gone, timeout=60.0)
        except BaseException:
            shutil.rmtree(deploy_dir, ignore_errors=True)
            raise
        finally:
            ray.shutdown()
        state = self._state(chain, deployment, record, result.chainlets, generated_dir)
        write_private(deploy_dir / "state.json", state.model_dump_json(indent=2))
        make_current(chain.name, deploy_dir)
        # A previous deployment on ray is these applications, updated; one on another target is
        # stopped by chains.deploy, as every replaced deployment is.
        return Pushed(state, replaced=[previous] if previous is not None else [])

    def _state(
        self,
        chain: Chain,
        deployment: Deployment,
        record: _Record,
        generated: Mapping[str, Any],
        generated_dir: Path,
    ) -> ChainState:
        found = replicas(record.dashboard_url, record.apps)
        processes = []
        for spec in chain.chainlets:
            url = record.proxy_url + route_prefix(chain.name, spec.name)
            port = int(urllib.parse.urlsplit(record.proxy_url).port or 80)
            mine = sorted((r for r in found if r.chainlet == spec.name), key=lambda r: r.replica_id)
            for index, replica in enumerate(mine):
                processes.append(
                    ChainletProcess(
                        chainlet=spec.name,
                        replica=index,
                        port=port,
                        url=url,
                        pid=replica.pid,
                        state="ready" if replica.state == "RUNNING" else "starting",
                        started_at=replica.started_at,
                        node=replica.node_ip,
                        directory=str(generated[spec.name].directory),
                        code_version=generated[spec.name].code_version,
                    )
                )
        return ChainState(
            chain=chain.name,
            deployment=deployment.id,
            target="ray",
            source=deployment.source,
            entrypoint=deployment.entrypoint,
            entrypoint_kind=deployment.entrypoint_kind,
            entrypoint_url=record.proxy_url + route_prefix(chain.name, chain.entrypoint.name),
            entrypoint_ca=_recorded_ca(record.proxy_url, generated_dir),
            processes=processes,
        )

    def alive(self, state: ChainState) -> bool:
        """Whether Serve's proxy still routes to the chain's entrypoint; refreshes the state's
        replicas from Ray as it goes (each one's node, process, state and restarts, as Serve
        places and replaces them), so that ``chains status`` and ``chains ui`` show them live."""
        record = _Record.load(state)
        if record is None:
            return False
        try:
            state.processes = live_processes(
                record.dashboard_url, record.apps, state.processes, record.restarts_before
            )
        except ChainsRuntimeError:
            return False  # the head's dashboard is gone: the cluster, or the chain's view of it
        try:
            context = _proxy_context(state, record.proxy_url)
            routes = get_json(f"{record.proxy_url}/-/routes", timeout=5.0, context=context)
        except (urllib.error.URLError, OSError, ValueError, ChainsUsageError):
            return False
        return isinstance(routes, dict) and route_prefix(state.chain, state.entrypoint) in routes

    def logs(self, state: ChainState, chainlet: str | None, follow: bool, lines: int) -> Iterator[str]:
        """The chainlets' log lines, fetched through Ray's log API from the nodes their
        replicas run on (each line of several replicas prefixed with chainlet and node)."""
        record = _Record.load(state)
        if record is None:
            raise ChainsRuntimeError(f"chain {state.chain!r}: the ray deployment's record is missing")
        apps = {name: app for name, app in record.apps.items() if chainlet is None or name == chainlet}
        found = [r for r in replicas(record.dashboard_url, apps) if r.actor_id]
        several = len(found) > 1
        if follow and several:
            raise ChainsUsageError(
                f"chain {state.chain!r} runs {len(found)} replicas of what you asked for; "
                "--follow follows one: name a chainlet that has one replica"
            )
        for replica in found:
            label = f"{replica.chainlet}@{replica.node_ip}"
            query = urllib.parse.urlencode(
                {"actor_id": replica.actor_id, "suffix": "err", "lines": lines, "timeout": 30}
            )
            url = f"{record.dashboard_url}/api/v0/logs/{'stream' if follow else 'file'}?{query}"
            try:
                with urllib.request.urlopen(url, timeout=None if follow else 30) as response:
                    for raw in response:
                        line = raw.decode(errors="replace").rstrip("\n")
                        yield f"{label} | {line}" if several else line
            except urllib.error.HTTPError as exc:
                raise ChainsRuntimeError(_log_unreadable(label, replica, dashboard_error(exc))) from None
            except (urllib.error.URLError, OSError) as exc:
                raise ChainsRuntimeError(
                    f"cannot read the log of {label} through Ray's dashboard: {exc}"
                ) from None

    def stop(self, state: ChainState, grace: float) -> None:
        """Delete the chain's Serve applications; Serve drains their replicas first."""
        record = _Record.load(state)
        if record is None:
            return
        ray, serve = _ray()
        try:
            serve_details(record.dashboard_url)
        except ChainsRuntimeError:
            return  # the cluster is gone, and the chain with it
        connect(record.address)
        try:
            _delete(serve, list(record.apps.values()), timeout=grace + 60.0)
            others = sorted(_statuses(serve))
        finally:
            ray.shutdown()
        # Serve itself (its controller, its proxy) outlives the chain: say so, and how to stop it.
        running = f"{len(others)} other application(s) on it" if others else "no application on it now"
        print(
            f"Serve's controller and proxy keep running on the Ray cluster ({running}); to stop "
            f"Serve too: serve shutdown --address {record.dashboard_url} -y",
            file=sys.stderr,
            flush=True,
        )


def _log_unreadable(label: str, replica: ReplicaInfo, reason: str) -> str:
    """Why a replica's log cannot be read through the dashboard, and where else it is."""
    where = (
        f"; it is on that node, in Ray's log folder (session_latest/logs{replica.log_file}, "
        "below the node's --temp-dir, /tmp/ray by default)"
        if replica.log_file
        else ""
    )
    return (
        f"cannot read the log of {label} through Ray's dashboard: Ray says: {reason}. The head reads "
        f"a node's logs through that node's dashboard agent: check that node {replica.node_ip} is "
        f"alive (`ray status`; a replica Serve still lists on a lost node is replaced within "
        f"seconds, try again) and that its Ray runs with its dashboard agent{where}"
    )


def _statuses(serve: Any) -> dict[str, tuple[str, str]]:
    """Each application's status, and what Serve says of it and of its deployments."""
    found = {}
    for name, app in serve.status().applications.items():
        messages = [str(app.message)] + [str(d.message) for d in app.deployments.values() if d.message]
        found[name] = (str(app.status.value), "; ".join(m for m in messages if m))
    return found


def _wait_running(serve: Any, apps: list[str], timeout: float) -> None:
    with progress.board("to run", title="deploying the applications") as board:
        _poll_running(serve, apps, timeout, board)


def _poll_running(serve: Any, apps: list[str], timeout: float, board: Board) -> None:
    """Until every application runs; what Serve says of one still deploying (a replica it
    cannot place, an ``__init__`` that takes long) is said as soon as Serve says it, and is
    the cause the timeout names."""
    deadline = time.monotonic() + timeout
    current: dict[str, tuple[str, str]] = {}
    said: dict[str, str] = {}
    while time.monotonic() < deadline:
        current = _statuses(serve)
        for name in apps:
            status, message = current.get(name, ("", ""))
            stage = {"RUNNING": Stage.DONE, "DEPLOY_FAILED": Stage.FAILED}.get(status, Stage.WORKING)
            board.update(name, stage, (status or "waiting").lower().replace("_", " "))
            if message and status not in ("RUNNING", "DEPLOY_FAILED") and said.get(name) != message:
                said[name] = message
                board.say(f"{name}: Serve says: {message}")
        failed = {
            name: current[name] for name in apps if name in current and current[name][0] == "DEPLOY_FAILED"
        }
        if failed:
            detail = "; ".join(f"{name}: {message}" for name, (_, message) in failed.items())
            raise ChainsRuntimeError(f"Serve failed to deploy {', '.join(failed)}: {detail}")
        if all(current.get(name, ("", ""))[0] == "RUNNING" for name in apps):
            return
        board.tick()
        time.sleep(_POLL_SEC)
    waiting = [name for name in apps if current.get(name, ("", ""))[0] != "RUNNING"]
    causes = [
        f"{name} ({current.get(name, ('absent', ''))[0] or 'absent'})"
        + (f": Serve says: {said[name]}" if name in said else "")
        for name in waiting
    ]
    hint = (
        "; a replica asks Ray for its Compute's CPUs, memory and GPUs (1 CPU by default: "
        "docs/deploy.md, Ray, Sizing): stop another chain to free them, ask for less in "
        "Compute(...), or add a node, then push again"
        if any("to be scheduled" in said.get(name, "") for name in waiting)
        else ""
    )
    raise ChainsRuntimeError(f"not running after {timeout:.0f}s: {'; '.join(causes)}{hint}")


def _delete(serve: Any, apps: list[str], timeout: float) -> None:
    for name in apps:
        serve.delete(name, _blocking=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not set(apps) & set(_statuses(serve)):
            return
        time.sleep(_POLL_SEC)
    raise ChainsRuntimeError(f"Serve still runs {', '.join(apps)} after {timeout:.0f}s")


TARGET = Target(
    name="ray",
    kind=TargetKind.RUNNING,
    options=RayOptions,
    acts_on=frozenset({SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
    build=RayTarget,
    capabilities=Capabilities(updates_in_place=True),
)
