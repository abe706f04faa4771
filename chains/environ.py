"""Settings read from ``CHAINS_*`` variables: a malformed value names its variable.

>>> positive_number({"CHAINS_GRACE_SEC": "5"}, "CHAINS_GRACE_SEC", 30.0)
5.0
>>> positive_number({}, "CHAINS_MAX_QUEUE", None) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import overload

from chains.errors import ChainsUsageError

__all__ = ["positive_number"]


@overload
def positive_number(env: Mapping[str, str], name: str, default: float) -> float: ...
@overload
def positive_number(env: Mapping[str, str], name: str, default: None) -> float | None: ...
def positive_number(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    """``env[name]`` as a number above zero, ``default`` when unset or empty."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ChainsUsageError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise ChainsUsageError(f"{name} must be more than zero, got {raw!r}")
    return value
