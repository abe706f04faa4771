"""``chains push --watch``: redeploy what changed whenever the chain's source changes.

It ends on Ctrl-C, SIGTERM or SIGHUP (the terminal closing) and stops the chain it started.

Each change is checked and generated in a fresh interpreter (so edits to modules the chain
file imports are seen too). A chain that fails its checks keeps the running version. Only
chainlets whose generated code changed are replaced, new process before old, on the same
port, so calls keep being answered. One save is one change, reported once: the folder must
rest a moment before a change counts, editors' swap and backup files are no source, and a
file written again with the same content changes nothing. The folders of
``DockerImage(external_package_dirs=...)`` the chain has when the watch starts are watched too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from chains.deploy import find_state, stop_chain
from chains.model import Chain
from chains.package_dirs import package_dirs
from chains.targets import target
from chains.targets.local import control
from chains.targets.state import chain_dir

__all__ = ["contents", "snapshot", "watch"]


# How often the folder is looked at; how long it must stay unchanged before a change counts
# (an editor's save, a formatter run on save, a checkout: many writes, one change); and the
# longest a change is waited for to settle.
_POLL_SEC = 0.3
_SETTLE_SEC = 0.3
_SETTLE_MAX_SEC = 5.0


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Modification time and size of each file under ``folder`` that makes up the chain's
    source: the files a push copies, so that the state folder (whose logs change all the time,
    and where each reload writes), a virtualenv inside the folder or an editor's swap files
    never trigger a reload."""
    from chains_codegen.ignore import source_files

    times: dict[str, tuple[int, int]] = {}
    for _, path in source_files(folder):
        try:
            stat = path.stat()
        except FileNotFoundError:  # removed meanwhile: the next snapshot sees it gone
            continue
        times[str(path)] = (stat.st_mtime_ns, stat.st_size)
    return times


def contents(folder: Path) -> dict[str, str]:
    """A digest of each source file's content: a save that changed nothing (or a ``touch``)
    moves a modification time, and is no edit."""
    from chains_codegen.ignore import source_files

    digests: dict[str, str] = {}
    for rel, path in source_files(folder):
        try:
            digests[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            continue
    return digests


def watched_folders(file: Path, chain: Chain) -> list[Path]:
    """The chain file's folder, then each folder of its chainlets' ``external_package_dirs``."""
    folder = file.resolve().parent
    found = [folder]
    for spec in chain.chainlets:
        found += package_dirs(spec.name, spec.remote_config.docker_image, folder)
    return list(dict.fromkeys(found))


def _snapshot_all(folders: list[Path]) -> dict[str, tuple[int, int]]:
    return {path: seen for folder in folders for path, seen in snapshot(folder).items()}


def _contents_all(folders: list[Path]) -> dict[tuple[str, str], str]:
    return {(str(folder), rel): digest for folder in folders for rel, digest in contents(folder).items()}


def _settled(folders: list[Path], seen: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The folders' snapshot once they stopped changing for a moment: one save often writes
    several times (a truncate then the text, a backup then the file, a formatter after the
    editor)."""
    deadline = time.monotonic() + _SETTLE_MAX_SEC
    while time.monotonic() < deadline:
        time.sleep(_SETTLE_SEC)
        now = _snapshot_all(folders)
        if now == seen:
            break
        seen = now
    return seen


def _descriptors(generated: Path) -> dict[str, dict[str, object]]:
    found = {}
    for path in sorted(generated.glob("*/chainlet.json")):
        data = json.loads(path.read_text())
        found[str(data["name"])] = data
    return found


def _topology(descriptors: dict[str, dict[str, object]]) -> object:
    return sorted(
        (
            name,
            json.dumps(d.get("dependencies"), sort_keys=True),
            json.dumps(d.get("options"), sort_keys=True),
        )
        for name, d in descriptors.items()
    )


def redeploy(file: Path, chain_name: str, entrypoint: str | None, generation: int) -> str:
    """Check and generate ``file`` again and replace the chainlets whose code changed."""
    state = find_state(chain_name)
    deploy_dir = chain_dir(chain_name) / "deployments" / state.deployment
    out = deploy_dir / f"generated-{generation}"
    command = [sys.executable, "-m", "chains", "generate", str(file), "--out", str(out)]
    if entrypoint:
        command += ["--entrypoint", entrypoint]
    base_image = state.images.base_image if state.images is not None else None
    if base_image:  # generated as the deployment was, so unchanged chainlets compare equal
        command += ["--base-image", base_image]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return f"the change does not pass the checks; the running version stays:\n{result.stderr.rstrip()}"
    new = _descriptors(out)
    running = {p.chainlet: p for p in state.processes}
    old_dirs = {name: Path(p.directory) for name, p in running.items()}
    old = {name: json.loads((d / "chainlet.json").read_text()) for name, d in old_dirs.items()}
    push = [sys.executable, "-m", "chains", "push", str(file), "--name", chain_name, "--target", state.target]
    if entrypoint:
        push += ["--entrypoint", entrypoint]
    if base_image:
        push += ["--base-image", base_image]
    if set(new) != set(old) or _topology(new) != _topology(old):
        pushed = subprocess.run(push, capture_output=True, text=True)
        if pushed.returncode != 0:
            return f"the new chain did not start; the running version stays:\n{pushed.stderr.rstrip()}"
        return "the chain's shape changed: pushed it anew"
    changed = [name for name in new if new[name].get("code_version") != old[name].get("code_version")]
    if not changed:
        return "no chainlet's code changed"
    if not target(state.target).capabilities.patch:
        # Containers are replaced, not patched: push again, which builds only the images of the
        # chainlets that changed and starts the new containers before removing the old ones.
        pushed = subprocess.run(push, capture_output=True, text=True)
        if pushed.returncode != 0:
            return f"the new version did not start; the running one stays:\n{pushed.stderr.rstrip()}"
        return f"rebuilt {', '.join(changed)} and pushed the chain again"
    # Dependencies first: a caller's new code may rely on its callee's new endpoint.
    order = [spec for spec in (p.chainlet for p in state.processes) if spec in changed]
    for name in dict.fromkeys(order):
        answer = control(
            deploy_dir,
            {
                "cmd": "replace",
                "chainlet": name,
                "directory": str(out / name),
                "code_version": str(new[name].get("code_version", "")),
            },
        )
        if not answer.get("ok"):
            return f"replacing {name} failed; it keeps running the old code: {answer.get('error')}"
    return f"replaced {', '.join(dict.fromkeys(order))}"


class _Hangup(Exception):
    """SIGHUP or SIGTERM arrived: the terminal closed, or someone asked the watch to end."""


def _hang_up(signum: int, frame: object) -> None:
    raise _Hangup(signal.Signals(signum).name)


def watch(file: Path, chain: Chain, *, entrypoint: str | None = None) -> None:
    """Watch the chain's folder until Ctrl-C, SIGTERM or SIGHUP (its terminal closing), then
    stop the chain: nothing it started outlives it."""
    folders = watched_folders(file, chain)
    before = _snapshot_all(folders)
    deployed = _contents_all(folders)
    generation = 0
    handlers: dict[signal.Signals, Callable[[int, Any], None]] = {
        # Ctrl-C, and `kill -INT`, even where it was started with SIGINT ignored (a shell
        # does that to a job it starts with `&`, as in `nohup chains push --watch &`): a watch
        # nothing can stop but SIGKILL would leave its chain running.
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: _hang_up,
    }
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup: it outlives its terminal
        handlers[signal.SIGHUP] = _hang_up
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        click.echo(f"watching {', '.join(map(str, folders))} for changes (Ctrl-C stops the chain)")
        while True:
            time.sleep(_POLL_SEC)
            now = _snapshot_all(folders)
            if now == before:
                continue
            before = _settled(folders, now)
            content = _contents_all(folders)
            if content == deployed:
                continue  # written again as it was: nothing to reload, nothing to say
            deployed = content
            generation += 1
            click.echo(f"[watch] change seen: {redeploy(file, chain.name, entrypoint, generation)}")
    except (KeyboardInterrupt, _Hangup):
        # A second signal must not cut the stop short.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        with contextlib.suppress(OSError):  # the terminal may be gone with the hang-up
            click.echo("stopping the chain")
        stop_chain(chain.name)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
