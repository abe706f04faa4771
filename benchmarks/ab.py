"""Before and after a change, in the same run: a benchmark chain served from two or more source trees.

Each ``--tree`` is a directory holding a copy of the SDK (``chains/``), for instance an export of an
older commit (``git archive <commit> chains codegen | tar -x -C DIR``). The chain is generated once,
and each tree's chainlet servers import ``chains`` from that tree; all of them are then measured
interleaved with the same wrk, so that the machine's drift hits every tree alike. The figure to read is
the server CPU per request, which moves least when other work shares the machine.

Run from the repository root, for example::

    mkdir OLD && git archive HEAD~3 chains codegen | tar -x -C OLD
    .venv/bin/python -m benchmarks.ab --tree OLD --tree . --chain one_hop

``--chain unary`` serves ``Echo`` of ``benchmarks/chains/unary.py`` as an internal chainlet (wrk sends
the token); ``--chain one_hop`` serves ``Front`` and ``Back`` of ``benchmarks/chains/one_hop.py``.
``--defaults`` serves them as ``chains push`` does: the request log on, and traces stored (each
tree into a store of its own).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks import harness, report
from benchmarks.asgi_frameworks import BODY
from benchmarks.chainlets import CHAINS_DIR, auth_headers, generate_chain, new_token, serve_chainlet
from benchmarks.defaults import defaults_env


def server_argv(tree: Path) -> list[str]:
    """``python server.py``, with ``tree`` first on ``sys.path`` so that ``chains`` comes from it."""
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); sys.argv[0] = 'server.py'; "
        "runpy.run_path('server.py', run_name='__main__')"
    )
    return [sys.executable, "-c", code]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tree", type=Path, action="append", required=True, help="a source tree; repeat")
    parser.add_argument("--chain", choices=("unary", "one_hop"), default="unary")
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="serve as `chains push` does: the request log on and every tree's own trace store",
    )
    report.add_load_arguments(parser, duration=4.0, rounds=5)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    trees = [t.resolve() for t in args.tree]
    for tree in trees:
        if not (tree / "chains" / "__init__.py").is_file():
            raise SystemExit(f"{tree} holds no chains/ package")
    names = [f"{i}:{tree.name or tree}" for i, tree in enumerate(trees)]
    token = new_token()
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp, contextlib.ExitStack() as stack:
        chain = generate_chain(CHAINS_DIR / f"{args.chain}.py", Path(tmp))
        endpoints = []
        for index, (name, tree) in enumerate(zip(names, trees, strict=True)):
            # Each tree writes a store of its own: one file shared would make them wait on each other.
            env = defaults_env(Path(tmp) / f"tree{index}") if args.defaults else {}
            if args.chain == "unary":
                server = stack.enter_context(
                    serve_chainlet(
                        chain.chainlets["Echo"].directory,
                        entrypoint=False,
                        token=token,
                        argv=server_argv(tree),
                        env=env,
                    )
                )
                pids: tuple[int, ...] = (server.process.pid,)
                endpoints.append(
                    harness.Endpoint(name, server.url("/run_remote"), BODY, auth_headers(token), pids)
                )
                continue
            back = stack.enter_context(
                serve_chainlet(
                    chain.chainlets["Back"].directory,
                    entrypoint=False,
                    token=token,
                    argv=server_argv(tree),
                    env=env,
                )
            )
            front = stack.enter_context(
                serve_chainlet(
                    chain.chainlets["Front"].directory,
                    entrypoint=True,
                    token=token,
                    argv=server_argv(tree),
                    env=env,
                    dependency_urls={"Back": [back.base_url]},
                )
            )
            pids = (front.process.pid, back.process.pid)
            endpoints.append(harness.Endpoint(name, front.url("/run_remote"), BODY, pids=pids))
        summaries = harness.measure_interleaved(endpoints, report.loads_from(args), rounds=args.rounds)
    print(report.summary_table(summaries, {name: names[0] for name in names}))
    return 0 if all(s.errors == 0 for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
