"""Truss Chains compatibility: Truss's names and arguments, mapped onto chains' own types.

A Truss Chains file runs here after one import changes (``import chains`` for ``import
truss_chains as chains``). What that file writes in Truss's vocabulary is translated in this
package, so that the core (``chains/deploy.py``, ``chains/config.py``, ``chains/errors/``)
speaks only chains' own names:

- ``push``: Truss's ``push(entrypoint, chain_name, publish, promote, ...)``, whose
  Baseten-only arguments are named in a warning and dropped before chains' own push runs;
- ``errors``: Truss's ``RemoteErrorDetail`` fields, added to every error body for callers
  that parse them;
- ``names``: Truss's names of chains' classes (``RPCOptions`` for ``StubOptions``), and the
  names of what only Baseten runs, which a file is told about by name;
- ``config``: Truss's older field names and positional orders of the config classes
  (``predict_concurrency``, ``pip_requirements_file``, ``Compute(2, "4Gi", "A10G")``).

The package is ``truss_compat`` and not ``truss`` because ``chains.targets.truss`` is
something else: a target that exports a chain for Baseten. Chains' own config keeps the
settings that only Baseten acts on (``Compute.instance_type``, ``BasetenImage``,
``DockerImage.truss_server_version_override``, the model caches of ``Assets``): they are
part of what a chainlet declares, which the Truss export writes and ``chains check`` names
on every other target, not a spelling of something chains has under another name.

The modules sit in different layers of docs/architecture.md, each beside what it maps onto,
so this file imports none of them: ``push`` is a front door (it calls ``chains.deploy``),
``errors``, ``names`` and ``config`` describe.
"""
