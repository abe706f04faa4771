"""The chainlet server's request path alone: CPU per call of ``ChainletApp`` driven over ASGI in-process.

No sockets, no uvicorn, no client: what is measured is the app's own work for one call (admission,
the call, the answer, the disconnect watch, a stream's encoding and body sender), which the HTTP
benchmarks see only under the noise of everything else. Each ``--tree`` is a source tree holding
``chains/`` (see ``benchmarks/ab.py``); the trees are measured alternately, each run in a fresh
process, and the figure per run is the fastest of its repeats (CPU time, ``time.process_time``).

    .venv/bin/python -m benchmarks.request_path --tree OLD --tree .

Kinds: ``unary`` (``run_remote`` returns at once), ``waits`` (it awaits once, so the disconnect
watcher starts), ``stream`` (ten items), ``echo`` (``benchmarks/chains/unary.py``'s ``Echo``, the
work of the HTTP benchmarks' floor) and ``floor`` (that floor, ``benchmarks/apps/bare_starlette.py``,
driven the same way: the same body, the same headers). ``echo`` over ``floor`` is what the
chainlet app costs against a bare Starlette app, without uvicorn and the socket.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.asgi_frameworks import BODY

KINDS = ("unary", "waits", "stream", "echo", "floor")


async def _measure(kind: str, calls: int, repeats: int) -> list[float]:
    from benchmarks.apps.request_path_chain import Echo, Tokens, Waits
    from chains.server.serve import create_app
    from chains.server.settings import ServerSettings

    path = "/run_remote"
    app: Any
    if kind == "floor":
        from benchmarks.apps.bare_starlette import app

        path, body = "/generate", BODY
    else:
        if kind == "echo":
            chainlet: Any = _unary_echo()
            body = BODY
        else:
            chainlet = {"unary": Echo, "waits": Waits, "stream": Tokens}[kind]
            body = b'{"n": 10}' if kind == "stream" else b'{"text": "hi"}'
        app = create_app(chainlet, settings=ServerSettings(is_entrypoint=True))
        await app.startup()
        await app.started.wait()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "method": "POST",
        "headers": headers,
    }
    never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def call() -> None:
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[Any] = []

        async def receive() -> Any:
            return messages.pop() if messages else await never

        async def send(message: Any) -> None:
            sent.append(message)

        await app(dict(scope), receive, send)
        assert sent[0]["status"] == 200, sent

    for _ in range(100):
        await call()
    per_call = []
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(calls):
            await call()
        per_call.append((time.process_time() - started) / calls * 1e6)
    return per_call


def _unary_echo() -> Any:
    """``benchmarks/chains/unary.py``'s ``Echo``, loaded as the generated server loads it."""
    from chains.loader import import_chain_file

    module, _ = import_chain_file(Path(__file__).resolve().parent / "chains" / "unary.py")
    return module.Echo


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tree", type=Path, action="append", required=True, help="a source tree; repeat")
    parser.add_argument("--runs", type=int, default=6, help="processes per tree and kind, alternating")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(_measure(args.child, args.calls, args.repeats))))
        return 0
    trees = [tree.resolve() for tree in args.tree]
    best: dict[tuple[str, Path], list[float]] = {}
    for _ in range(args.runs):
        for kind in KINDS:
            for tree in trees:
                # chains from the tree, this module from here (a tree may hold older benchmarks).
                code = (
                    f"import sys; sys.path.insert(0, {str(tree)!r}); import chains; del sys.path[0]; "
                    "from benchmarks.request_path import main; sys.exit(main(sys.argv[1:]))"
                )
                argv_child = ["--tree", str(tree), "--child", kind, "--calls", str(args.calls)]
                argv_child += ["--repeats", str(args.repeats)]
                out = subprocess.run(
                    [sys.executable, "-c", code, *argv_child], check=True, capture_output=True
                )
                best.setdefault((kind, tree), []).append(min(json.loads(out.stdout)))
    base = trees[0]
    print(f"{'kind':8} {'tree':40} {'us/call':>9} {'/base':>7} {'pairwise':>9}")
    for kind in KINDS:
        for tree in trees:
            runs, base_runs = best[(kind, tree)], best[(kind, base)]
            pairwise = statistics.median(b / a for a, b in zip(base_runs, runs, strict=True))
            ratio = statistics.median(runs) / statistics.median(base_runs)
            print(
                f"{kind:8} {str(tree)[-40:]:40} {statistics.median(runs):9.1f} {ratio:7.3f} {pairwise:9.3f}"
            )
    for tree in trees:
        pairs = zip(best[("echo", tree)], best[("floor", tree)], strict=True)
        floor_ratio = statistics.median(floor / echo for echo, floor in pairs)
        print(f"echo against the bare Starlette floor, {str(tree)[-40:]}: {floor_ratio:.3f}x (floor / echo)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
