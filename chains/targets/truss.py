"""The ``truss`` export target: one Truss directory per chainlet, for Baseten's ``truss`` tooling.

``chains push FILE --target truss --dry-run --out DIR`` writes, per chainlet::

    DIR/<Chainlet>/config.yaml       resources, secrets (by name), requirements, environment
    DIR/<Chainlet>/model/model.py    the Truss model: serves the chainlet through its generated server
    DIR/<Chainlet>/data/chainlet/    the generated chainlet directory (server, stubs, source)
    DIR/<Chainlet>/packages/chains/  the chains SDK this export was made with

and the generated code once more under ``DIR/.generated/`` (what the copies come from).
``truss push DIR/<Chainlet>`` deploys one. The ``truss`` package is not needed to export.

How a call maps: Truss hands ``predict`` the raw request, which the model passes to the
chainlet's app as ``POST /run_remote``; the app's response (JSON, or a stream in the form the
Accept header asks for) is returned as it is produced. See docs/deploy.md for the limits.
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from chains.config import BasetenImage, Compute, CustomImage, RemoteConfig
from chains.errors import ChainsUsageError
from chains.model import Chain, ChainletSpec
from chains.routes import refuse_routes
from chains.server.openapi import example_arguments
from chains.targets import SettingGroup, Target, TargetKind
from chains.targets.files import export_code, header, is_ours, regenerate_command
from chains.targets.k8s_manifests import cpu_quantity, memory_quantity
from chains.targets.options import TrussOptions
from chains.targets.wheelhouse import sdk_requirements
from chains.targets.wiring import ChainletWiring, wire
from chains.targets.yamltext import dump

__all__ = [
    "API_KEY_SECRET",
    "GENERATED_DIR",
    "PYTHON_VERSION",
    "TOKEN_SECRET",
    "TrussTarget",
    "model_addresses",
    "truss_config",
]

GENERATED_DIR = ".generated"
PYTHON_VERSION = "py311"  # the Python of the chainlets' default base image
TOKEN_SECRET = "chains_internal_token"
# The Baseten API key a chainlet's stubs send to reach the models of the chainlets it calls;
# Baseten's gateway takes it as `Authorization: Api-Key <key>`.
API_KEY_SECRET = "baseten_api_key"
API_KEY_SCHEME = "Api-Key"
PREDICT_URL_EXAMPLE = "https://model-MODEL_ID.api.baseten.co/environments/production/predict"
ENVIRONMENT = "baseten"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


def _requirement_lines(chainlet_dir: Path) -> list[str]:
    """The chainlet's own requirements, as its generated requirements.txt lists them."""
    text = (chainlet_dir / "requirements.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def model_addresses(chain: Chain, model_urls: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``CHAINS_DEPENDENCY_URLS`` entries for chainlets deployed as Baseten models, by name.

    ``model_urls`` maps a chainlet to the predict URL Baseten gave its model. Calls to it go
    there through Baseten's gateway, with the caller's Baseten API key.

    For ``{"Greeter": "https://model-ab12.api.baseten.co/environments/production/predict"}``::

        {"Greeter": {"urls": ["https://model-ab12.api.baseten.co"],
                     "path": "/environments/production/predict",
                     "auth": {"scheme": "Api-Key", "secret": "baseten_api_key"}}}
    """
    names = {spec.name for spec in chain.chainlets}
    called = {dep.name for spec in chain.chainlets for dep in spec.dependencies}
    addresses: dict[str, dict[str, Any]] = {}
    for name, url in sorted(model_urls.items()):
        if name not in names:
            known = ", ".join(sorted(called)) or "none"
            raise ChainsUsageError(
                f"--model-url {name}=...: chain {chain.name} has no chainlet {name} (called: {known})"
            )
        if name not in called:
            raise ChainsUsageError(f"--model-url {name}=...: no chainlet of chain {chain.name} calls {name}")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ChainsUsageError(
                f"--model-url {name}={url}: give the model's predict URL, e.g. {PREDICT_URL_EXAMPLE}"
            )
        if parts.path in ("", "/"):
            raise ChainsUsageError(
                f"--model-url {name}={url}: the URL names no endpoint; give the model's whole predict URL, "
                f"e.g. {PREDICT_URL_EXAMPLE}"
            )
        addresses[name] = {
            "urls": [f"{parts.scheme}://{parts.netloc}"],
            "path": parts.path,
            "auth": {"scheme": API_KEY_SCHEME, "secret": API_KEY_SECRET},
        }
    return addresses


def truss_config(
    chain: str, chainlet: ChainletWiring, requirements: list[str], addresses: Mapping[str, dict[str, Any]]
) -> dict[str, Any]:
    """``config.yaml`` of one chainlet's Truss; ``addresses`` are its dependencies' (see model_addresses)."""
    spec: ChainletSpec = chainlet.spec
    config = spec.remote_config
    # Cluster DNS names mean nothing on Baseten: a dependency is reached at its model's URL.
    env = {k: v for k, v in chainlet.env.items() if k != "CHAINS_DEPENDENCY_URLS"}
    deps = _dependencies(chainlet)
    known = {name: addresses[name] for name in deps if name in addresses}
    if known:
        env["CHAINS_DEPENDENCY_URLS"] = json.dumps(known, sort_keys=True)
    secrets: dict[str, None] = {key: None for key in sorted({*_secret_keys(chainlet), TOKEN_SECRET})}
    result: dict[str, Any] = {
        "model_name": chainlet.service,
        "description": f"chainlet {spec.name} of chain {chain} (generated by chains)",
        "python_version": PYTHON_VERSION,
        "requirements": requirements,
        "system_packages": list(config.docker_image.apt_requirements),
        "environment_variables": env,
        "secrets": secrets,
        "resources": _resources(config.compute),
        "runtime": {"predict_concurrency": config.compute.concurrency},
        "model_metadata": {
            "chains": {
                "chain": chain,
                "chainlet": spec.name,
                "code_version": chainlet.code_version,
                "is_entrypoint": chainlet.is_entrypoint,
                "dependencies": deps,
            },
            "example_model_input": example_arguments(spec.endpoint),
            **({"user": _plain(config.options.metadata)} if config.options.metadata is not None else {}),
        },
    }
    _add_baseten_settings(result, config)
    if spec.endpoint.output_kind.is_socket and "transport" not in result["runtime"]:
        # Truss serves a WebSocket endpoint only with this transport (and its own keepalive).
        result["runtime"]["transport"] = {"kind": "websocket"}
    return result


def _add_baseten_settings(found: dict[str, Any], config: RemoteConfig) -> None:
    """Add the settings only Baseten acts on, in Truss's spelling: never dropped from the export."""
    image = config.docker_image
    if isinstance(image.base_image, BasetenImage):
        found["python_version"] = image.base_image.value
    elif isinstance(image.base_image, CustomImage):
        base = {"image": image.base_image.image}
        if image.base_image.python_executable_path:
            base["python_executable_path"] = image.base_image.python_executable_path
        if image.base_image.docker_auth is not None:
            base["docker_auth"] = _plain(image.base_image.docker_auth)
        found["base_image"] = base
    elif image.base_image:
        found["base_image"] = {"image": image.base_image}
    if config.build_commands:
        found["build_commands"] = list(config.build_commands)
    if config.assets.cached:
        found["model_cache"] = [_plain(repo) for repo in config.assets.cached]
    if config.assets.external_data:
        found["external_data"] = [_plain(item) for item in config.assets.external_data]
    if config.assets.weights:
        found["weights"] = [_plain(source) for source in config.assets.weights]
    if config.options.health_checks is not None:
        found["runtime"]["health_checks"] = _plain(config.options.health_checks)
    if config.options.transport is not None:
        found["runtime"]["transport"] = _plain(config.options.transport)
    if config.options.streaming_read_timeout != 60:
        found["runtime"]["streaming_read_timeout"] = config.options.streaming_read_timeout
    if image.truss_server_version_override:
        found["runtime"]["truss_server_version_override"] = image.truss_server_version_override
    if config.compute.instance_type:
        found["resources"]["instance_type"] = config.compute.instance_type


def _plain(value: Any) -> Any:
    """Truss's own config objects (pydantic models) or plain values, as YAML-ready data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    return value


def _resources(compute: Compute) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "cpu": cpu_quantity(compute.cpu_count),
        "memory": memory_quantity(compute.memory),
        "use_gpu": compute.gpu is not None,
    }
    if compute.gpu is not None:
        resources["accelerator"] = f"{compute.gpu}:{compute.gpu_count}"  # Baseten's "A10G:2"
    return resources


def _dependencies(chainlet: ChainletWiring) -> list[str]:
    return sorted({dep.name for dep in chainlet.spec.dependencies})


def _secret_keys(chainlet: ChainletWiring) -> list[str]:
    """The secrets the model hands the chainlet: its own, and the API key its stubs send."""
    keys = set(chainlet.secret_keys)
    if chainlet.spec.dependencies:
        keys.add(API_KEY_SECRET)
    return sorted(keys)


def _model_py(env: jinja2.Environment, head: str, chain: str, chainlet: ChainletWiring) -> str:
    return env.get_template("truss_model.py.jinja").render(
        header="\n".join(f"# {line}" for line in head.splitlines()),
        name=chainlet.name,
        chain=chain,
        is_entrypoint=repr(chainlet.is_entrypoint),
        secret_keys=_secret_keys(chainlet),
        token_secret=TOKEN_SECRET,
        dependencies=_dependencies(chainlet),
        predict_url_example=PREDICT_URL_EXAMPLE,
        is_socket=chainlet.spec.endpoint.output_kind.is_socket,
    )


def _config_notes(chainlet: ChainletWiring, addresses: Mapping[str, object]) -> str:
    deps = _dependencies(chainlet)
    lines = [
        "",
        f"Deploy with: truss push {chainlet.name}",
        f"Secrets: create each one listed under `secrets` in the workspace ({TOKEN_SECRET} is optional:",
        "the chain's token, for chainlet servers outside Baseten that this chainlet calls).",
    ]
    if deps:
        missing = [name for name in deps if name not in addresses]
        lines += [
            f"This chainlet calls {', '.join(deps)} through their models' predict URLs, with the Baseten",
            f"API key in the secret {API_KEY_SECRET}.",
        ]
        if missing:
            lines += [
                f"Not given yet: {', '.join(missing)}. Deploy each first (truss push), then export again",
                "with " + " ".join(f"--model-url {name}=<its predict URL>" for name in missing),
            ]
    return "\n".join(lines)


def _replace(directory: Path) -> None:
    if directory.exists():
        if not is_ours(directory / "config.yaml"):
            raise ChainsUsageError(
                f"{directory} exists and is not a Truss written by chains; remove it or choose another --out"
            )
        shutil.rmtree(directory)


class TrussTarget:
    """Writes one Truss directory per chainlet."""

    def export(self, chain: Chain, source_file: Path, options: TrussOptions) -> list[Path]:
        refuse_routes(chain, "the truss export")
        addresses = model_addresses(chain, options.model_urls)
        out_dir, generated = export_code(
            chain,
            source_file,
            options,
            target="truss",
            code_dir=GENERATED_DIR,
            apply_hint="deploy each Truss with `truss push`",
        )
        versions = {name: c.code_version for name, c in generated.chainlets.items()}
        wiring = wire(
            chain, versions, registry=None, environment=ENVIRONMENT, cors_origins=options.cors_origins
        )
        urls = [
            arg
            for name, url in sorted(options.model_urls.items())
            for arg in ("--model-url", f"{name}={url}")
        ]
        urls += [arg for origin in options.cors_origins for arg in ("--cors-origin", origin)]
        command = regenerate_command(source_file, "truss", out_dir, *urls)
        head = header(source_file, chain.name, command)
        templates = jinja2.Environment(
            loader=jinja2.PackageLoader("chains.targets", "templates"),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,
        )
        sdk = Path(str(resources.files("chains"))).resolve()  # the installed SDK, copied into each export
        written: list[Path] = []
        for chainlet in wiring.chainlets:
            source_dir = generated.chainlets[chainlet.name].directory
            requirements = [*sdk_requirements(), *_requirement_lines(source_dir)]
            directory = out_dir / chainlet.name
            _replace(directory)
            (directory / "model").mkdir(parents=True)
            config = dump(
                truss_config(chain.name, chainlet, requirements, addresses),
                header=head + _config_notes(chainlet, addresses),
            )
            (directory / "config.yaml").write_text(config, encoding="utf-8", newline="\n")
            (directory / "model" / "__init__.py").write_text("", encoding="utf-8")
            model = _model_py(templates, head, chain.name, chainlet)
            (directory / "model" / "model.py").write_text(model, encoding="utf-8", newline="\n")
            shutil.copytree(source_dir, directory / "data" / "chainlet", ignore=_SKIP)
            shutil.copytree(sdk, directory / "packages" / "chains", ignore=_SKIP)
            written.append(directory)
        return written


TARGET = Target(
    name="truss",
    kind=TargetKind.EXPORT,
    options=TrussOptions,
    acts_on=frozenset({SettingGroup.BASETEN, SettingGroup.BUILD_COMMANDS, SettingGroup.PACKAGE_DIRS}),
    build=TrussTarget,
)
