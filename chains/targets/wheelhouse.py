"""The wheels a chainlet's image installs, gathered on the pushing machine.

Images are built with no package index (``pip install --no-index``): an engine may have no
network, and an image must run the very SDK the chain was pushed with, released or not.
So the pushing machine provides, in each build context:

* ``sdk/``: a wheel of the installed ``chains`` SDK, zipped from the files Python imports
  it from (an editable checkout included), with fixed timestamps so that the same files
  give the same bytes and the engine's build cache is reused;
* ``wheels/``: every wheel of the SDK's dependencies and of the chainlet's requirements,
  resolved together by this machine's ``pip`` (so its index, proxy and certificates
  apply) for the Python of the chainlet's base image.

Both are cached under :func:`cache_dir`, keyed by a digest of what they hold: the SDK's
files, or the requirement lines plus the target Python. Requirements are cached by their
text: an unpinned ``numpy`` stays at the version first resolved until the cache is
removed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chains.errors import ChainsRuntimeError

__all__ = [
    "SDK_DISTRIBUTION",
    "SdkWheel",
    "TargetPython",
    "cache_dir",
    "dependency_wheels",
    "host_python",
    "sdk_requirements",
    "sdk_wheel",
]

# The name on the package index (`chains` there is another project); `import chains` all the same.
SDK_DISTRIBUTION = "chains-sdk"
# The name in a wheel's file name and its .dist-info folder: '-' escaped (the wheel format's rule).
_WHEEL_NAME = SDK_DISTRIBUTION.replace("-", "_")
SDK_PACKAGES = ("chains", "chains_codegen")  # what the SDK's wheel holds (pyproject's wheel packages)

_PIP_TIMEOUT_SEC = 900.0
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can record: the same bytes on every build


def cache_dir() -> Path:
    """``$CHAINS_CACHE_DIR``, else ``chains`` under ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    explicit = os.environ.get("CHAINS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chains"


# -- the Python an image runs --------------------------------------------------------------------


@dataclass(frozen=True)
class TargetPython:
    """Enough about an interpreter to choose wheels for it."""

    version: str  # "3.11"
    machine: str  # "x86_64", "aarch64"
    libc: str  # "glibc" or "musl"
    libc_version: str  # "2.36"; "" when unknown

    # Run with ``python3 -c`` inside a base image: standard library only, one JSON line.
    PROBE = (
        "import json, platform, sys; lib, ver = platform.libc_ver(); "
        "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(), "
        "'libc': 'glibc' if lib == 'glibc' else 'musl', 'libc_version': ver}))"
    )

    @classmethod
    def from_probe(cls, output: str) -> TargetPython:
        data = json.loads(output.strip().splitlines()[-1])
        return cls(str(data["version"]), str(data["machine"]), str(data["libc"]), str(data["libc_version"]))

    @property
    def key(self) -> str:
        return f"cp{self.version.replace('.', '')}-{self.libc}{self.libc_version}-{self.machine}"

    def runs_wheels_of(self, other: TargetPython) -> bool:
        """Whether wheels chosen (or compiled) for ``other`` install and run here."""
        return (
            self.version == other.version
            and self.machine == other.machine
            and self.libc == other.libc
            and _version_tuple(self.libc_version) >= _version_tuple(other.libc_version)
        )

    def platforms(self) -> list[str]:
        """The wheel platform tags this interpreter accepts, for ``pip download --platform``."""
        minor = _version_tuple(self.libc_version)
        if self.libc == "musl":
            top = minor[1] if len(minor) > 1 else 2
            return [f"musllinux_1_{n}_{self.machine}" for n in range(top, 0, -1)]
        top = minor[1] if len(minor) > 1 else 17
        tags = [f"manylinux_2_{n}_{self.machine}" for n in range(top, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags += [f"{name}_{self.machine}" for n, name in legacy.items() if n <= top]
        return tags


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def host_python() -> TargetPython:
    """The interpreter running this process."""
    lib, ver = platform.libc_ver()
    return TargetPython(
        f"{sys.version_info[0]}.{sys.version_info[1]}",
        sysconfig.get_platform().rsplit("-", 1)[-1],
        "glibc" if lib == "glibc" else "musl",
        ver,
    )


# -- the SDK wheel -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SdkWheel:
    path: Path
    digest: str  # of the files it holds: changes exactly when the SDK's code does
    version: str


def _distribution() -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(SDK_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ChainsRuntimeError(
            "the chains SDK is imported but not installed as a distribution, so its images cannot "
            "install it; install it with `pip install -e .` from its checkout, or `pip install chains-sdk`"
        ) from None


def sdk_requirements() -> list[str]:
    """The SDK's own requirements, without those of its extras."""
    required = _distribution().requires or []
    return sorted(r for r in required if not re.search(r"\bextra\s*==", r))


def _sdk_files() -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    for package in SDK_PACKAGES:
        module = importlib.import_module(package)
        root = Path(module.__file__ or "").parent
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if path.is_dir() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
                continue
            files.append((f"{package}/{rel.as_posix()}", path))
    return files


def sdk_wheel() -> SdkWheel:
    """A wheel of the SDK as imported here, built once per distinct content."""
    dist = _distribution()
    version = dist.version
    fallback = f"Metadata-Version: 2.1\nName: {SDK_DISTRIBUTION}\nVersion: {version}\n"
    metadata = dist.read_text("METADATA") or fallback
    entry_points = dist.read_text("entry_points.txt")
    files = _sdk_files()
    listing = hashlib.sha256(f"{version}\n{metadata}\n{entry_points}\n".encode())
    contents: list[tuple[str, bytes]] = []
    for rel, path in files:
        data = path.read_bytes()
        contents.append((rel, data))
        listing.update(f"{hashlib.sha256(data).hexdigest()}  {rel}\n".encode())
    digest = listing.hexdigest()
    name = f"{_WHEEL_NAME}-{version}-py3-none-any.whl"
    target = cache_dir() / "sdk" / digest[:24] / name
    if target.exists():
        return SdkWheel(target, digest, version)
    info = f"{_WHEEL_NAME}-{version}.dist-info"
    contents.append((f"{info}/METADATA", metadata.encode()))
    contents.append(
        (
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: chains\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    if entry_points:
        contents.append((f"{info}/entry_points.txt", entry_points.encode()))
    record = [f"{rel},sha256={_record_hash(data)},{len(data)}" for rel, data in contents]
    record.append(f"{info}/RECORD,,")
    contents.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rel, data in contents:
            entry = zipfile.ZipInfo(rel, date_time=_ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    os.replace(tmp, target)
    return SdkWheel(target, digest, version)


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


# -- dependency wheels ---------------------------------------------------------------------------


def wheelhouse_key(requirements: Sequence[str], target: TargetPython) -> str:
    """The cache key of the wheels for ``requirements`` on ``target``."""
    lines = sorted({line.strip() for line in requirements if line.strip() and not line.startswith("#")})
    payload = json.dumps({"requirements": lines, "target": target.key}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def dependency_wheels(
    requirements: Sequence[str],
    target: TargetPython,
    log: Callable[[str], None] = lambda line: None,
) -> Path:
    """A folder with a wheel of every distribution ``requirements`` resolve to on ``target``.

    Resolved and downloaded once per distinct set; later calls return the cached folder.
    When the target runs this machine's wheels (same Python, architecture and C library, a
    C library at least as new), ``pip wheel`` also builds those published as source only;
    otherwise ``pip download`` fetches published wheels for the target's platform.
    """
    key = wheelhouse_key(requirements, target)
    folder = cache_dir() / "wheels" / key
    if (folder / ".complete").exists():
        return folder
    if importlib.util.find_spec("pip") is None:
        raise ChainsRuntimeError(
            f"gathering the wheels for the images needs pip in this Python ({sys.executable}); "
            "install it with `python -m ensurepip`"
        )
    lines = [line.strip() for line in requirements if line.strip()]
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=folder.parent))
    try:
        (staging / "requirements.txt").write_text("\n".join(lines) + "\n")
        wheels = staging / "wheels"
        command = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        if target.runs_wheels_of(host_python()):
            command += ["wheel", "--wheel-dir", str(wheels)]
        else:
            command += ["download", "--dest", str(wheels), "--only-binary=:all:"]
            command += ["--python-version", target.version, "--implementation", "cp"]
            for tag in target.platforms():
                command += ["--platform", tag]
        command += ["-r", str(staging / "requirements.txt")]
        log(
            f"gathering wheels for {len(lines)} requirement(s), for Python {target.version} "
            "(cached after this)"
        )
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_SEC, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise ChainsRuntimeError(
                f"pip did not finish gathering wheels within {_PIP_TIMEOUT_SEC:.0f}s; "
                "check that this machine reaches its package index"
            ) from None
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
            hint = (
                ""
                if target.runs_wheels_of(host_python())
                else f"\n(the base image runs Python {target.version} on {target.machine}, not this "
                "machine's Python, so only published wheels can be used: a requirement published as "
                "source only needs a base image with this machine's Python)"
            )
            raise ChainsRuntimeError(
                f"pip could not gather the wheels for {', '.join(lines)}:\n{tail}{hint}"
            ) from None
        wheels.mkdir(exist_ok=True)
        (wheels / ".complete").write_text(json.dumps({"requirements": lines, "target": target.key}) + "\n")
        if folder.exists():  # left incomplete by an earlier push that was cut short
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(wheels, folder)
        except OSError:
            if not (folder / ".complete").exists():  # not another push that got there first
                raise
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    return folder
