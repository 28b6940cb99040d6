"""Config, units, secrets and run reports."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

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


def test_report_says_which_stages_ran_in_cold_functions() -> None:
    """A stage whose phases faulted in about as much fresh memory as their data ran in functions
    that were not warm yet: the model check names it (slower than predicted, and the fit does not
    learn from it), and judges the model on the warm stages only, so a slow cold first run is no
    reason to recalibrate; a phase that touched a little, or an older report without the figure,
    is warm."""
    cold = StageReport("scan", 2.5, 2, phases={"read:parquet": [20e6, 2.2, 0.0, 2.0, 24e6], "hash_aggregate": [20e6, 0.1, 0.0, 2.0, 3e5]}, predicted={"seconds": 1.1, "profile": "local"})
    warm = StageReport("final", 0.1, 2, phases={"hash_aggregate": [1e6, 0.05, 0.0, 2.0, 3e5], "write:result": [1e3, 0.01, 0.0, 2.0]}, predicted={"seconds": 0.1})
    check = RunReport("q", "r", [cold, warm]).model_check() or ""
    assert check.startswith("model: stages measured 2.60 s, predicted 1.20 s with local; scan ran in functions still faulting their memory in (23.2 MiB fresh)")
    assert "off" not in check and cold.cold and not warm.cold
    assert "faulting" not in (RunReport("q", "r", [warm]).model_check() or "")
    slow = StageReport("scan", 2.5, 2, phases={"read:parquet": [20e6, 2.2, 0.0, 2.0, 3e5]}, predicted={"seconds": 1.1, "profile": "local"})
    assert "2.2x off" in (RunReport("q", "r", [slow, warm]).model_check() or "")  # warm and as slow: the profile is off

def test_a_run_report_round_trips_and_draws_a_timeline(tmp_path: Path) -> None:
    import croupier.frame as cf
    import polars as pl

    from croupier.timeline import task_rows

    for i in range(3):
        pl.DataFrame({"k": [i, 1, 2] * 50, "x": [1.0, 2.0, 3.0] * 50}).write_parquet(tmp_path / f"t-{i}.parquet")
    frame = cf.scan_parquet(str(tmp_path / "t-*.parquet"), config=Config(concurrency=2, tmp_url=(tmp_path / "tmp").as_uri())).group_by("k").agg(cf.col("x").sum())
    text = frame.explain(analyze=True, plot=tmp_path / "timeline.png")
    assert "timeline of" in text and (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = frame.last_run.report  # type: ignore[union-attr]
    rows = task_rows(report)
    assert len(rows) == sum(s.tasks for s in report.stages) and all(0 <= a <= b for _, _, a, b, _ in rows)
    assert any(any(k.startswith("read:") for k in ph) for *_, ph in rows)
    report.write_json(str(tmp_path / "run.json"))
    back = RunReport.read_json(str(tmp_path / "run.json"))
    assert back.to_dict() == json.loads(json.dumps(report.to_dict(), default=str))
    from click.testing import CliRunner

    from croupier.cli import main

    out = CliRunner().invoke(main, ["report", str(tmp_path / "run.json"), "--plot", str(tmp_path / "again.svg")])
    assert out.exit_code == 0, out.output
    assert report.run_id in out.output and (tmp_path / "again.svg").read_text().lstrip().startswith("<?xml")


def test_config_reads_the_calibration_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CROUPIER_CALIBRATION", "off")
    monkeypatch.setenv("CROUPIER_PROFILE_CACHE", str(tmp_path))
    config = Config()
    assert config.calibration == "off" and config.profile_cache == str(tmp_path)
