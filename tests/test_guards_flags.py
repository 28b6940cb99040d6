"""Issue 12, promise 8 (flags and options): every invalid value is a usage error (exit 2, no
traceback) found before any work; the global forcing options reach every exchange of a job; the
global options may follow the subcommand; the selector never picks a P whose tasks cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from croupier.cli import main
from croupier.config import Config
from croupier.errors import ConfigError
from croupier.model.profile import StorageProfile
from croupier.model.selector import choose
from croupier.storage import open_store
from tests.helpers import output_parts


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--no-progress", "--no-calibrate", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


BAD = [
    (["--concurrency", "0", "clean", "{d}"], "--concurrency"),
    (["--concurrency", "-2", "clean", "{d}"], "--concurrency"),
    (["--workers", "0", "clean", "{d}"], "--workers"),
    (["sort", "{d}/in", "{d}/out", "--workers", "0"], "--workers"),
    (["sort", "{d}/in", "{d}/out", "-p", "-4"], "--workers"),
    (["--max-workers", "0", "clean", "{d}"], "--max-workers"),
    (["--function-memory", "lots", "clean", "{d}"], "cannot read 'lots' as a size"),
    (["--function-memory", "1MB", "clean", "{d}"], "too small"),
    (["--function-memory", "128MiB", "clean", "{d}"], "at least 256.0 MiB"),
    (["gensort", "{d}/g", "--size", "0"], "too small"),
    (["gensort", "{d}/g", "--size", "-5MB"], "--size"),
    (["gensort", "{d}/g", "--size", "1MB", "--parts", "0"], "--parts"),
    (["--topology", "4y3", "clean", "{d}"], "cannot read topology '4y3'"),
    (["--topology", "1x4", "clean", "{d}"], "cannot read topology"),
    (["sort", "{d}/in", "{d}/out", "--topology", "0"], "--topology"),
    (["--algorithm", "4-level", "clean", "{d}"], "--algorithm"),
    (["--workers", "4", "--topology", "3x3", "clean", "{d}"], "has 9 workers"),
    (["sort", "gs://bucket/in", "{d}/out"], "unsupported store URL scheme 'gs'"),
    (["--tmp", "ftp://host/x", "clean", "{d}"], "unsupported store URL scheme 'ftp'"),
    (["sql", "select 1 from t", "--table", "t=hdfs://x/y"], "unsupported store URL scheme 'hdfs'"),
    (["--s3-endpoint", "ftp://host", "clean", "{d}"], "--s3-endpoint"),
    (["clean", "{d}", "--older-than", "5 fortnights"], "cannot read '5 fortnights' as a duration"),
    (["clean", "{d}", "--older-than", "-5m"], "--older-than"),
    (["--budget", "-1", "clean", "{d}"], "--budget"),
    (["sort", "{d}/in", "{d}/out", "--budget", "-0.5"], "--budget"),
    (["explain", "--size", "1GB", "--budget", "0"], "--budget"),
    (["sort", "{d}/in", "{d}/out", "--report", "{d}/missing/r.json"], "does not exist"),
    (["gensort", "{d}/g", "--size", "1MB", "--report", "{d}"], "is a folder"),
    (["valsort", "{d}/g", "--report", "{d}/no/such/r.json"], "does not exist"),
    (["exchange-stats", "--workers", "0"], "--workers"),
    (["explain", "--size", "1GB", "--rows", "0"], "--rows"),
]


@pytest.mark.parametrize(("args", "says"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_invalid_values_are_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    code, text = invoke(*[a.format(d=tmp_path) for a in args])
    assert code == 2, text
    assert says in text and "Traceback" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing may be written before a usage error"


def test_global_options_after_the_subcommand(tmp_path: Path) -> None:
    """``croupier clean URL --concurrency 0`` is the same usage error as before the subcommand,
    and a valid one after it takes effect (here: --tmp is where the run's temporaries go)."""
    code, text = invoke("clean", str(tmp_path), "--concurrency", "0")
    assert code == 2 and "--concurrency" in text
    code, text = invoke("gensort", str(tmp_path / "in"), "--size", "200kB", "--parts", "2", "--concurrency", "2", "--function-memory", "1GiB")
    assert code == 0, text
    report = tmp_path / "r.json"
    code, text = invoke("sort", str(tmp_path / "in"), str(tmp_path / "out"), "--workers", "3", "--concurrency=2", "--tmp", str(tmp_path / "scratch"), "--report", str(report), "-v")
    assert code == 0, text
    assert json.loads(report.read_text())["summary"]["workers"] == 3
    assert (tmp_path / "scratch").is_dir() and not (tmp_path / "out" / "_croupier_tmp").exists()


def test_global_options_help_says_what_happens() -> None:
    code, text = invoke("--help")
    assert code == 0 and "default: concurrency" not in text
    code, text = invoke("sort", "--help")
    assert code == 0 and "default: concurrency" not in text and "selector picks P" in text


def test_global_forcing_reaches_sort(tmp_path: Path) -> None:
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    assert invoke("--concurrency", "2", "gensort", inp, "--size", "200kB", "--parts", "2")[0] == 0
    for args, workers, exchange in (
        (["--workers", "3"], 3, None),
        (["--topology", "2x2"], 4, "2-level"),
        (["--algorithm", "direct+wc", "--workers", "2"], 2, "direct+wc"),
    ):
        report = tmp_path / "r.json"
        code, text = invoke("--concurrency", "2", *args, "sort", inp, out, "--overwrite", "--report", str(report))
        assert code == 0, text
        summary = json.loads(report.read_text())["summary"]
        assert summary["workers"] == workers and len(output_parts(out, Config())) == workers
        if exchange:
            assert exchange in str(summary["exchange"]), summary["exchange"]


def _table(tmp_path: Path) -> str:
    path = tmp_path / "t.parquet"
    pl.DataFrame({"k": [i % 50 for i in range(4000)], "v": list(range(4000))}).write_parquet(path)
    return str(path)


def test_global_forcing_reaches_a_query(tmp_path: Path) -> None:
    """--workers and --topology force P of the query's group-by exchange: one output part per reducer."""
    table, out = _table(tmp_path), str(tmp_path / "out")
    expected = pl.read_parquet(table).group_by("k").agg(pl.col("v").sum().alias("s")).sort("k")
    for args, parts in ((["--workers", "3"], 3), (["--topology", "2x2"], 4), (["--workers", "5"], 5)):
        code, text = invoke("--concurrency", "2", *args, "sql", "select k, sum(v) as s from t group by k", "--table", f"t={table}", "--out", out, "--overwrite")
        assert code == 0, text
        files = output_parts(out, Config())
        assert len(files) == parts, files
        got = pl.concat([pl.read_parquet(Path(out) / f) for f in files]).sort("k")
        assert got.equals(expected)


def test_python_api_refuses_bad_forcing() -> None:
    for bad in ({"workers": 0}, {"concurrency": 0}, {"budget": -1.0}, {"topology": "4y3"}, {"algorithm": "4-level"}, {"function_memory": 128 << 20}, {"objective": "speed"}):
        with pytest.raises(ConfigError):
            Config(**bad)  # type: ignore[arg-type]


def test_selector_never_picks_a_p_whose_tasks_cannot_fit() -> None:
    profile = StorageProfile.load("local")
    from dataclasses import replace

    tight = replace(profile, function_memory=256 << 20)  # 32 MiB of data per task: P >= 32 for 1 GiB
    choice = choose(1 << 30, tight, max_workers=64)
    assert min(c.workers for c in choice.candidates) == 32 and choice.best.workers >= 32
    with pytest.raises(ConfigError, match="no P fits .* P must be at least 32"):
        choose(1 << 30, tight, max_workers=8)
    with pytest.raises(ConfigError, match="no P fits"):
        choose(1 << 30, tight, senders=4, buckets=8)


def test_global_forcing_reaches_explain() -> None:
    code, text = invoke("explain", "--size", "1GB", "--topology", "2x3")
    assert code == 0, text
    rows = [line for line in text.splitlines() if line.startswith(("*", "  2-level", "  direct", "  3-level"))]
    assert rows and all(" 2x3" in line for line in rows), text
    code, text = invoke("--algorithm", "2-level", "explain", "--size", "1GB")
    assert code == 0 and "* 2-level" in text, text


def _cli(config: Config, *args: str) -> tuple[int, str]:
    endpoint = ["--s3-endpoint", config.s3.endpoint] if config.s3.endpoint else []
    result = CliRunner(env={"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "flags-secret"}).invoke(main, ["--no-progress", "--no-calibrate", "--concurrency", "2", *endpoint, *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_small_function_memory_on_both_stores(store_env: tuple[str, Config], tmp_path: Path) -> None:
    """20 MB in 256 MiB functions (32 MiB of data per task) needs P >= 1; 60 MB needs P >= 2: the selector picks such a
    P; capped at one worker, the job stops with a clear error and commits nothing."""
    url, config = store_env
    from croupier.jobs.gensort import gensort

    gensort(f"{url}/in", 60_000_000, 2, config)
    code, text = _cli(config, "sort", f"{url}/in", f"{url}/out", "--function-memory", "256MiB", "--max-workers", "1")
    assert code == 1 and "no P fits" in text and "--function-memory" in text and "Traceback" not in text
    assert [o.key for o in open_store(f"{url}/out", config).list()] == []
    report = tmp_path / "r.json"
    code, text = _cli(config, "sort", f"{url}/in", f"{url}/out", "--function-memory", "256MiB", "--report", str(report))
    assert code == 0, text
    assert json.loads(report.read_text())["summary"]["workers"] >= 2
    code, text = _cli(config, "sort", f"{url}/in", f"{url}/out2", "--report", str(tmp_path / "no" / "r.json"))
    assert code == 2 and "does not exist" in text
    assert [o.key for o in open_store(f"{url}/out2", config).list()] == []
