"""The cached environments of tests/exports/truss_env.py survive test runs that start together."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]

# Builds one environment (pip installing pip, already there: no index needed), counting the
# environments it creates in the file argv[2].
_BUILD = """
import sys, venv
from pathlib import Path

from tests.exports import truss_env

create = venv.EnvBuilder.create


def counted(self, env_dir):
    with open(sys.argv[2], "a") as log:
        log.write(f"{env_dir}\\n")
    create(self, env_dir)


venv.EnvBuilder.create = counted
print(truss_env._environment(Path(sys.argv[1]), ["--no-index", "pip"], "TEST"))
"""


def test_runs_started_together_build_one_environment_and_all_use_it(tmp_path: Path) -> None:
    home, log = tmp_path / "cache" / "env", tmp_path / "builds.log"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILD, str(home), str(log)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    assert {out.strip() for out, _ in outputs} == {str(home / "bin" / "python")}
    # One run built it, the others waited for it; it was built elsewhere and linked into place.
    assert len(log.read_text().splitlines()) == 1
    built = Path(log.read_text().strip())
    assert home.is_symlink() and home.resolve() == built.resolve()
    assert sorted(p.name for p in home.parent.iterdir()) == sorted(["env", "env.lock", built.name])
    answer = subprocess.run(
        [str(home / "bin" / "python"), "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert answer.stdout.strip() == "True"
