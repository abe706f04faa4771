"""Configuration a chainlet declares: its image, compute, assets and options.

Every object here is a frozen pydantic model. A bad value raises :class:`ChainsUsageError`
naming the field and what it accepts, at the line that built the object.
"""

from __future__ import annotations

import enum
import os
import re
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

import pydantic

from chains.errors import ChainsUsageError
from chains.origins import check_origin
from chains.truss_compat.config import (
    ASSETS_POSITIONAL,
    COMPUTE_POSITIONAL,
    by_position,
    compute_fields,
    docker_image_fields,
)

__all__ = [
    "Assets",
    "Autoscale",
    "BasetenImage",
    "ChainletOptions",
    "Compute",
    "CustomImage",
    "DockerImage",
    "RemoteConfig",
    "make_abs_path_here",
    "parse_memory",
]

_MEMORY_UNITS = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|K|M|G|T)?\s*$")
_SECRET_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def parse_memory(value: str) -> int:
    """The number of bytes in a Kubernetes-style quantity such as ``"512Mi"`` or ``"2G"``.

    >>> parse_memory("512Mi")
    536870912
    """
    match = _MEMORY_RE.match(value)
    if match is None:
        raise ValueError(
            f"{value!r} is not a memory size; write a number with an optional unit, "
            "e.g. '512Mi', '2Gi' or '1G' (units: K, M, G, T, Ki, Mi, Gi, Ti)"
        )
    number, unit = match.groups()
    size = int(float(number) * _MEMORY_UNITS[unit or ""])
    if size <= 0:
        raise ValueError(f"memory must be more than zero, got {value!r}")
    return size


_GPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class _Config(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    if not TYPE_CHECKING:
        # Type checkers keep pydantic's generated signature; at run time a bad value becomes
        # a usage error that names the class and the field instead of a raw ValidationError.
        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except pydantic.ValidationError as exc:
                raise ChainsUsageError(_describe(type(self).__name__, exc)) from None


def _describe(owner: str, exc: pydantic.ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field; check its spelling"
        where = f"{owner}.{field}" if field else owner
        lines.append(f"{where}: {message} (got {error.get('input')!r})")
    return "invalid configuration:\n  " + "\n  ".join(lines)


class BasetenImage(enum.Enum):
    """Baseten's curated base images, by Python version (Truss Chains' vocabulary).

    The Truss export writes the version into the model's config; the docker target builds on
    its own default base image instead (``chains check`` says so), since Baseten's images live
    in Baseten's registry.

    >>> DockerImage(base_image=BasetenImage.PY311).base_image_reference is None
    True
    """

    PY39 = "py39"
    PY310 = "py310"
    PY311 = "py311"

    @property
    def python_version(self) -> str:
        return f"3.{self.value[3:]}"


class CustomImage(_Config):
    """A base image of one's own, by reference (Truss Chains' vocabulary).

    >>> DockerImage(base_image=CustomImage(image="python:3.11-slim")).base_image_reference
    'python:3.11-slim'
    """

    image: str
    python_executable_path: str | None = None
    # Registry credentials for Baseten's builders; accepted for the Truss export only.
    docker_auth: Any = None

    @pydantic.field_validator("image")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("name an image, e.g. 'python:3.11-slim'")
        return value


class DockerImage(_Config):
    """What goes into a chainlet's image beyond the SDK itself.

    Paths (``requirements_file``, ``data_dir``, ``external_package_dirs``) are relative to the
    chain file's folder, or absolute: ``chains.make_abs_path_here("requirements.txt")`` makes
    one relative to the module that calls it. ``data_dir`` is copied with the chainlet as its
    ``context.data_dir``; each of ``external_package_dirs`` is copied too and is an import
    root where the chainlet runs (and where ``chains check`` imports the chain file).

    >>> DockerImage(pip_requirements=["numpy>=2"], apt_requirements=["ffmpeg"]).pip_requirements
    ['numpy>=2']
    """

    base_image: str | BasetenImage | CustomImage | None = None
    pip_requirements: list[str] = pydantic.Field(default_factory=list)
    requirements_file: str | None = None
    # Truss Chains' older name for ``requirements_file``, declared for type checkers: the
    # compatibility layer folds it into requirements_file, so it is always None here.
    pip_requirements_file: str | None = None
    apt_requirements: list[str] = pydantic.Field(default_factory=list)
    data_dir: str | None = None
    external_package_dirs: list[str] = pydantic.Field(default_factory=list)
    truss_server_version_override: str | None = None

    @pydantic.field_validator("pip_requirements", "apt_requirements")
    @classmethod
    def _no_blank_entries(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry.strip():
                raise ValueError("entries must be non-empty package names")
        return value

    @pydantic.field_validator("external_package_dirs")
    @classmethod
    def _no_blank_folders(cls, value: list[str]) -> list[str]:
        if any(not entry.strip() for entry in value):
            raise ValueError("entries must be folder paths, e.g. '../shared'")
        return value

    @pydantic.model_validator(mode="before")
    @classmethod
    def _older_names(cls, data: Any) -> Any:
        return docker_image_fields(data)

    @property
    def base_image_reference(self) -> str | None:
        """The image reference a Dockerfile starts ``FROM``; None for the target's default."""
        if isinstance(self.base_image, CustomImage):
            return self.base_image.image
        if isinstance(self.base_image, BasetenImage):
            return None
        return self.base_image


class Autoscale(_Config):
    """How a cluster scales a chainlet: between ``min_replicas`` and ``max_replicas``, aiming at
    ``target_concurrency`` calls in flight per replica. Targets that cannot autoscale (``local``,
    ``docker``) run ``Compute(replicas=...)`` processes; ``kubernetes`` writes a
    HorizontalPodAutoscaler. ``Compute(autoscale=(1, 10, 16))`` is short for this.

    >>> Autoscale(min_replicas=1, max_replicas=10, target_concurrency=16).max_replicas
    10
    """

    min_replicas: int = pydantic.Field(default=1, ge=1)
    max_replicas: int = pydantic.Field(ge=1)
    target_concurrency: int = pydantic.Field(ge=1)

    @pydantic.field_validator("max_replicas")
    @classmethod
    def _not_below_min(cls, value: int, info: pydantic.ValidationInfo) -> int:
        low = info.data.get("min_replicas")
        if low is not None and value < low:
            raise ValueError(f"max_replicas must be at least min_replicas ({low})")
        return value


class Compute(_Config):
    """The resources of each replica of a chainlet, and how many calls it serves at once.

    ``gpu`` names the accelerator type each replica needs (``"T4"``, ``"A10G"``, ``"H100"``,
    as the platform spells it), ``gpu_count`` how many of them.

    >>> Compute(cpu_count=2, memory="2Gi", concurrency=32).memory_bytes
    2147483648
    >>> Compute(gpu="A10G", gpu_count=2).gpu_count
    2
    """

    cpu_count: float = pydantic.Field(default=1, gt=0)
    memory: str = "512Mi"
    gpu: str | None = None
    gpu_count: int = pydantic.Field(default=1, ge=1)
    concurrency: int = pydantic.Field(default=32, ge=1)
    replicas: int = pydantic.Field(default=1, ge=1)
    autoscale: Autoscale | None = None
    # Baseten's machine type, which overrides the resources above there; Truss export only.
    instance_type: str | None = None

    if TYPE_CHECKING:

        def __init__(
            self,
            cpu_count: float = 1,
            memory: str = "512Mi",
            gpu: str | None = None,
            gpu_count: int = 1,
            predict_concurrency: int | Literal["cpu_count"] | None = None,
            instance_type: str | None = None,
            *,
            concurrency: int = 32,
            replicas: int = 1,
            autoscale: Autoscale | tuple[int, int, int] | None = None,
        ) -> None: ...

    else:

        def __init__(self, *args: Any, **data: Any) -> None:
            # The positional order and the older names are Truss Chains' (chains.truss_compat).
            super().__init__(**by_position("Compute", COMPUTE_POSITIONAL, args, data))

    @pydantic.model_validator(mode="before")
    @classmethod
    def _older_names(cls, data: Any) -> Any:
        return compute_fields(data)

    @pydantic.field_validator("gpu")
    @classmethod
    def _gpu_name(cls, value: str | None) -> str | None:
        if value is not None and not _GPU_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an accelerator type; name one like 'T4', 'A10G' or 'H100'")
        return value

    @pydantic.field_validator("gpu_count")
    @classmethod
    def _count_needs_a_type(cls, value: int, info: pydantic.ValidationInfo) -> int:
        # "gpu" is absent from info.data when it failed its own check, which says enough.
        if value != 1 and "gpu" in info.data and info.data["gpu"] is None:
            raise ValueError(f"gpu_count={value} needs the accelerator type too: add gpu='T4' or similar")
        return value

    @pydantic.field_validator("memory")
    @classmethod
    def _valid_memory(cls, value: str) -> str:
        parse_memory(value)
        return value

    @pydantic.field_validator("autoscale", mode="before")
    @classmethod
    def _autoscale_triple(cls, value: Any) -> Any:
        if isinstance(value, tuple | list):
            if len(value) != 3:
                raise ValueError(
                    "autoscale takes (min_replicas, max_replicas, target_concurrency) "
                    "or chains.Autoscale(...)"
                )
            low, high, target = value
            return {"min_replicas": low, "max_replicas": high, "target_concurrency": target}
        return value

    @pydantic.field_validator("autoscale")
    @classmethod
    def _autoscale_fits(cls, value: Autoscale | None, info: pydantic.ValidationInfo) -> Autoscale | None:
        if value is None:
            return value
        concurrency = info.data.get("concurrency")
        if concurrency is not None and value.target_concurrency > concurrency:
            raise ValueError(
                f"target_concurrency {value.target_concurrency} is more than a replica serves at once "
                f"(concurrency={concurrency}), so it would never scale up; lower it or raise concurrency"
            )
        replicas = info.data.get("replicas")
        if replicas is not None and replicas > 1:
            raise ValueError(
                f"set either replicas ({replicas}) or autoscale, not both: with autoscale, "
                "min_replicas is the starting count"
            )
        return value

    @property
    def memory_bytes(self) -> int:
        return parse_memory(self.memory)


class Assets(_Config):
    """Secrets a chainlet reads through ``context.secrets``; only declared keys are readable.

    ``cached``, ``external_data`` and ``weights`` are Truss Chains' model caches and downloads
    (``truss_config.ModelRepo`` and the like, or plain dicts): Baseten fetches them, so only
    the Truss export writes them, and ``chains check`` names them for the other targets.

    >>> Assets(secret_keys=["hf_token"]).secret_keys
    ['hf_token']
    """

    cached: list[Any] = pydantic.Field(default_factory=list)
    secret_keys: list[str] = pydantic.Field(default_factory=list)
    external_data: list[Any] = pydantic.Field(default_factory=list)
    weights: list[Any] = pydantic.Field(default_factory=list)

    if TYPE_CHECKING:

        def __init__(
            self,
            cached: Iterable[Any] = (),
            secret_keys: Iterable[str] = (),
            external_data: Iterable[Any] = (),
            weights: Iterable[Any] = (),
        ) -> None: ...

    else:

        def __init__(self, *args: Any, **data: Any) -> None:
            # Truss Chains' positional order (chains.truss_compat).
            super().__init__(**by_position("Assets", ASSETS_POSITIONAL, args, data))

    @pydantic.field_validator("secret_keys")
    @classmethod
    def _valid_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not _SECRET_KEY_RE.match(key):
                raise ValueError(
                    f"secret key {key!r} must start with a letter or '_' and hold only "
                    "letters, digits, '_', '.' or '-'"
                )
        if len(set(value)) != len(value):
            raise ValueError("secret keys must be unique")
        return value


class ChainletOptions(_Config):
    """Process-level options: environment variables set for the chainlet's server, and its
    log level.

    The other fields are Truss Chains' and Baseten's (``health_checks``, ``metadata``,
    ``enable_b10_tracing``, ``transport``, ``streaming_read_timeout``): accepted, written by the
    Truss export, and named by ``chains check`` where a target does not honour them.

    >>> ChainletOptions(env_variables={"LOG_LEVEL": "debug"}).env_variables
    {'LOG_LEVEL': 'debug'}
    """

    env_variables: dict[str, str] = pydantic.Field(default_factory=dict)
    enable_debug_logs: bool = False
    enable_b10_tracing: bool = False
    health_checks: Any = None
    metadata: Any = None
    streaming_read_timeout: int = pydantic.Field(default=60, gt=0)
    transport: Any = None

    @pydantic.field_validator("env_variables")
    @classmethod
    def _valid_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return value


class RemoteConfig(_Config):
    """Everything about how a chainlet is deployed, set as the class attribute ``remote_config``.

    >>> RemoteConfig(compute=Compute(concurrency=8)).compute.concurrency
    8
    """

    docker_image: DockerImage = pydantic.Field(default_factory=DockerImage)
    compute: Compute = pydantic.Field(default_factory=Compute)
    assets: Assets = pydantic.Field(default_factory=Assets)
    options: ChainletOptions = pydantic.Field(default_factory=ChainletOptions)
    name: str | None = None
    # Shell commands run while the image is built (Dockerfile ``RUN`` lines, Truss's
    # ``build_commands``); images only, so the local target names them as not run.
    build_commands: list[str] = pydantic.Field(default_factory=list)
    # On the entrypoint: the origins of the web pages that may call the chain from a browser
    # (``"https://app.example"``, ``"*"`` for any); ``chains push --cors-origin`` adds more.
    cors_origins: list[str] = pydantic.Field(default_factory=list)

    @pydantic.field_validator("cors_origins")
    @classmethod
    def _valid_origins(cls, value: list[str]) -> list[str]:
        try:
            return list(dict.fromkeys(check_origin(origin) for origin in value))
        except ChainsUsageError as exc:
            raise ValueError(str(exc)) from None

    @pydantic.field_validator("build_commands")
    @classmethod
    def _no_blank_commands(cls, value: list[str]) -> list[str]:
        for command in value:
            if not command.strip():
                raise ValueError("build commands must be non-empty shell commands")
        return value


def make_abs_path_here(file_path: str) -> str:
    """``file_path`` made absolute against the folder of the module that calls this.

    For configuration kept next to a chainlet in a module of its own (Truss Chains has a
    helper of the same name, which chains' messages about paths recommend to everyone)::

        # in helpers/whisper.py
        image = chains.DockerImage(requirements_file=chains.make_abs_path_here("requirements.txt"))
    """
    caller = sys._getframe(1).f_globals.get("__file__")
    if not caller:
        raise ChainsUsageError(
            "make_abs_path_here() needs to be called from a module file; in an interactive "
            f"session give an absolute path instead of {file_path!r}"
        )
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(caller)), file_path))
