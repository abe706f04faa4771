"""The ``kubernetes`` export target: manifests for ``kubectl apply -k``, and ``--apply`` to do it.

``chains push FILE --target kubernetes --dry-run --out DIR [--registry PREFIX]`` writes::

    DIR/kustomization.yaml          ties the files below together
    DIR/<chain>-<chainlet>.yaml     per chainlet: Deployment, Service (and HorizontalPodAutoscaler)
    DIR/network_policies.yaml       who may connect to which chainlet
    DIR/README.md                   the steps: build and push images, create the Secrets, apply
    DIR/chainlets/<Chainlet>/       the generated code, each the build context of its image

Output is deterministic: the same chain and options give the same bytes.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from chains.errors import ChainsRuntimeError
from chains.model import Chain
from chains.targets import SettingGroup, Target, TargetKind
from chains.targets.files import export_code, header, regenerate_command, write_export
from chains.targets.k8s_manifests import (
    API_KEY_KEY,
    JOBS_URL_KEY,
    TOKEN_KEY,
    WEBHOOK_SECRET_KEY,
    chain_objects,
    jobs_secret_name,
    secrets_secret_name,
    token_secret_name,
)
from chains.targets.options import KubernetesOptions
from chains.targets.wiring import ChainWiring, wire
from chains.targets.yamltext import dump, dump_all

if TYPE_CHECKING:
    from chains_codegen import GeneratedChain

__all__ = [
    "CHAINLETS_DIR",
    "MANIFESTS_DIR",
    "KubernetesTarget",
    "apply",
    "manifest_files",
    "write_generated_manifests",
    "write_manifests",
]

CHAINLETS_DIR = "chainlets"
MANIFESTS_DIR = "kubernetes"  # under `chains generate --out DIR --k8s`
ENVIRONMENT = "kubernetes"


def manifest_files(wiring: ChainWiring, head: str, chainlets_dir: str) -> dict[str, str]:
    """Every file of the export but the generated code: relative path -> text."""
    entry_file = f"{wiring.entrypoint.service}.yaml"
    jobs_note = (
        f"\nAsync calls are off unless Secret {jobs_secret_name(wiring.chain)} names a PostgreSQL job\n"
        f"store (key {JOBS_URL_KEY}) every node reaches; see README.md, step 2."
    )
    files = {
        name: dump_all(objects, header=head + jobs_note if name == entry_file else head)
        for name, objects in chain_objects(wiring).items()
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    files["kustomization.yaml"] = dump(kustomization, header=head)
    files["README.md"] = _readme(wiring, head, chainlets_dir)
    return files


def _readme(wiring: ChainWiring, head: str, chainlets_dir: str) -> str:
    token, secrets = token_secret_name(wiring.chain), secrets_secret_name(wiring.chain)
    lines = [
        "<!-- " + head.replace("\n", " ") + " -->",
        f"# Chain `{wiring.chain}` on Kubernetes",
        "",
        "1. Build one image per chainlet from its generated directory (its build context; the docker "
        "target prepares and builds these contexts, see docs/deploy.md) and push it under this name:",
        "",
        "   ```sh",
    ]
    for c in wiring.chainlets:
        context = f"{chainlets_dir}/{c.name}"
        lines.append(f"   docker build -t {c.image} {shlex.quote(context)} && docker push {c.image}")
    lines += [
        "   ```",
        "",
        "2. Create the Secrets the chainlets read (their values are never in these files):",
        "",
        "   ```sh",
        f'   kubectl create secret generic {token} --from-literal={TOKEN_KEY}="$(openssl rand -hex 32)"',
        "   # optional: an API key that callers of the entrypoint send as `Authorization: Bearer KEY`:",
        f"   # add --from-literal={API_KEY_KEY}=KEY to the command above",
    ]
    if wiring.secret_keys:
        pairs = " ".join(f"--from-literal={key}=VALUE" for key in wiring.secret_keys)
        lines.append(f"   kubectl create secret generic {secrets} {pairs}")
    jobs = jobs_secret_name(wiring.chain)
    lines += [
        "   # optional: async calls (POST /async_run_remote), off without this Secret; their jobs",
        "   # live in a PostgreSQL server every node reaches (docs/jobs.md, Where jobs are stored):",
        f"   # kubectl create secret generic {jobs} --from-literal={JOBS_URL_KEY}=postgresql://USER:PASSWORD@HOST:5432/DB"
        f' --from-literal={WEBHOOK_SECRET_KEY}="whsec_$(openssl rand -hex 32)"',
    ]
    lines += [
        "   ```",
        "",
        "3. Apply, and wait until every chainlet is ready:",
        "",
        "   ```sh",
        "   kubectl apply -k .",
    ]
    lines += [f"   kubectl rollout status deployment/{c.service}" for c in wiring.chainlets]
    entry = wiring.entrypoint
    lines += [
        "   ```",
        "",
        f"4. Call the entrypoint, e.g. through a port forward: `kubectl port-forward service/{entry.service} "
        f"8000:8000`, then `POST http://127.0.0.1:8000/run_remote`.",
        "",
        "Chainlets reach each other by Service name:",
        "",
    ]
    lines += [f"- `{c.name}`: `{c.url}`" for c in wiring.chainlets]
    return "\n".join(lines) + "\n"


def write_manifests(
    chain: Chain,
    source_file: Path,
    code_versions: dict[str, str],
    out_dir: Path,
    *,
    registry: str | None,
    command: str,
    chainlets_dir: str = CHAINLETS_DIR,
    cors_origins: Iterable[str] = (),
) -> tuple[ChainWiring, list[Path]]:
    """Write the manifests of ``chain`` into ``out_dir``; ``chainlets_dir`` is where the generated
    code lies, relative to ``out_dir`` (for the README's build steps)."""
    wiring = wire(chain, code_versions, registry=registry, environment=ENVIRONMENT, cors_origins=cors_origins)
    files = manifest_files(wiring, header(source_file, chain.name, command), chainlets_dir)
    return wiring, write_export(out_dir, files, owned=("*.yaml", "README.md"))


def write_generated_manifests(
    chain: Chain, source_file: Path, generated: GeneratedChain, *, registry: str | None
) -> list[Path]:
    """``chains generate FILE --out DIR --k8s``: the manifests in ``DIR/kubernetes``, beside the code."""
    from chains_codegen.layout import display_path

    out_dir = generated.out_dir / MANIFESTS_DIR
    parts = [
        "chains",
        "generate",
        display_path(source_file),
        "--out",
        display_path(generated.out_dir),
        "--k8s",
    ]
    if registry:
        parts += ["--registry", registry]
    _, written = write_manifests(
        chain,
        source_file,
        {name: c.code_version for name, c in generated.chainlets.items()},
        out_dir,
        registry=registry,
        command=shlex.join(parts),
        chainlets_dir="..",
    )
    return written


class KubernetesTarget:
    """Writes the manifests (and the code each image is built from); ``--apply`` applies them."""

    def export(self, chain: Chain, source_file: Path, options: KubernetesOptions) -> list[Path]:
        out_dir, generated = export_code(
            chain, source_file, options, target="kubernetes", code_dir=CHAINLETS_DIR, apply_hint=None
        )
        registry = ["--registry", options.registry] if options.registry else []
        registry += [arg for origin in options.cors_origins for arg in ("--cors-origin", origin)]
        versions = {name: c.code_version for name, c in generated.chainlets.items()}
        wiring, written = write_manifests(
            chain,
            source_file,
            versions,
            out_dir,
            registry=options.registry,
            command=regenerate_command(source_file, "kubernetes", out_dir, *registry),
            cors_origins=options.cors_origins,
        )
        if options.apply:
            apply(out_dir, wiring, options.timeout)
        return [*written, *(c.directory for c in generated.chainlets.values())]


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def apply(out_dir: Path, wiring: ChainWiring, timeout: float) -> bool:
    """``kubectl apply -k out_dir``, then wait for every Deployment's rollout.

    Without kubectl or a current context, says what to run and returns False.
    """
    kubectl = shutil.which("kubectl")
    steps = [["kubectl", "apply", "-k", str(out_dir)]]
    steps += [["kubectl", "rollout", "status", f"deployment/{c.service}"] for c in wiring.chainlets]
    manual = "\n".join("  " + shlex.join(step) for step in steps)
    if kubectl is None:
        _say(f"kubectl is not installed here; create the Secrets ({out_dir}/README.md), then run:\n{manual}")
        return False
    context = subprocess.run([kubectl, "config", "current-context"], capture_output=True, text=True)
    if context.returncode != 0 or not context.stdout.strip():
        _say(f"kubectl has no current context (no cluster to apply to); once it has one, run:\n{manual}")
        return False
    _say(f"applying to context {context.stdout.strip()!r}")
    _run([kubectl, *steps[0][1:]], timeout)
    seconds = max(1, int(timeout))
    for step in steps[1:]:
        _run([kubectl, *step[1:], f"--timeout={seconds}s"], timeout + 30)
    _say(f"chain {wiring.chain!r} is ready; its entrypoint is service/{wiring.entrypoint.service}")
    return True


def _run(argv: list[str], timeout: float) -> None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ChainsRuntimeError(f"`{shlex.join(argv)}` did not finish within {timeout:.0f}s") from None
    if result.stdout.strip():
        _say(result.stdout.rstrip())
    if result.returncode != 0:
        raise ChainsRuntimeError(
            f"`{shlex.join(argv)}` failed (exit {result.returncode}): "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )


TARGET = Target(
    name="kubernetes",
    kind=TargetKind.EXPORT,
    options=KubernetesOptions,
    acts_on=frozenset({SettingGroup.BUILD_COMMANDS, SettingGroup.DATA_DIR, SettingGroup.PACKAGE_DIRS}),
    build=KubernetesTarget,
)
