"""The steps of a push that starts a new deployment beside the one running, in their order.

A push of the local or the docker target:

1. finds what runs now: the chain's current deployment (and, where the target can see them,
   other deployments of the chain that still run though the state lost track of them);
2. makes a folder for the new deployment and a fresh internal token;
3. starts the new deployment beside the old one (the target's own step: it keeps the
   entrypoint's port as it can) and waits until it is ready;
4. makes it current: callers never find no chain.

A failure before step 4 ends removes whatever the push created and leaves the old
deployment serving. What comes next is every target's alike and ``chains.deploy``'s: it
stops what was replaced (the :class:`~chains.targets.state.Pushed` this returns names it),
forgets the old folders, and lets the target settle (rename, prune). The targets that update
a deployment in place (swarm, ray) start no second deployment and keep their own first steps.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from chains.targets.state import ChainState, Pushed, current_state, make_current, new_deployment_dir, writing

__all__ = ["Launch", "push_sequence"]


class Launch(Protocol):
    """A target's own part of one push, between the steps every push shares."""

    def start(self, deploy_dir: Path, previous: ChainState | None, token: str) -> ChainState:
        """Start the new deployment in ``deploy_dir`` and wait until it is ready."""
        ...

    def discard(self) -> None:
        """Remove what ``start`` created (it may have failed part way); the push failed."""
        ...

    def settle(self, state: ChainState) -> None:
        """The new deployment is current and the old ones are stopped: tidy up."""
        ...


def push_sequence(
    chain: str,
    launch: Launch,
    *,
    find_running: Callable[[str], list[ChainState]] | None = None,
) -> Pushed:
    """Start the deployment ``launch`` starts beside chain ``chain``'s running one (if any)
    and make it current; what it replaces is left running, for ``chains.deploy`` to stop.

    ``find_running`` lists the chain's deployments that still run, found without the state
    file (which may be lost): they are replaced too. For example::

        pushed = push_sequence(chain.name, _LocalLaunch(...), find_running=running_deployments)
    """
    previous = current_state(chain)
    others = [
        s
        for s in (find_running(chain) if find_running is not None else [])
        if previous is None or s.deployment != previous.deployment
    ]
    if previous is None and others:
        previous = others.pop()
    deploy_dir = writing(lambda: new_deployment_dir(chain), "create the deployment folder")
    try:
        state = launch.start(deploy_dir, previous, secrets.token_urlsafe(32))
        writing(lambda: make_current(chain, deploy_dir), "record the chain's state")
    except BaseException:
        launch.discard()
        shutil.rmtree(deploy_dir, ignore_errors=True)
        raise
    return Pushed(
        state,
        replaced=[*([previous] if previous is not None else []), *others],
        # Without find_running, a deployment the state lost track of may still run from its
        # folder: only a target that looked for those forgets every folder but the new one.
        forget_others=previous is not None or find_running is not None,
        settle=lambda: launch.settle(state),
    )
