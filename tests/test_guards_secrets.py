"""Issue 12, promise 9 (secrets): credentials never appear in output, reports, errors or logs —
also when they are embedded in the endpoint URL (http://user:secret@host)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from croupier.cli import main
from croupier.config import Config, S3Options, Secret
from croupier.errors import CroupierError
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.redact import redact, split_userinfo

KEY, SECRET = "AKIAFAKEKEY0042", "fake+secret/value-7Qx"
ENV_SECRET = "env-only-secret-9Zk"


def _with_userinfo(endpoint: str) -> str:
    scheme, _, host = endpoint.partition("://")
    return f"{scheme}://{KEY}:{SECRET.replace('/', '%2F').replace('+', '%2B')}@{host}"


def _clean(*texts: str) -> None:
    for text in texts:
        for secret in (SECRET, SECRET.replace("/", "%2F").replace("+", "%2B"), ENV_SECRET):
            assert secret not in text


def test_redact_and_split() -> None:
    assert redact("error at http://ak:sk@host:9000/b/k, s3://bucket/a@b") == "error at http://***@host:9000/b/k, s3://bucket/a@b"
    assert split_userinfo("http://ak:s%2Fk@host:9000/x") == ("http://host:9000/x", "ak", "s/k")
    assert split_userinfo("https://host") == ("https://host", None, None)


def test_endpoint_credentials_become_secrets() -> None:
    options = S3Options(endpoint="http://ak:sk-value@host:9000")
    assert options.endpoint == "http://host:9000"
    assert options.access_key_id == Secret("ak") and options.secret_access_key == Secret("sk-value")
    config = Config.from_env({"AWS_ENDPOINT_URL": f"http://ak:{ENV_SECRET}@host:1", "AWS_SECRET_ACCESS_KEY": ENV_SECRET})
    _clean(repr(config), str(config), repr(config.s3))


@pytest.mark.s3
def test_cli_never_prints_secrets(seaweedfs, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """A whole gensort -> sort -> valsort chain, a failing job and a usage error, with the secret in
    the endpoint URL and in the environment: no captured text or report holds it."""
    caplog.set_level(logging.DEBUG)
    prefix = f"s3://croupier-test/secrets-{uuid.uuid4().hex[:8]}"
    env = {"AWS_ACCESS_KEY_ID": "env-key", "AWS_SECRET_ACCESS_KEY": ENV_SECRET, "AWS_ENDPOINT_URL": None}
    endpoint = ("--s3-endpoint", _with_userinfo(seaweedfs.endpoint))
    report = tmp_path / "r.json"
    runner = CliRunner(env=env)
    outputs = []
    for args in (
        ["gensort", f"{prefix}/in", "--size", "50kB", "--parts", "2", "--report", str(report)],
        ["sort", f"{prefix}/in", f"{prefix}/out", "-p", "2", "--report", str(report), "-v"],
        ["valsort", f"{prefix}/out", "--input", f"{prefix}/in"],
        ["sort", f"{prefix}/missing", f"{prefix}/out2", "-v"],
        ["sort", f"{prefix}/in", f"{prefix}/out3", "--budget", "-1"],
        ["--s3-endpoint", f"ftp://{KEY}:{SECRET}@host", "clean", prefix],
    ):
        result = runner.invoke(main, ["--concurrency", "2", "--no-progress", "--no-calibrate", *endpoint, *args])
        outputs.append(result.output + (repr(result.exception) if result.exception else ""))
        _clean(outputs[-1], report.read_text() if report.exists() else "")
    assert [o for o in outputs[:3] if "Error" in o] == []
    assert "no input objects" in outputs[3] and "Invalid value for '--budget'" in outputs[4]
    _clean(caplog.text)


@pytest.mark.s3
def test_python_api_errors_and_reports_hold_no_secret(seaweedfs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix = f"s3://croupier-test/secrets-api-{uuid.uuid4().hex[:8]}"
    config = Config(concurrency=2, s3=S3Options(endpoint=_with_userinfo(seaweedfs.endpoint), allow_http=True))
    gen = gensort(f"{prefix}/in", 20_000, 2, config)
    srt = sort(f"{prefix}/in", f"{prefix}/out", 2, config)
    _clean(repr(config), gen.render(), srt.render(), str(gen.to_dict()), str(srt.to_dict()))
    with pytest.raises(CroupierError) as failure:
        sort(f"{prefix}/nothing-here", f"{prefix}/o2", 2, config)
    _clean(str(failure.value), repr(failure.value))
    bad = Config(concurrency=2, s3=S3Options(endpoint=f"http://{KEY}:{SECRET}@127.0.0.1:1", allow_http=True), request_timeout=1.0)
    with pytest.raises(CroupierError) as failure:
        sort(f"{prefix}/in", f"{prefix}/o3", 2, bad.with_(retry=bad.retry.__class__(attempts=1)))
    _clean(str(failure.value), repr(failure.value))
