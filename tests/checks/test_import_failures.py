"""A chain file that cannot be imported: the cause first, in the user's own file and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import chains
from chains.loader import load_chain
from chains.requirements_scan import chainlets_requiring, distribution_name


def _write(folder: Path, source: str) -> Path:
    path = folder / "chain.py"
    path.write_text(textwrap.dedent(source))
    return path


def _failure(path: Path) -> str:
    with pytest.raises(chains.ChainsUsageError) as info:
        load_chain(path)
    return str(info.value)


def test_a_syntax_error_leads_with_the_users_line_and_no_loader_frame(tmp_path: Path) -> None:
    source = "import chains\n\nclass A(chains.ChainletBase):\n    def run_remote(self) -> str\n"
    path = _write(tmp_path, source)
    text = _failure(path)
    first = text.splitlines()[0]
    assert first.startswith(f"{path}, line 4: SyntaxError:")
    assert "loader.py" not in text


def test_an_exception_at_import_names_the_users_line_first(tmp_path: Path) -> None:
    path = _write(tmp_path, "import chains\n\nx = 1\nraise RuntimeError('boom at import')\n")
    text = _failure(path)
    assert text.splitlines()[0].endswith("RuntimeError: boom at import (chain.py, line 4)")
    assert "loader.py" not in text and "importlib" not in text


def test_a_package_only_one_image_has_names_the_chainlet_and_the_rule(tmp_path: Path) -> None:
    (tmp_path / "gpu-requirements.txt").write_text("# for the model\nTorch_Not_Here>=2.0\n")
    path = _write(
        tmp_path,
        """
        import chains
        import torch_not_here

        class Model(chains.ChainletBase):
            remote_config = chains.RemoteConfig(
                docker_image=chains.DockerImage(requirements_file="gpu-requirements.txt")
            )

            async def run_remote(self) -> str:
                return "x"
        """,
    )
    text = _failure(path)
    assert "No module named 'torch_not_here'" in text.splitlines()[0]
    assert "in the requirements of chainlet Model: only its image has it" in text
    assert "inside the chainlet's methods" in text
    assert "pip install 'Torch_Not_Here>=2.0'" in text


def test_a_missing_package_no_chainlet_lists_gets_no_rule(tmp_path: Path) -> None:
    path = _write(tmp_path, "import chains\nimport surely_not_installed_pkg\n")
    text = _failure(path)
    assert "No module named 'surely_not_installed_pkg'" in text
    assert "requirements of chainlet" not in text


def test_requirement_names_are_compared_normalized(tmp_path: Path) -> None:
    assert distribution_name("Scikit.Learn[extra]>=1") == "scikit_learn"
    assert distribution_name("--index-url x") is None
    path = _write(
        tmp_path,
        """
        class A:
            image = DockerImage(pip_requirements=["my-pkg==1"])

        class B:
            image = DockerImage(pip_requirements=["other"])
        """,
    )
    assert chainlets_requiring("my_pkg", path) == {"A": "my-pkg==1"}
