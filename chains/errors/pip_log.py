"""Why pip failed, read from the last lines of an image build: the headline of ``BuildFailed``.

pip prints the requirement it could not find near the end of a long log, after every package
it did find; a person reading the build's tail should not have to look for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["pip_cause"]

_PIP_CAUSES = (
    re.compile(r"ERROR: (No matching distribution found for \S+)"),
    re.compile(r"ERROR: (Could not find a version that satisfies the requirement \S+.*)"),
    re.compile(r"ERROR: (ResolutionImpossible.*|Cannot install .+ because these package versions .+)"),
)


def pip_cause(lines: Sequence[str]) -> str | None:
    """The line of a pip log that says why pip failed, if it says so plainly.

    >>> pip_cause(["Collecting numpy==99", "ERROR: No matching distribution found for numpy==99"])
    'No matching distribution found for numpy==99'
    """
    for pattern in _PIP_CAUSES:
        for line in reversed(lines):
            match = pattern.search(line)
            if match is not None:
                return match.group(1).strip()
    return None
