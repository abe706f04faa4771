"""chains.errors as a package: a module per concept, the top-level names a chain file writes,
the protocol's names only under chains.errors, and one name per class."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import subprocess
import sys

import pytest

import chains
import chains.errors
import chains.stubs

MODULES = [info.name for info in pkgutil.iter_modules(chains.errors.__path__, "chains.errors.")]
PROTOCOL_ONLY = ["BatchQueueFull", "ErrorDetail", "FrameTooLarge", "StreamSchemaMismatch", "UnknownFrameKind"]


def test_the_package_holds_one_module_per_concept() -> None:
    assert sorted(MODULES) == [
        "chains.errors.detail",
        "chains.errors.hierarchy",
        "chains.errors.pip_log",
        "chains.errors.rebuild",
        "chains.errors.tracebacks",
    ]


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name: str) -> None:
    module = importlib.import_module(name)
    # The classes are named by the package (their __module__ is chains.errors), so testmod
    # would skip them: the module's own names are searched instead.
    finder = doctest.DocTestFinder()
    tests = doctest.DocTestFinder(recurse=False).find(module)
    for attribute in module.__all__:
        tests += finder.find(getattr(module, attribute), attribute, module=False, globs=vars(module))
    runner = doctest.DocTestRunner()
    for test in tests:
        runner.run(test)
    assert runner.failures == 0
    if name in ("chains.errors.detail", "chains.errors.pip_log"):
        assert runner.tries > 0


@pytest.mark.parametrize("name", [*PROTOCOL_ONLY, "Violation"])
def test_a_protocol_name_at_the_top_is_refused_naming_where_it_is(name: str) -> None:
    assert name not in chains.__all__ and name not in dir(chains)
    with pytest.raises(
        AttributeError, match=rf"it is chains\.errors\.{name}, .*from chains\.errors import {name}"
    ):
        getattr(chains, name)
    assert getattr(chains.errors, name).__module__ == "chains.errors"


def test_what_a_chain_file_catches_stays_at_the_top() -> None:
    for name in [
        "ChainsError",
        "ChainsUsageError",
        "ChainsRuntimeError",
        "DeadlineExceeded",
        "DependencyUnavailable",
        "StreamInterrupted",
        "StreamProtocolError",
        "RemoteError",
        "GenericRemoteException",
        "BuildFailed",
        "BatchSizeError",
    ]:
        assert getattr(chains, name) is getattr(chains.errors, name), name


def test_an_unknown_name_is_still_a_plain_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'chains' has no attribute 'Nope'$"):
        chains.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_stub_options_have_one_class_and_the_truss_name_is_an_alias() -> None:
    assert chains.RPCOptions is chains.StubOptions
    assert chains.StubOptions.__name__ == "StubOptions"
    assert repr(chains.RPCOptions(retries=1)).startswith("StubOptions(")
    # One name where chains itself exports it; the alias is for Truss files at the top.
    assert "RPCOptions" not in chains.stubs.__all__


def test_the_old_single_module_spelling_of_every_import_still_works() -> None:
    # `from chains.errors import X` and pickled errors name chains.errors, as before the split.
    script = (
        "import pickle, chains\n"
        "from chains.errors import ErrorDetail, RemoteError, DeadlineExceeded\n"
        "d = ErrorDetail(exc_type='DeadlineExceeded', exc_module='chains.errors', message='m')\n"
        "e = pickle.loads(pickle.dumps(RemoteError.from_detail(d)))\n"
        "assert isinstance(e, DeadlineExceeded) and isinstance(e, TimeoutError), type(e)\n"
        "assert pickle.loads(pickle.dumps(DeadlineExceeded('x'))).__class__ is DeadlineExceeded\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
