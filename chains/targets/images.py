"""What each chainlet's image is called: one place, shared by every target that builds or runs images.

An image is ``<registry>/<chain>-<chainlet>:<code_version>``, or ``chains/<chain>-<chainlet>:<code_version>``
without a registry. Names are lowercased and anything a Docker repository name cannot hold becomes
``-``, so every chain and chainlet name gives a valid reference.

>>> image_name("hello", "Greeter", "3f2a9c")
'chains/hello-greeter:3f2a9c'
>>> image_name("hello", "Greeter", "3f2a9c", registry="registry.example:5000/team/")
'registry.example:5000/team/hello-greeter:3f2a9c'
>>> image_repository("My_Chain", "Text-Gen_")
'chains/my_chain-text-gen'
"""

from __future__ import annotations

import re

from chains.errors import ChainsUsageError

__all__ = ["DEFAULT_PREFIX", "image_name", "image_repository", "normalize_registry"]

DEFAULT_PREFIX = "chains"

# A repository path component, as the OCI distribution spec allows it.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_COMPONENT_RE = re.compile(rf"^{_COMPONENT}$")
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9-]+)*(?::[0-9]+)?$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _separator(match: re.Match[str]) -> str:
    run = match.group(0)
    return run if run in (".", "_", "__") or set(run) == {"-"} else "-"


def _component(name: str) -> str:
    """``name`` as one repository path component: lowercase, separators only between letters/digits."""
    text = re.sub(r"[^a-z0-9._-]+", "-", name.lower())
    text = re.sub(r"[._-]+", _separator, text)
    text = text.strip("._-")
    return text or "chainlet"


def normalize_registry(registry: str | None) -> str:
    """The prefix images go under: ``registry`` without a trailing ``/``, or ``chains``.

    A registry is a host (with an optional port) followed by lowercase path components, or
    lowercase path components alone (a Docker Hub namespace such as ``myteam``).
    """
    if registry is None or not registry.strip():
        return DEFAULT_PREFIX
    prefix = registry.strip().rstrip("/")
    first, _, rest = prefix.partition("/")
    parts = rest.split("/") if rest else []
    looks_like_host = "." in first or ":" in first or first == "localhost"
    ok = (_HOST_RE.match(first) is not None) if looks_like_host else _COMPONENT_RE.match(first) is not None
    ok = ok and all(_COMPONENT_RE.match(part) for part in parts)
    if not ok:
        raise ChainsUsageError(
            f"--registry {registry!r} is not an image prefix; write a registry host and path such as "
            "'registry.example:5000/team' or 'ghcr.io/my-org' (path parts in lowercase letters, digits, "
            "'.', '_' and '-')"
        )
    return prefix


def image_repository(chain: str, chainlet: str, registry: str | None = None) -> str:
    """The repository (the image name without its tag) of ``chainlet`` in ``chain``."""
    return f"{normalize_registry(registry)}/{_component(chain)}-{_component(chainlet)}"


def image_name(chain: str, chainlet: str, code_version: str, registry: str | None = None) -> str:
    """The full image reference: the repository tagged with the chainlet's code version."""
    if not _TAG_RE.match(code_version):
        raise ChainsUsageError(
            f"code version {code_version!r} of chainlet {chainlet} cannot be an image tag "
            "(letters, digits, '_', '.', '-'; at most 128 characters)"
        )
    return f"{image_repository(chain, chainlet, registry)}:{code_version}"
