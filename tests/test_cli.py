"""The croupier command: the TeraSort chain, exit codes, reports, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from croupier.cli import main
from croupier.config import Config
from croupier.storage import open_store
from tests.helpers import output_parts

TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "cli-test", "AWS_SECRET_ACCESS_KEY": "cli-test-secret"}


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner(env=env).invoke(main, ["--concurrency", "2", "--no-progress", *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_gensort_sort_valsort_chain_with_json_report(tmp_path: Path) -> None:
    inp, out, report = str(tmp_path / "in"), str(tmp_path / "out"), tmp_path / "r.json"
    code, text = run("gensort", inp, "--size", "300kB", "--parts", "3", "--seed", "9")
    assert code == 0 and "records: 3000" in text
    code, text = run("sort", inp, out, "--topology", "3", "--report", str(report))
    assert code == 0, text
    assert "map" in text and "reduce" in text and "PUT" in text
    data = json.loads(report.read_text())
    assert [s["name"] for s in data["stages"]] == ["sample", "map", "reduce", "driver"]
    assert data["stages"][1]["requests"]["PUT"] == 9 and data["summary"]["records"] == 3000
    code, text = run("valsort", out, "--input", inp)
    assert code == 0 and "validation passed" in text


def test_valsort_exits_nonzero_on_a_bad_output(tmp_path: Path) -> None:
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    assert run("gensort", inp, "--size", "100kB", "--parts", "1")[0] == 0
    assert run("sort", inp, out, "-p", "2")[0] == 0
    store = open_store(out, Config())
    first = output_parts(out, Config())[0]
    blob = bytearray(store.get(first))
    blob[50] ^= 1
    store.put(first, bytes(blob))
    code, text = run("valsort", out, "--input", inp)
    assert code != 0 and "validation FAILED" in text and "checksum" in text


def test_errors_are_clear_and_not_tracebacks(tmp_path: Path) -> None:
    code, text = run("sort", "ftp://x/y", str(tmp_path / "o"))
    assert code == 2 and "unsupported store URL scheme 'ftp'" in text and "Traceback" not in text
    code, text = run("sort", str(tmp_path / "missing"), str(tmp_path / "o"))
    assert code == 1 and "no input objects under" in text
    code, text = run("gensort", str(tmp_path / "g"), "--size", "lots")
    assert code == 2 and "cannot read 'lots' as a size" in text


def test_demo_runs_the_main_job(tmp_path: Path) -> None:
    code, text = run("demo", "--size", "2MB", "--dir", str(tmp_path / "demo"))
    assert code == 0, text
    assert "validation passed" in text and "sorted 20,000 records" in text
    assert not (tmp_path / "demo").exists()


def test_s3_endpoint_flag_reaches_the_store(seaweedfs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import uuid

    prefix = f"s3://croupier-test/cli-{uuid.uuid4().hex[:8]}"
    s3 = ("--s3-endpoint", seaweedfs.endpoint)
    code, text = run(*s3, "gensort", f"{prefix}/in", "--size", "50kB", "--parts", "2", env=TEST_CREDENTIALS)
    assert code == 0, text
    code, text = run(*s3, "sort", f"{prefix}/in", f"{prefix}/out", "-p", "2", env=TEST_CREDENTIALS)
    assert code == 0, text
    code, text = run(*s3, "valsort", f"{prefix}/out", "--input", f"{prefix}/in", env=TEST_CREDENTIALS)
    assert code == 0 and "validation passed" in text
    assert "cli-test-secret" not in text
    code, text = run(*s3, "--s3-anonymous", "valsort", f"{prefix}/out")
    assert code == 0 and "validation passed" in text


def test_version() -> None:
    import croupier

    out = CliRunner().invoke(main, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"croupier {croupier.__version__}"


def test_a_forced_fast_tier_that_nobody_answers_is_said_on_stderr(tmp_path: Path) -> None:
    """--tier fast with a Redis address where nothing listens: the run cannot open its fast-tier
    prefix and runs again on the slow tier, the sort succeeds, and stderr says the fast tier was
    not used and why."""
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    assert run("gensort", inp, "--size", "200kB", "--parts", "2")[0] == 0
    result = CliRunner().invoke(main, ["--concurrency", "2", "--no-progress", "--fast-tier", f"redis://127.0.0.1:{port}/x", "--tier", "fast", "sort", inp, out], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"warning: the fast tier redis://127.0.0.1:{port}/0/x failed" in result.stderr and "nothing answers at that address" in result.stderr, result.stderr
    assert "the job ran again with every exchange on the slow tier" in result.stderr, result.stderr
    assert "warning:" not in result.stdout


def test_fast_tier_spills_are_warned_about_with_their_count_and_first_error() -> None:
    from croupier.cli import fast_tier_warnings

    assert fast_tier_warnings({"records": 3}) == []
    (warning,) = fast_tier_warnings({"fast_tier_spills": {"senders": {"map": 3, "s1": 2}, "first_error": "StoreFullError: Redis is full"}})
    assert warning == "5 producer(s) could not write to the fast tier and wrote to the slow tier instead (first: StoreFullError: Redis is full)"
