"""Every Python example of the README runs as written, as a script (no ``__main__`` guard), and a
script without a guard that starts worker processes runs its body once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def _run(script: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a file in ``cwd`` with this interpreter (no calibration, a private profile cache)."""
    path = cwd / f"example-{abs(hash(script)) % 10**8}.py"
    path.write_text(script)
    env = dict(os.environ, CROUPIER_CALIBRATION="off", CROUPIER_PROFILE_CACHE=str(cwd / "profiles"))
    return subprocess.run([sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for all examples, as a reader trying them one after another would use."""
    return tmp_path_factory.mktemp("readme")


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_readme_python_example_runs_as_a_script(index: int, workdir: Path) -> None:
    done = _run(BLOCKS[index], workdir)
    assert done.returncode == 0, f"README example {index + 1} failed:\n{BLOCKS[index]}\n--- stderr ---\n{done.stderr[-3000:]}"


def test_a_script_without_a_main_guard_runs_its_body_once(tmp_path: Path) -> None:
    script = (
        "import polars as pl\n"
        "import croupier.frame as cf\n"
        "from croupier import Config\n"
        "print('BODY RAN')\n"
        "for i in range(3):\n"
        "    pl.DataFrame({'k': [i, 1, 2], 'x': [1.0, 2.0, 3.0]}).write_parquet(f't-{i}.parquet')\n"
        "print(cf.scan_parquet('t-*.parquet', config=Config(concurrency=2)).group_by('k').agg(cf.col('x').sum()).sort('k').collect()['x'].to_list())\n"
    )
    done = _run(script, tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["BODY RAN", "[1.0, 7.0, 10.0]"], done.stdout  # k=0: 1; k=1: 2+1+2+2; k=2: 3+3+1+3
