"""Issue 12, promise 6 (signals), with real processes: SIGTERM is handled like Ctrl-C (temporary
objects removed; exit status 143, Ctrl-C 130), in the CLI and in a Python program using the API;
workers whose driver died exit quietly; after SIGKILL of every process, ``croupier clean``
removes everything the run left. On the local folder and on SeaweedFS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from croupier.config import Config
from croupier.jobs.gensort import gensort
from croupier.storage import open_store

from .conftest import BUCKET, sigint_default

CLI = [sys.executable, "-m", "croupier.cli", "--no-calibrate", "--no-progress", "--concurrency", "2"]
SIZE = 100_000_000  # a sort of a few seconds on two cores: long enough to be stopped half-way


#: A folder of the test session's for the killed processes' temporary files (TMPDIR): a process
#: killed by a signal leaves its multiprocessing folder (``pymp-*``), which belongs there, not in /tmp.
_TMPDIR: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _subprocess_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> None:
    _TMPDIR[:] = [str(tmp_path_factory.mktemp("killed-tmp"))]


def _env(config: Config, **extra: str) -> dict[str, str]:
    env = dict(os.environ, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="guards-secret", CROUPIER_CALIBRATION="off", TMPDIR=_TMPDIR[0], **extra)
    if config.s3.endpoint:
        env["AWS_ENDPOINT_URL"] = config.s3.endpoint
    return env


def _keys(url: str, config: Config) -> list[str]:
    return sorted(o.key for o in open_store(url, config).list())


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=sigint_default)


def _wait_for_work(out: str, config: Config, proc: subprocess.Popen[str], extra: float) -> None:
    """Until the run holds its lease and has written exchange objects under ``out`` (its map is
    under way), then ``extra`` seconds more. Warm workers make a small sort quick: signal early."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        temps = [k for k in _keys(out, config) if k.startswith("_croupier_tmp/")]
        if any(k.endswith("/_lease") for k in temps) and len(temps) >= 3:
            time.sleep(extra)
            return
        time.sleep(0.05)
    pytest.fail(f"the run never started its work (exit {proc.poll()}): {proc.communicate()[1][-2000:]}")


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The module's store kinds, module-scoped: the sort input is generated once per store."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def shared_input(backend_kind: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    """The sorts' input (SIZE bytes in 4 parts), generated once per store for the module's tests:
    each only reads it, and writes its output and temporaries under its own root."""
    if backend_kind == "local":
        url, config = tmp_path_factory.mktemp("signals-input").as_uri(), Config(concurrency=2, function_memory=4 << 30)
    else:
        url, config = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}", request.getfixturevalue("s3_config")
    gensort(f"{url}/in", SIZE, 4, config)
    yield f"{url}/in"
    if backend_kind == "s3":
        open_store(url, config).delete_prefix()


@pytest.fixture
def sort_input(store_env: tuple[str, Config], shared_input: str) -> tuple[str, Config, str]:
    """(this test's root, for the output; config; the shared input's URL)."""
    url, config = store_env
    return url, config, shared_input


@pytest.mark.parametrize(("sig", "status", "group"), [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)], ids=["term", "ctrl-c-group"])
def test_cli_stopped_by_a_signal_cleans_up(sort_input: tuple[str, Config, str], sig: int, status: int, group: bool) -> None:
    url, config, source = sort_input
    proc = _start([*CLI, "sort", source, f"{url}/out"], _env(config))
    _wait_for_work(f"{url}/out", config, proc, 0.05)
    os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    assert "Traceback" not in err and ("terminated" if status == 143 else "interrupted") in err
    assert _keys(f"{url}/out", config) == []  # temporaries, lease, writer lock and parts: all gone


PROGRAM = textwrap.dedent(
    """
    import sys
    from croupier import Config
    from croupier.jobs.sort import sort

    if __name__ == "__main__":
        sort(sys.argv[1], sys.argv[2], None, Config.from_env(concurrency=2))
        print("finished")
    """
)


def test_python_api_stopped_by_sigterm_cleans_up(sort_input: tuple[str, Config, str], tmp_path: Path) -> None:
    url, config, source = sort_input
    script = tmp_path / "job.py"
    script.write_text(PROGRAM)
    proc = _start([sys.executable, str(script), source, f"{url}/out"], _env(config))
    _wait_for_work(f"{url}/out", config, proc, 0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err  # ended by SIGTERM, as without Croupier: status 143
    assert "finished" not in out and "Traceback" not in err
    assert _keys(f"{url}/out", config) == []


def test_sigkill_of_every_process_then_clean(sort_input: tuple[str, Config, str]) -> None:
    """SIGKILL the driver: its workers exit by themselves, quietly; kill what is left too; once the
    run's lease has expired, ``croupier clean`` removes every object the run left, partial ones too."""
    url, config, source = sort_input
    env = _env(config, CROUPIER_LEASE="1s")  # as test_clean_lease's killed CLI sort: a lease renewed every 1/3 s
    proc = _start([*CLI, "sort", source, f"{url}/out"], env)
    _wait_for_work(f"{url}/out", config, proc, 0.05)  # as the other stops: the shared, warm input sorts fast
    proc.kill()  # the driver only: the workers must notice and go
    _, err = proc.communicate(timeout=30)  # returns once every worker closed the inherited stderr
    assert "Traceback" not in err, err
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything of the session still alive (none expected)
    except ProcessLookupError:
        pass
    left = _keys(f"{url}/out", config)
    assert any(k.startswith("_croupier_tmp/") for k in left) and "_croupier_lock" in left
    assert "_SUCCESS" not in left
    time.sleep(2.2)  # the 1 s lease lapses, and is dead a period later
    clean = subprocess.run([*CLI, "clean", f"{url}/out"], env=env, capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0, clean.stderr
    assert "deleted run" in clean.stdout and "writer lock of dead run" in clean.stdout, clean.stdout
    assert _keys(f"{url}/out", config) == []
