"""``generate``: write one directory per chainlet that can be run, read and shipped.

Each ``out_dir/<Chainlet>/`` holds ``server.py`` (``python server.py --port N``), the stubs of
its dependencies in ``chains_stubs/``, ``chainlet.json``, ``requirements.txt``, a
``Dockerfile``, the ``ruff.toml`` the generated code is checked with, and the chain's folder
copied to ``src/``. The same input always gives the same bytes; ``chains_codegen.versions`` says
what a chainlet's ``code_version`` covers.
"""

from __future__ import annotations

import json
import keyword
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from chains.errors import ChainsUsageError
from chains.model import Chain, ChainletSpec
from chains.package_dirs import package_dirs
from chains_codegen.descriptor import DESCRIPTOR, chainlet_descriptor, descriptor_text, read_descriptor
from chains_codegen.ignore import check_source_size, max_source_bytes, source_files
from chains_codegen.imports import Imports
from chains_codegen.layout import STUBS_PACKAGE, header, stub_class_name, stub_module_name, templates
from chains_codegen.pysource import bracketed
from chains_codegen.stubgen import StubModule, render_stub
from chains_codegen.versions import code_version, file_digest

__all__ = ["DEFAULT_BASE_IMAGE", "GeneratedChain", "GeneratedChainlet", "generate"]

DEFAULT_BASE_IMAGE = "python:3.11-slim"


# Names server.py binds itself; a user module with one of these names is imported under an alias.
_SERVER_NAMES = frozenset({"sys", "Path", "create_app", "main", "app", "_HERE"})

# Chain file names that would shadow what the generated server imports.
_RESERVED_MODULES = frozenset({"chains", "chains_codegen", STUBS_PACKAGE, "server"})


@dataclass(frozen=True)
class GeneratedChainlet:
    """One generated chainlet directory."""

    name: str
    directory: Path
    code_version: str
    is_entrypoint: bool


@dataclass(frozen=True)
class GeneratedChain:
    """What :func:`generate` wrote: one entry per chainlet, dependencies before callers."""

    name: str
    out_dir: Path
    entrypoint: str
    chainlets: Mapping[str, GeneratedChainlet]


def generate(
    chain: Chain, source_file: Path, out_dir: Path, *, base_image: str = DEFAULT_BASE_IMAGE
) -> GeneratedChain:
    """Generate every chainlet of ``chain`` (loaded from ``source_file``) into ``out_dir``.

    ``base_image`` is the image a chainlet's Dockerfile starts from unless its
    ``DockerImage(base_image=...)`` names one. Paths are shown in the generated files as
    given (pass them relative to keep the files free of machine paths). Each chainlet's
    directory is replaced as a whole; directories of chainlets this chain no longer has
    are removed. Each gets a copy of the chain file's folder as ``src/`` (less what
    :func:`chains_codegen.ignore.source_files` leaves out), refused over ``$CHAINS_MAX_SOURCE_MB``.

    >>> from chains.loader import load_chain                          # doctest: +SKIP
    >>> chain = load_chain("examples/hello/chain.py")                   # doctest: +SKIP
    >>> result = generate(chain, Path("examples/hello/chain.py"), Path("build"))  # doctest: +SKIP
    >>> sorted(result.chainlets), result.chainlets["Greeter"].directory   # doctest: +SKIP
    (['Greeter', 'Hello'], PosixPath('build/Greeter'))
    """
    source = _ChainSource.of(Path(source_file))
    out_dir = Path(out_dir)
    folder = source.file.parent
    out_resolved = out_dir.resolve()
    if out_resolved == folder or out_resolved in folder.parents:
        raise ChainsUsageError(
            f"--out {out_dir} holds the chain's own folder {folder.name}/; generate into a directory of "
            "its own, e.g. --out build"
        )
    files = source_files(folder, skip=[out_dir])
    chain_file = source.file.relative_to(folder).as_posix()
    if chain_file not in {rel for rel, _ in files}:
        raise ChainsUsageError(
            f"{source.shown}: the chain file itself is excluded by {folder.name}/.chainsignore; "
            "remove the pattern that matches it"
        )
    check_source_size(folder, files, max_source_bytes())
    src = _SourceTree(files)
    env = templates()
    # Everything is rendered before anything is written: a chainlet that cannot be generated
    # leaves the previous output as it was.
    rendered = {
        spec.name: _render_chainlet(env, chain, spec, source, src, out_dir, base_image, chain_file)
        for spec in chain.chainlets
    }
    for spec in chain.chainlets:
        _check_replaceable(out_dir / spec.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    generated: dict[str, GeneratedChainlet] = {}
    for spec in chain.chainlets:
        directory = out_dir / spec.name
        _replace_directory(directory, rendered[spec.name], src)
        generated[spec.name] = GeneratedChainlet(
            spec.name, directory, rendered[spec.name].code_version, spec is chain.entrypoint
        )
    _remove_stale(out_dir, chain.name, set(generated))
    return GeneratedChain(chain.name, out_dir, chain.entrypoint.name, generated)


@dataclass(frozen=True)
class _ChainSource:
    """The chain file and the module name the loader imported it under."""

    file: Path  # resolved
    given: Path
    shown: str
    module: str  # the file's stem: what generated code imports it as
    loaded_as: str | None  # the loader's private module name

    @classmethod
    def of(cls, given: Path) -> _ChainSource:
        file = given.resolve()
        stem = file.stem
        if not stem.isidentifier() or keyword.iskeyword(stem):
            raise ChainsUsageError(
                f"{given}: generated servers import the chain file as a module, and {stem!r} is not "
                "a valid module name; rename the file, e.g. to chain.py"
            )
        if stem in _RESERVED_MODULES or stem in sys.stdlib_module_names:
            raise ChainsUsageError(
                f"{given}: a chain file named {file.name} would shadow the module {stem!r} that "
                "generated servers import; rename it, e.g. to chain.py"
            )
        loaded_as = next(
            (
                name
                for name, module in list(sys.modules.items())
                if name.startswith("chains_src_") and _same_file(getattr(module, "__file__", None), file)
            ),
            None,
        )
        return cls(file, given, given.as_posix(), stem, loaded_as)

    def import_name(self, module: str) -> str:
        """The name generated code imports ``module`` by."""
        if module == self.loaded_as:
            return self.module
        if module.startswith("chains_src_"):
            raise ChainsUsageError(
                f"module {module} is another chain file loaded by chains, not {self.given}; "
                "move what it defines into a module the chain file imports"
            )
        if module == "__main__":
            raise ChainsUsageError(
                "a chainlet or a type it uses is defined in __main__ (a script); define it in the "
                f"chain file {self.given} or a module it imports"
            )
        return module


def _same_file(path: str | None, file: Path) -> bool:
    return path is not None and Path(path).resolve() == file


def _top_level_names(files: list[tuple[str, Path]]) -> set[str]:
    """What ``import x`` finds in a folder holding ``files``: its modules and packages."""
    names = {rel.split("/", 1)[0] if "/" in rel else rel.removesuffix(".py") for rel, _ in files}
    return {name for name in names if name.isidentifier()}


class _SourceTree:
    """The files copied to ``src/``, hashed once for every chainlet."""

    def __init__(self, files: list[tuple[str, Path]]) -> None:
        self.files = files
        self.paths = dict(files)
        self.digests = {rel: file_digest(path) for rel, path in files}
        # For sorting imports: the chain's own modules are first-party.
        self.top_level = _top_level_names(files)


@dataclass(frozen=True)
class _Rendered:
    files: dict[str, str]  # relative path -> text, chainlet.json included
    code_version: str
    data: list[tuple[str, Path]] = field(default_factory=list)  # copied to data/: (relative path, file)
    packages: list[tuple[str, Path]] = field(default_factory=list)  # copied to packages/, likewise


def _render_chainlet(
    env: jinja2.Environment,
    chain: Chain,
    spec: ChainletSpec,
    source: _ChainSource,
    src: _SourceTree,
    out_dir: Path,
    base_image: str,
    chain_file: str,
) -> _Rendered:
    head = header(source.given, out_dir, spec.name)
    package_roots = _package_roots(spec, source, out_dir)
    first_party = (
        src.top_level
        | {STUBS_PACKAGE}
        | {name for _, files in package_roots for name in _top_level_names(files)}
    )
    stubs = _render_stubs(env, chain, spec, source, first_party, head)
    server, server_modules = _render_server(
        env, chain, spec, source, first_party, stubs, head, [name for name, _ in package_roots]
    )
    used_first_party = set().union(server_modules, *(s.imported_modules for s in stubs)) & first_party
    files = {
        "server.py": server,
        f"{STUBS_PACKAGE}/__init__.py": env.get_template("stubs_init.py.jinja").render(
            header=head, name=spec.name, stubs=[(s.module, s.chainlet) for s in stubs]
        ),
        **{f"{STUBS_PACKAGE}/{stub.module}.py": stub.text for stub in stubs},
        "requirements.txt": _render_requirements(env, spec, source, head),
        "Dockerfile": env.get_template("Dockerfile.jinja").render(
            header=head,
            name=spec.name,
            base_image=spec.remote_config.docker_image.base_image_reference or base_image,
            apt_requirements=spec.remote_config.docker_image.apt_requirements,
            build_commands=spec.remote_config.build_commands,
            has_data=bool(spec.remote_config.docker_image.data_dir),
            package_roots=[name for name, _ in package_roots],
        ),
        "ruff.toml": env.get_template("ruff.toml.jinja").render(
            header=head, first_party=sorted(used_first_party)
        ),
    }
    data = _data_files(spec, source)
    if data:
        # The data's content goes into the code version through this manifest of its digests.
        files["data.json"] = json.dumps({rel: file_digest(path) for rel, path in data}, indent=2) + "\n"
    packages = [(f"{name}/{rel}", path) for name, found in package_roots for rel, path in found]
    if packages:
        # As data.json: the packages' content is part of the chainlet's code version.
        files["packages.json"] = (
            json.dumps({rel: file_digest(path) for rel, path in packages}, indent=2) + "\n"
        )
    version = code_version(chain, spec, files, head, src.paths, src.digests)
    descriptor = chainlet_descriptor(
        chain,
        spec,
        code_version=version,
        module=source.import_name(spec.cls.__module__),
        chain_file=chain_file,
    )
    files[DESCRIPTOR] = descriptor_text(descriptor)
    return _Rendered(files, version, data, packages)


def _render_stubs(
    env: jinja2.Environment,
    chain: Chain,
    spec: ChainletSpec,
    source: _ChainSource,
    first_party: set[str],
    head: str,
) -> list[StubModule]:
    stubs: list[StubModule] = []
    # Two parameters may depend on one chainlet: one stub serves both.
    for name in _unique_dependencies(spec):
        # Names differing only in case or punctuation (Text-Gen, TextGen) must not collide.
        module, class_name = stub_module_name(name), stub_class_name(name)
        while module in {s.module for s in stubs}:
            module += "_"
        while class_name in {s.class_name for s in stubs}:
            class_name += "_"
        stubs.append(
            render_stub(
                env,
                chain.get(name),
                module=module,
                class_name=class_name,
                import_name=source.import_name,
                first_party=first_party,
                header=head,
            )
        )
    return stubs


def _render_server(
    env: jinja2.Environment,
    chain: Chain,
    spec: ChainletSpec,
    source: _ChainSource,
    first_party: set[str],
    stubs: list[StubModule],
    head: str,
    package_roots: list[str],
) -> tuple[str, set[str]]:
    qualname = spec.cls.__qualname__
    if "<locals>" in qualname:
        raise ChainsUsageError(
            f"chainlet {spec.name}: {qualname} is defined inside a function; define chainlet classes "
            "at module level so the generated server can import them"
        )
    module = source.import_name(spec.cls.__module__)
    imports = Imports(first_party)
    root = module.partition(".")[0]
    stub_names = {s.class_name for s in stubs}
    if root in _SERVER_NAMES or root in stub_names:
        alias = module.replace(".", "_") + "_module"
        imports.add_module(module, alias)
        chainlet_ref = f"{alias}.{qualname}"
    else:
        imports.add_module(module)
        chainlet_ref = f"{module}.{qualname}"
    by_name: dict[str, str] = {}
    for dep, stub in zip(_unique_dependencies(spec), stubs, strict=True):
        imports.add_from(f"{STUBS_PACKAGE}.{stub.module}", stub.class_name)
        by_name[dep] = stub.class_name
    # DockerImage(data_dir=...) is copied to data/ beside this server (see _data_files).
    data_arg = ['    data_dir=_HERE / "data",'] if spec.remote_config.docker_image.data_dir else []
    if spec.dependencies:
        app_lines = [
            "app = create_app(",
            f"    {chainlet_ref},",
            "    stubs={",
            *(f"        {json.dumps(d.param)}: {by_name[d.name]}," for d in spec.dependencies),
            "    },",
            *data_arg,
            ")",
        ]
    elif data_arg:
        app_lines = ["app = create_app(", f"    {chainlet_ref},", *data_arg, ")"]
    else:
        app_lines = bracketed("app = create_app(", [chainlet_ref], ")", indent="")
    text = env.get_template("server.py.jinja").render(
        header=head,
        name=spec.name,
        chain=chain.name,
        late_imports=_after_code(imports.lines()),
        app_lines=app_lines,
        package_roots=package_roots,
    )
    return text, imports.top_modules()


def _unique_dependencies(spec: ChainletSpec) -> list[str]:
    return list(dict.fromkeys(dep.name for dep in spec.dependencies))


def _after_code(lines: list[str]) -> list[str]:
    """Import lines that follow the ``sys.path`` set-up, each marked as meant to be there."""
    return [f"{line}  # noqa: E402" if line.startswith(("import ", "from ")) else line for line in lines]


def _render_requirements(env: jinja2.Environment, spec: ChainletSpec, source: _ChainSource, head: str) -> str:
    image = spec.remote_config.docker_image
    requirements = [r.strip() for r in image.pip_requirements]
    shown_file = None
    if image.requirements_file:
        given = Path(image.requirements_file)
        path = given if given.is_absolute() else source.file.parent / given
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ChainsUsageError(
                f"chainlet {spec.name}: DockerImage(requirements_file={image.requirements_file!r}) cannot be "
                f"read ({exc.strerror}); the path is relative to the chain file's folder"
            ) from None
        shown_file = given.name if given.is_absolute() else given.as_posix()
        requirements += [line.rstrip() for line in text.splitlines() if line.strip()]
    return env.get_template("requirements.txt.jinja").render(
        header=head, name=spec.name, requirements=requirements, requirements_file=shown_file
    )


def _data_files(spec: ChainletSpec, source: _ChainSource) -> list[tuple[str, Path]]:
    """The files of ``DockerImage(data_dir=...)``, relative to it; the path is relative to the
    chain file's folder unless absolute (``chains.make_abs_path_here`` makes one)."""
    given = spec.remote_config.docker_image.data_dir
    if not given:
        return []
    folder = Path(given) if Path(given).is_absolute() else source.file.parent / given
    if not folder.is_dir():
        raise ChainsUsageError(
            f"chainlet {spec.name}: DockerImage(data_dir={given!r}) is not a folder; the path is relative to "
            "the chain file's folder, or absolute (chains.make_abs_path_here)"
        )
    return sorted((path.relative_to(folder).as_posix(), path) for path in folder.rglob("*") if path.is_file())


def _package_roots(
    spec: ChainletSpec, source: _ChainSource, out_dir: Path
) -> list[tuple[str, list[tuple[str, Path]]]]:
    """Each folder of ``DockerImage(external_package_dirs=...)``: the name of its copy under
    packages/ (its own, made unique) and its files, chosen as the chain's folder's are."""
    roots: list[tuple[str, list[tuple[str, Path]]]] = []
    for folder in package_dirs(spec.name, spec.remote_config.docker_image, source.file.parent):
        files = source_files(folder, skip=[out_dir])
        check_source_size(folder, files, max_source_bytes())
        # Two folders may share a name (lib/ of two projects); the copy's name only has to be unique.
        # The name goes into a Dockerfile's ENV line unquoted: keep it to a safe alphabet.
        base = re.sub(r"[^A-Za-z0-9._-]", "_", folder.name) or "packages"
        taken = {name for name, _ in roots}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        roots.append((name, files))
    return roots


def _replace_directory(directory: Path, rendered: _Rendered, src: _SourceTree) -> None:
    """Write the chainlet's files to a staging directory, then swap it in for the old one."""
    _check_replaceable(directory)
    staging = directory.with_name(f".{directory.name}.staging")
    retired = directory.with_name(f".{directory.name}.old")
    for leftover in (staging, retired):
        if leftover.exists():
            shutil.rmtree(leftover)
    staging.mkdir()
    for rel, text in rendered.files.items():
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
    for rel, file in src.files:
        target = staging / "src" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    for folder, copies in (("data", rendered.data), ("packages", rendered.packages)):
        for rel, file in copies:
            target = staging / folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
    if directory.exists():
        directory.rename(retired)
    staging.rename(directory)
    if retired.exists():
        shutil.rmtree(retired)


def _check_replaceable(directory: Path) -> None:
    if directory.exists() and not _is_generated(directory):
        raise ChainsUsageError(
            f"{directory} exists and was not generated by chains (it has no {DESCRIPTOR}); "
            "remove it or choose another --out"
        )


def _is_generated(directory: Path) -> bool:
    try:
        return read_descriptor((directory / DESCRIPTOR).read_text(encoding="utf-8")) is not None
    except OSError:
        return False


def _remove_stale(out_dir: Path, chain: str, current: set[str]) -> None:
    """Remove directories of this chain's chainlets that no longer exist (renamed, dropped)."""
    for directory in sorted(out_dir.iterdir()):
        if directory.name in current or not directory.is_dir():
            continue
        try:
            descriptor = read_descriptor((directory / DESCRIPTOR).read_text(encoding="utf-8"))
        except OSError:
            continue
        if descriptor is not None and descriptor.get("chain") == chain:
            shutil.rmtree(directory)
