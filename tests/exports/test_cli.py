"""The export targets through the command line: push --dry-run --out, and generate --k8s."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from click.testing import CliRunner

from chains.cli import main
from tests.exports.conftest import CHAINS


def test_push_writes_each_export(tmp_path: Path) -> None:
    with contextlib.chdir(tmp_path):
        for target, marker in (("kubernetes", "kustomization.yaml"), ("compose", "compose.yaml")):
            result = CliRunner().invoke(
                main,
                ["push", str(CHAINS["hello"]), "--target", target, "--dry-run", "--out", target, "--json"],
            )
            assert result.exit_code == 0, result.output
            report = json.loads(result.output)
            assert report["target"] == target and report["name"] == "hello"
            assert (tmp_path / target / marker).is_file()


def test_export_without_out_says_how(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["push", str(CHAINS["hello"]), "--target", "kubernetes"])
    assert result.exit_code == 1
    assert "add --dry-run --out DIR" in result.output


def test_bad_registry_is_reported(tmp_path: Path) -> None:
    args = ["push", str(CHAINS["hello"]), "--target", "kubernetes", "--dry-run", "--out", str(tmp_path / "k")]
    result = CliRunner().invoke(main, [*args, "--registry", "Not Valid"])
    assert result.exit_code == 1
    assert "is not an image prefix" in result.output


def test_generate_k8s_writes_manifests_beside_the_code(tmp_path: Path) -> None:
    with contextlib.chdir(tmp_path):
        result = CliRunner().invoke(main, ["generate", str(CHAINS["hello"]), "--out", "build", "--k8s"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "build" / "Greeter" / "server.py").is_file()
    manifests = tmp_path / "build" / "kubernetes"
    assert (manifests / "kustomization.yaml").is_file()
    readme = (manifests / "README.md").read_text()
    assert " ../Greeter " in readme
    assert "chains generate" in (manifests / "hello-greeter.yaml").read_text().splitlines()[1]


def test_model_url_reaches_the_truss_export_and_no_other_target(tmp_path: Path) -> None:
    url = "https://model-ab12cd.api.baseten.co/environments/production/predict"
    base = ["push", str(CHAINS["hello"]), "--dry-run", "--out", str(tmp_path / "t")]
    result = CliRunner().invoke(main, [*base, "--target", "truss", "--model-url", f"Greeter={url}"])
    assert result.exit_code == 0, result.output
    env = (tmp_path / "t" / "Hello" / "config.yaml").read_text()
    assert "model-ab12cd.api.baseten.co" in env and "baseten_api_key" in env
    wrong = CliRunner().invoke(main, [*base, "--target", "compose", "--model-url", f"Greeter={url}"])
    assert wrong.exit_code == 1 and "--model-url is for the truss target" in wrong.output
    bare = CliRunner().invoke(main, [*base, "--target", "truss", "--model-url", "Greeter"])
    assert bare.exit_code == 1 and "--model-url takes NAME=URL, got 'Greeter'" in bare.output
