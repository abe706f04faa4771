"""The class a remote error is raised as: a subclass of ``RemoteError`` that is also the
original type, when that is a builtin or one of chains' own.

So ``except ValueError`` or ``except StreamInterrupted`` holds for a failure raised two hops
away. Any other type (the user's own) is not importable here and arrives as a generic one.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from functools import cache
from typing import TypeVar

from chains.errors import hierarchy

__all__ = ["layout", "remote_class"]

# The module every public error class is named by, on the wire and in tracebacks.
PUBLIC_MODULE = "chains.errors"

_Remote = TypeVar("_Remote", bound=Exception)

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not in C


def layout(cls: type) -> type:
    """The builtin class whose C layout ``cls`` has, the one whose ``__new__`` builds it.

    >>> layout(hierarchy.DependencyUnavailable)
    <class 'ConnectionError'>
    """
    while cls.__flags__ & _HEAP_TYPE and cls.__base__ is not None:
        cls = cls.__base__
    return cls


def _chains_errors() -> Iterator[type[hierarchy.ChainsError]]:
    """Every public exception class of the hierarchy."""
    for name in hierarchy.__all__:
        value = getattr(hierarchy, name)
        if isinstance(value, type) and issubclass(value, hierarchy.ChainsError):
            yield value


@cache
def remote_class(module: str, name: str, remote: type[_Remote], generic: type[_Remote]) -> type[_Remote]:
    """A subclass of ``remote`` (``RemoteError``) that is also the type ``module.name``, or
    ``generic`` when that type is not rebuilt here (nor a class ``remote`` can mix with)."""
    if module == "builtins":
        base = getattr(builtins, name, None)
    elif module == PUBLIC_MODULE or module.startswith("chains."):
        # Any chains module: a peer of an older version may name where a class used to live.
        base = next((cls for cls in _chains_errors() if cls.__name__ == name), None)
    else:
        return generic
    if not (isinstance(base, type) and issubclass(base, Exception)) or issubclass(base, remote):
        return generic
    try:
        # The builtin goes first so that its __new__ (e.g. OSError's) builds the instance.
        namespace = {
            "__module__": PUBLIC_MODULE,
            "__str__": remote.__str__,
            "__reduce__": remote.__reduce__,
        }
        return type(f"Remote{name}", (base, remote), namespace)
    except TypeError:  # a builtin whose C layout cannot be mixed in
        return remote
