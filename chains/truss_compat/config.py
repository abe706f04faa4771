"""Truss Chains' spellings of chains' config: positional orders and older field names.

Truss files build ``Compute(2, "4Gi", "A10G")`` and ``Assets(cached, secret_keys)`` by
position, and write ``Compute(predict_concurrency=...)`` and
``DockerImage(pip_requirements_file=...)`` where chains names the field ``concurrency`` and
``requirements_file``. ``chains.config`` hands what its constructors receive to the
functions here before validating, so each of Truss's spellings becomes chains' own in one
place and the config classes hold only chains' fields (the keyword names stay in their
signatures, for type checkers reading a Truss file).

Nothing here imports ``chains.config``: it sits beside it in the describing layer and maps
plain dicts, which keeps the two free of a loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chains.errors import ChainsUsageError

__all__ = [
    "ASSETS_POSITIONAL",
    "COMPUTE_POSITIONAL",
    "by_position",
    "compute_fields",
    "docker_image_fields",
]

# Truss's positional orders, so that ``Compute(2, "4Gi", "A10G")`` means the same here.
COMPUTE_POSITIONAL = ("cpu_count", "memory", "gpu", "gpu_count", "predict_concurrency", "instance_type")
ASSETS_POSITIONAL = ("cached", "secret_keys", "external_data", "weights")


def by_position(
    owner: str, order: Sequence[str], args: Sequence[Any], data: dict[str, Any]
) -> dict[str, Any]:
    """``data`` with ``args`` added under the names of ``order``, Truss's positional order
    for ``owner``; too many arguments, or one given both ways, is refused.

    >>> by_position("Compute", COMPUTE_POSITIONAL, (2, "4Gi"), {"gpu": "T4"})
    {'gpu': 'T4', 'cpu_count': 2, 'memory': '4Gi'}
    """
    if len(args) > len(order):
        raise ChainsUsageError(
            f"{owner} takes at most {len(order)} positional arguments ({', '.join(order)}), got {len(args)}"
        )
    fields = dict(data)
    for name, value in zip(order, args, strict=False):
        if name in fields:
            raise ChainsUsageError(f"{owner} got {name} both by position and by name")
        fields[name] = value
    return fields


def compute_fields(data: Any) -> Any:
    """``Compute``'s fields with Truss's ``predict_concurrency`` as ``concurrency``; its
    ``"cpu_count"`` means one call per CPU. Anything but a dict is left to validation.

    >>> compute_fields({"cpu_count": 4, "predict_concurrency": "cpu_count"})
    {'cpu_count': 4, 'concurrency': 4}
    """
    if not isinstance(data, dict) or "predict_concurrency" not in data:
        return data
    fields = dict(data)
    value = fields.pop("predict_concurrency")
    if value is None:
        return fields
    if "concurrency" in fields:
        raise ValueError("give concurrency or predict_concurrency (Truss Chains' name for it), not both")
    if value == "cpu_count":
        cpus = fields.get("cpu_count", 1)
        value = max(1, int(cpus)) if isinstance(cpus, int | float) else cpus
    fields["concurrency"] = value
    return fields


def docker_image_fields(data: Any) -> Any:
    """``DockerImage``'s fields with Truss's ``pip_requirements_file`` as ``requirements_file``.

    >>> docker_image_fields({"pip_requirements_file": "reqs.txt"})
    {'pip_requirements_file': None, 'requirements_file': 'reqs.txt'}
    """
    if not isinstance(data, dict) or not data.get("pip_requirements_file"):
        return data
    if data.get("requirements_file"):
        raise ValueError("give requirements_file or pip_requirements_file (its older name), not both")
    return {**data, "requirements_file": data["pip_requirements_file"], "pip_requirements_file": None}
