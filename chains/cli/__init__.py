"""The ``chains`` command line.

The group and how commands fail live in :mod:`chains.cli.group`; the commands, by what they act
on, in ``authoring`` (a chain file), ``deploying`` (push), ``running`` (a pushed chain) and
``observing`` (traces and the dashboard), with ``calling`` printing what ``chains call``
receives. Importing the command modules registers their commands.
"""

from chains.cli import authoring, deploying, jobs, observing, running  # noqa: F401  (registers the commands)
from chains.cli.group import main

__all__ = ["main"]
