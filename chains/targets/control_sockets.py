"""The supervisors' control sockets: where each listens, and the entrypoint's listening
socket handed over one from a deployment to the one replacing it (``SCM_RIGHTS``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import stat
import sys
import tempfile
from pathlib import Path

from chains.errors import ChainsRuntimeError

__all__ = ["ENTRY_SOCKET_COMMAND", "control_socket_path", "send_entry_socket", "take_entry_socket"]

# The control command that answers with the entrypoint's listening socket (SCM_RIGHTS).
ENTRY_SOCKET_COMMAND = "entry_socket"


def control_socket_path(deploy_dir: Path) -> Path:
    """Where a deployment's supervisor listens for commands.

    Not inside the deployment folder: a unix socket path is limited to about 100 bytes,
    which a deep ``CHAINS_HOME`` exceeds. A private folder per user, named by a hash of
    the deployment's path, keeps it short and owner-only.
    """
    runtime = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"chains-{os.getuid()}"
    runtime.mkdir(mode=0o700, exist_ok=True)
    # The folder's name is predictable and the temp dir shared: a folder someone else created
    # first (or a link they planted) would let them replace the sockets the CLI talks to.
    info = runtime.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ChainsRuntimeError(
            f"{runtime} is not a folder owned by this user (it is owned by uid {info.st_uid}); someone "
            "may have created it to take over the chains supervisors' control sockets: remove it, or "
            "set XDG_RUNTIME_DIR to a private folder"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(runtime, 0o700)
    digest = hashlib.sha256(str(deploy_dir.resolve()).encode()).hexdigest()[:20]
    return runtime / f"{digest}.sock"


def take_entry_socket(source: str | None, port: int | None) -> socket.socket | None:
    """The entrypoint's listening socket of the deployment in folder ``source``, asked of
    its supervisor; None when there is none to take (then the port is bound anew).

    Both deployments then serve one accept queue: a connection waiting in it is accepted
    by whichever process accepts next, where two sockets bound with ``SO_REUSEPORT`` would
    each have a queue of their own, and closing the old one would reset the connections
    waiting in it.
    """
    if source is None or port is None:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as control:
            control.settimeout(10)
            control.connect(str(control_socket_path(Path(source))))
            control.sendall(json.dumps({"cmd": ENTRY_SOCKET_COMMAND}).encode() + b"\n")
            _, fds, _, _ = socket.recv_fds(control, 4096, 1)
    except OSError as exc:
        print(f"binding the entrypoint's port anew: it was not handed over ({exc})", file=sys.stderr)
        return None
    if not fds:
        print("binding the entrypoint's port anew: it was not handed over", file=sys.stderr)
        return None
    sock = socket.socket(fileno=fds[0])
    if sock.type != socket.SOCK_STREAM or sock.getsockname()[1] != port:
        sock.close()
        return None
    sock.set_inheritable(True)
    return sock


def send_entry_socket(writer: asyncio.StreamWriter, sock: socket.socket) -> None:
    """Hand the entrypoint's listening socket ``sock`` to the supervisor of the next deployment."""
    transport_socket = writer.get_extra_info("socket")
    # A copy of the connection's descriptor, as the transport's own object cannot send
    # descriptors; the answer is one short message, which a fresh unix socket takes whole.
    with socket.socket(fileno=os.dup(transport_socket.fileno())) as connection:
        socket.send_fds(connection, [b'{"ok": true}\n'], [sock.fileno()])
