"""Config, units, secrets and run reports."""

from __future__ import annotations

import os
import pickle

import pytest

from croupier.config import Config, S3Options, Secret
from croupier.errors import ConfigError
from croupier.report import RunReport, StageReport
from croupier.storage.stats import IOStats
from croupier.units import format_bytes, parse_duration, parse_size


def test_sizes_and_durations() -> None:
    assert parse_size("2GB") == 2_000_000_000
    assert parse_size("512 MiB") == 512 << 20
    assert parse_size("1e6") == 1_000_000
    assert parse_size(42) == 42
    assert parse_duration("250ms") == 0.25 and parse_duration("5m") == 300
    assert format_bytes(1536) == "1.5 KiB"
    with pytest.raises(ValueError, match="cannot read '2 parsecs' as a size"):
        parse_size("2 parsecs")


def test_credentials_never_print() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "verysecretvalue", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}
    config = Config.from_env(env)
    text = repr(config) + str(config.s3) + repr(pickle.loads(pickle.dumps(config)))
    assert "verysecretvalue" not in text and "AKIAEXAMPLEKEY" not in text
    assert config.s3.secret_access_key is not None and config.s3.secret_access_key.reveal() == "verysecretvalue"
    assert config.s3.allow_http


def test_config_validation_and_env() -> None:
    with pytest.raises(ConfigError, match="concurrency must be at least 1"):
        Config(concurrency=0)
    with pytest.raises(ConfigError, match="intermediate_format"):
        Config(intermediate_format="csv")
    config = Config.from_env({"CROUPIER_CONCURRENCY": "3", "CROUPIER_FUNCTION_MEMORY": "1GiB"})
    assert config.concurrency == 3 and config.function_memory == 1 << 30
    assert config.with_(concurrency=5).concurrency == 5
    assert S3Options.from_env({}).endpoint is None
    assert Secret("a") == Secret("a") and str(Secret("a")) == "Secret('***')"


def test_report_totals_and_render() -> None:
    io = IOStats()
    io.record("PUT", 100)
    io.record("GET", 40, requests=2)
    io.record_retry("GET")
    report = RunReport("sort", "run-1", [StageReport("map", 1.5, 4, io)], {"records": 7}, 2.0)
    data = report.to_dict()
    assert data["totals"] == {"bytes_read": 40, "bytes_written": 100, "requests": {"PUT": 1, "GET": 2}, "retries": 1}
    text = report.render()
    assert "map" in text and "records: 7" in text and "retried requests: 1" in text
    assert IOStats.from_dict(io.to_dict()).to_dict() == io.to_dict()
    assert io.minus(io.snapshot()).kinds == {}


def test_config_reads_the_aws_variables_as_the_cli_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFROMENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-from-env")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    config = Config()
    assert config.s3 == S3Options.from_env(dict(os.environ))
    assert config.s3.endpoint == "http://127.0.0.1:9" and config.s3.region == "eu-west-3"
    assert config.s3.secret_access_key is not None and config.s3.secret_access_key.reveal() == "secret-from-env"
    assert "secret-from-env" not in repr(config)


def test_report_says_when_the_model_is_far_off_and_what_to_do() -> None:
    near = RunReport("sort", "r", [StageReport("map", 3.0, 2, predicted={"seconds": 2.5, "profile": "local"})])
    assert near.model_check() == "model: stages measured 3.00 s, predicted 2.50 s with local"
    far = RunReport("sort", "r", [StageReport("map", 9.0, 2, predicted={"seconds": 1.0, "profile": "local"}), StageReport("reduce", 1.0, 2, predicted={"seconds": 1.0})])
    text = far.render()
    assert "5.0x off" in text and "croupier calibrate --store" in text
    short = RunReport("sort", "r", [StageReport("map", 0.5, 2, predicted={"seconds": 0.01})])
    assert "off" not in (short.model_check() or "")  # too short to judge
    assert RunReport("sort", "r", [StageReport("map", 1.0)]).model_check() is None
