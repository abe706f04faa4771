"""The docker target: push-to-ready time of a 3-chainlet chain, cold and warm, the entrypoint's gap
on a re-push, and one-hop latency inside docker beside the local target's (issue 7).

- cold: no image of the chain on the engine, no build cache from an earlier chains build (every
  image chains built on this engine is removed first, so the engine starts from the base image
  alone) and an empty wheel cache: ``chains push benchmarks/chains/three.py --target docker``
  gathers the wheels, builds three images and waits until every container is healthy;
- warm: the same push after ``chains stop``, every image up to date (the everyday case);
- re-push: the same push while the chain runs (new containers, then the entrypoint's port
  handed over); a thread polls the entrypoint's ``/readyz`` every 20 ms meanwhile, and the
  longest run of failed polls is the gap callers see;
- one hop: ``benchmarks/chains/one_hop.py`` (``Front`` calls ``Back``) pushed on the local and on
  the docker target in the same run. Sequential calls on one keep-alive connection, p50 and p90:
  to the entrypoint from the host, and to ``Front`` and ``Back`` directly from beside them (on
  the host for local; from a container on the chain's network for docker); the hop is
  ``Front`` minus ``Back``.

Needs an engine (``DOCKER_HOST``) and a base image (``--base-image`` or ``CHAINS_BASE_IMAGE``, e.g.
``chains-python:bookworm`` from ``docker/build-base-image.sh``). Run from the repository root:
``.venv/bin/python -m benchmarks.docker_push`` (about 2 minutes). Target: warm push-to-ready at most
5 s (median).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness, report
from benchmarks.chainlets import CHAINS_DIR
from benchmarks.push_ready import chains_command
from chains.targets.docker_engine import connect

THREE = CHAINS_DIR / "three.py"
ONE_HOP = CHAINS_DIR / "one_hop.py"
THREE_NAME = "bench-docker-three"
WARM_TARGET_S = 5.0
HOP_BODY = {"prompt": "hello", "max_tokens": 16}

# Sequential calls on one keep-alive connection; standard library only, so that it runs in the
# base image as well as here. Prints the latencies' percentiles in milliseconds as JSON.
CLIENT = r"""
import http.client, json, sys, time, urllib.parse
url, body, headers = sys.argv[1], sys.argv[2].encode(), json.loads(sys.argv[3])
warmup, calls = int(sys.argv[4]), int(sys.argv[5])
parts = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
headers = {"Content-Type": "application/json", **headers}
took = []
for n in range(warmup + calls):
    start = time.perf_counter()
    conn.request("POST", "/run_remote", body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        sys.exit(f"HTTP {response.status} from {url}")
    if n >= warmup:
        took.append((time.perf_counter() - start) * 1000)
took.sort()
print(json.dumps({"p50": took[len(took) // 2], "p90": took[int(len(took) * 0.9)], "calls": len(took)}))
"""


def run_cli(args: Sequence[str], env: dict[str, str], timeout_s: float = 900) -> tuple[float, str, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [*chains_command(), *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"chains {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return elapsed, done.stdout, done.stderr


def push(file: Path, env: dict[str, str], *extra: str) -> tuple[float, dict[str, Any], str]:
    elapsed, out, err = run_cli(["push", str(file), "--json", *extra], env)
    return elapsed, json.loads(out.splitlines()[-1]), err


def remove_chains_images(engine: Any) -> int:
    """Remove every image chains built on this engine (not those in use): a cold start."""
    removed = 0
    for image in engine.client.images.list(filters={"label": "chains.chain"}):
        try:
            engine.client.images.remove(image.id, force=True)
            removed += 1
        except engine.errors.DockerException as exc:
            harness.log_stderr(f"kept image {image.id[:19]}: {exc}")
    return removed


class GapMeter:
    """Polls ``url``/readyz every 20 ms; the longest run of failures, in seconds."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.longest = 0.0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GapMeter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        failing_since: float | None = None
        while not self._stop.is_set():
            now = time.perf_counter()
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as answer:
                    ok = answer.status == 200
            except OSError:
                ok = False
            if ok and failing_since is not None:
                self.longest = max(self.longest, now - failing_since)
                failing_since = None
            elif not ok:
                self.failures += 1
                failing_since = failing_since if failing_since is not None else now
            time.sleep(0.02)


def latency_on_host(url: str, headers: dict[str, str], warmup: int, calls: int) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CLIENT,
            url,
            json.dumps(HOP_BODY),
            json.dumps(headers),
            str(warmup),
            str(calls),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


def latency_in_network(
    engine: Any, image: str, network: str, url: str, headers: dict[str, str], warmup: int, calls: int
) -> dict[str, float]:
    args = [url, json.dumps(HOP_BODY), json.dumps(headers), str(warmup), str(calls)]
    out = engine.client.containers.run(image, ["python3", "-c", CLIENT, *args], network=network, remove=True)
    result: dict[str, float] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def one_hop(env: dict[str, str], engine: Any, base_image: str, warmup: int, calls: int) -> dict[str, Any]:
    """p50/p90 of the entrypoint, Front and Back on both targets."""
    figures: dict[str, Any] = {}
    for target in ("local", "docker"):
        name = f"bench-hop-{target}"
        _, pushed, _ = push(ONE_HOP, env, "--target", target, "--name", name)
        try:
            state = json.loads(run_cli(["status", name, "--json"], env)[1])
            home = Path(env["CHAINS_HOME"]) / name
            entry = latency_on_host(pushed["entrypoint_url"], {}, warmup, calls)
            if target == "local":
                deployment = json.loads(
                    (home / "deployments" / state["deployment"] / "deployment.json").read_text()
                )
                token = deployment["chainlets"][0]["env"]["CHAINS_INTERNAL_TOKEN"]
                auth = {"Authorization": f"Bearer {token}"}
                front = entry
                back = latency_on_host(pushed["chainlets"]["Back"][0], auth, warmup, calls)
            else:
                containers = {c.name: c for c in engine.containers({"chains.chain": name})}
                back_container = containers[f"{name}-Back"]
                env_vars = dict(v.split("=", 1) for v in back_container.attrs["Config"]["Env"])
                auth = {"Authorization": f"Bearer {env_vars['CHAINS_INTERNAL_TOKEN']}"}
                network = next(iter(back_container.attrs["NetworkSettings"]["Networks"]))
                front_url = f"http://{name}-Front:8000"
                front = latency_in_network(engine, base_image, network, front_url, {}, warmup, calls)
                back = latency_in_network(
                    engine, base_image, network, pushed["chainlets"]["Back"][0], auth, warmup, calls
                )
            figures[target] = {
                "entrypoint_from_host": entry,
                "front_beside": front,
                "back_beside": back,
                "hop_p50_ms": front["p50"] - back["p50"],
            }
            harness.log_stderr(
                f"{target}: entrypoint from the host p50 {entry['p50']:.2f} ms; beside the chain: Front "
                f"{front['p50']:.2f} ms, Back {back['p50']:.2f} ms, the hop adds "
                f"{front['p50'] - back['p50']:.2f} ms"
            )
        finally:
            run_cli(["stop", name], env)
    return figures


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--warm", type=int, default=5, help="warm pushes (each after a stop)")
    parser.add_argument("--repushes", type=int, default=3, help="pushes while the chain runs")
    parser.add_argument("--calls", type=int, default=1000, help="calls per latency measurement")
    parser.add_argument("--base-image", default=os.environ.get("CHAINS_BASE_IMAGE"), help="the base image")
    parser.add_argument("--no-cold", action="store_true", help="keep the engine's images: no cold push")
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.base_image:
        sys.exit(
            "name a base image with --base-image or CHAINS_BASE_IMAGE (docker/build-base-image.sh builds one)"
        )
    started = datetime.datetime.now(datetime.UTC)
    env_info = harness.environment(("uvicorn", "pydantic", "aiohttp", "httpx", "docker"))
    engine = connect()
    env_info["engine"] = engine.client.version().get("Version")
    busy = harness.machine_busy()
    if busy > 0.2:
        harness.log_stderr(f"warning: other processes are using {busy:.2f} cores; expect noisier runs")
    with tempfile.TemporaryDirectory(prefix="chains-bench-docker-") as tmp:
        env = {
            **os.environ,
            "CHAINS_HOME": str(Path(tmp) / "home"),
            "CHAINS_CACHE_DIR": str(Path(tmp) / "cache"),
            "CHAINS_BASE_IMAGE": args.base_image,
        }
        docker_env = ["--target", "docker", "--name", THREE_NAME]
        cold: float | None = None
        if not args.no_cold:
            harness.log_stderr(f"cold push: removed {remove_chains_images(engine)} image(s) chains had built")
            cold, pushed, _ = push(THREE, env, *docker_env)
            run_cli(["stop", THREE_NAME], env)
            harness.log_stderr(f"cold push to ready: {cold:.2f} s")
        warm: list[float] = []
        for n in range(args.warm):
            elapsed, pushed, progress = push(THREE, env, *docker_env)
            if "building" in progress:
                raise RuntimeError(f"a warm push built images:\n{progress}")
            warm.append(elapsed)
            if n < args.warm - 1:
                run_cli(["stop", THREE_NAME], env)
            harness.log_stderr(f"warm push {n + 1}/{args.warm}: ready in {elapsed:.2f} s")
        repush: list[dict[str, float]] = []
        for n in range(args.repushes):
            with GapMeter(pushed["entrypoint_url"]) as gap:
                elapsed, again, _ = push(THREE, env, *docker_env)
            if again["entrypoint_url"] != pushed["entrypoint_url"]:
                raise RuntimeError("the entrypoint's URL changed on a re-push")
            repush.append({"push_s": elapsed, "gap_s": gap.longest, "failed_polls": gap.failures})
            harness.log_stderr(
                f"re-push {n + 1}/{args.repushes}: ready in {elapsed:.2f} s, "
                f"entrypoint gap {gap.longest:.2f} s"
            )
        run_cli(["stop", THREE_NAME], env)
        hop = one_hop(env, engine, args.base_image, warmup=100, calls=args.calls)
    warm_median = statistics.median(warm)
    summary = {
        "cold_push_s": cold,
        "warm_push_s": warm_median,
        "warm_push_s_all": warm,
        "repush_s": statistics.median(r["push_s"] for r in repush) if repush else None,
        "repush_gap_s": statistics.median(r["gap_s"] for r in repush) if repush else None,
        "one_hop": hop,
    }
    checks = [
        report.Check("warm push to ready, median", warm_median, WARM_TARGET_S, at_least=False, unit=" s")
    ]
    if cold is not None:
        print(f"cold push to ready: {cold:.2f} s")
    print(f"warm push to ready: median {warm_median:.2f} s (min {min(warm):.2f}, max {max(warm):.2f})")
    if repush:
        print(
            f"re-push while running: {summary['repush_s']:.2f} s, "
            f"entrypoint gap {summary['repush_gap_s']:.2f} s"
        )
    for target, figures in hop.items():
        print(
            f"{target:<6} entrypoint from host p50 {figures['entrypoint_from_host']['p50']:.2f} ms "
            f"(p90 {figures['entrypoint_from_host']['p90']:.2f}); "
            f"Front {figures['front_beside']['p50']:.2f} ms, Back {figures['back_beside']['p50']:.2f} ms: "
            f"the hop adds {figures['hop_p50_ms']:.2f} ms"
        )
    print(report.check_lines(checks))
    output = {
        "settings": {
            "warm": args.warm,
            "repushes": args.repushes,
            "calls": args.calls,
            "base_image": args.base_image,
        },
        "checks": [c.to_json() for c in checks],
        "summary": summary,
        "repushes": repush,
    }
    report.write_results("docker_push", output, args.output, started=started, environment=env_info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
