"""The user's frames of a traceback: what an error detail carries from hop to hop.

Frames of chains itself, of the standard library, of installed packages and of the generated
stubs are the call's machinery; they are left out, so that a failure three hops deep reads as
the user's code that raised it.
"""

from __future__ import annotations

import os
import re
import sysconfig
import traceback

__all__ = ["FRAME", "is_user_frame", "user_traceback"]

# The chains package: two folders up from this module (chains/errors/tracebacks.py).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(
    os.path.abspath(sysconfig.get_paths()[key]) + os.sep
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
)

# Generated stubs live in this package of each generated chainlet (codegen's STUBS_PACKAGE):
# their frames are the call's machinery, not the user's code.
_GENERATED_STUBS = os.sep + "chains_stubs" + os.sep

# One frame of a traceback as traceback.format_list writes it: file, line, function, code.
FRAME = re.compile(r'^  File "(.*)", line (\d+), in (.*)\n(?:    (.*)\n)?', re.MULTILINE)


def user_traceback(exc: BaseException) -> str:
    """The formatted frames of ``exc`` that belong to user code, not to chains or libraries."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if is_user_frame(frame.filename)]
    return "".join(traceback.format_list(frames))


def is_user_frame(filename: str) -> bool:
    """Whether a frame in ``filename`` is the user's code.

    >>> is_user_frame(os.__file__), is_user_frame("/srv/chain.py")
    (False, True)
    """
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_LIBRARY_DIRS) or _GENERATED_STUBS in path:
        return False
    return "site-packages" not in path and not filename.startswith("<frozen")
