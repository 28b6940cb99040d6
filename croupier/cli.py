"""The ``croupier`` command: gensort, sort, valsort, and ``demo`` (the main job end to end)."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, TypeVar

import click

from croupier.config import Config
from croupier.errors import CroupierError, TaskError
from croupier.report import RunReport
from croupier.units import format_bytes, parse_size

F = TypeVar("F", bound=Callable[..., object])


class SizeType(click.ParamType):
    """A size with units: 2GB, 512MiB, 1e9."""

    name = "size"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_size(value if isinstance(value, (int, float)) else str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()


def _config(ctx: click.Context) -> Config:
    return ctx.obj["config"]  # type: ignore[no-any-return]


def _emit(report: RunReport, report_path: str | None) -> None:
    click.echo(report.render())
    if report_path:
        report.write_json(report_path)
        click.echo(f"report written to {report_path}")


def _guard(fn: F) -> F:
    """Turn Croupier errors into a clear message and exit code 1 instead of a traceback."""

    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return fn(*args, **kwargs)
        except TaskError as exc:
            verbose = click.get_current_context().find_root().params.get("verbose")
            detail = f"\n{exc.worker_traceback}" if verbose and exc.worker_traceback else ""
            raise click.ClickException(f"task {exc.task_id} failed: {exc.cause}{detail}") from exc
        except CroupierError as exc:
            raise click.ClickException(str(exc)) from exc

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper  # type: ignore[return-value]


@click.group()
@click.option("--concurrency", type=int, default=None, help="Functions running at once (default: CPU count).")
@click.option("--function-memory", type=SIZE, default=None, help="Memory budget of one function, e.g. 2GiB.")
@click.option("--tmp", "tmp_url", default=None, help="Where intermediate objects go (default: under the output).")
@click.option("--intermediate", type=click.Choice(["auto", "raw", "arrow", "arrow-lz4", "arrow-zstd"]), default=None, help="Encoding of shuffle objects (auto: raw locally, arrow-zstd on S3).")
@click.option("--s3-endpoint", default=None, help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL or AWS).")
@click.option("--s3-anonymous", is_flag=True, default=False, help="Send unsigned S3 requests.")
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: when stderr is a terminal).")
@click.option("-v", "--verbose", is_flag=True, help="Show worker tracebacks on failure.")
@click.pass_context
def main(ctx: click.Context, concurrency: int | None, function_memory: int | None, tmp_url: str | None, intermediate: str | None, s3_endpoint: str | None, s3_anonymous: bool, progress: bool | None, verbose: bool) -> None:
    """Croupier: serverless-style data analytics through object storage."""
    try:
        config = Config.from_env(concurrency=concurrency, function_memory=function_memory, tmp_url=tmp_url, intermediate_format=intermediate, progress=progress)
    except (CroupierError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if s3_endpoint:
        config = config.with_(s3=replace(config.s3, endpoint=s3_endpoint, allow_http=s3_endpoint.startswith("http://")))
    if s3_anonymous:
        config = config.with_(s3=replace(config.s3, anonymous=True))
    ctx.obj = {"config": config}


@main.command("gensort")
@click.argument("out")
@click.option("--size", type=SIZE, required=True, help="Bytes of records to write, e.g. 2GB (100 bytes per record).")
@click.option("--parts", type=int, default=None, help="Number of objects (default: ~128 MB each, at least one per worker).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--ascii", "ascii_keys", is_flag=True, help="Printable keys and payload (gensort -a).")
@click.option("--overwrite", is_flag=True, help="Replace what OUT already holds.")
@click.option("--report", "report_path", default=None, help="Also write the run report as JSON here.")
@click.pass_context
@_guard
def gensort_cmd(ctx: click.Context, out: str, size: int, parts: int | None, seed: int, ascii_keys: bool, overwrite: bool, report_path: str | None) -> None:
    """Write SIZE bytes of TeraSort records (gensort layout) to OUT as several objects."""
    from croupier.jobs.gensort import default_parts, gensort

    config = _config(ctx)
    report = gensort(out, size, parts or default_parts(size, config.concurrency), config, seed, ascii_keys, overwrite)
    _emit(report, report_path)


@main.command("sort")
@click.argument("input_url", metavar="IN")
@click.argument("output_url", metavar="OUT")
@click.option("--workers", "-p", type=int, default=None, help="Number of mappers and reducers P (default: concurrency).")
@click.option("--format", "out_format", type=click.Choice(["gensort", "parquet"]), default="gensort", show_default=True, help="Output format.")
@click.option("--topology", default=None, help="Exchange group sizes g1xg2x... (e.g. 4x3); default: direct.")
@click.option("--levels", type=int, default=None, help="Use the fewest-edges topology with this many levels.")
@click.option("--write-combining", is_flag=True, help="One exchange object per worker per level; receivers read byte ranges.")
@click.option("--overwrite", is_flag=True, help="Replace what OUT already holds.")
@click.option("--report", "report_path", default=None, help="Also write the run report as JSON here.")
@click.pass_context
@_guard
def sort_cmd(ctx: click.Context, input_url: str, output_url: str, workers: int | None, out_format: str, topology: str | None, levels: int | None, write_combining: bool, overwrite: bool, report_path: str | None) -> None:
    """Sort the records under IN by key into OUT (part-00000, part-00001, ... in key order)."""
    from croupier.jobs.sort import sort

    config = _config(ctx)
    plan = _plan(workers, topology, levels, write_combining)
    workers = plan.workers if plan else workers or config.concurrency
    report = sort(input_url, output_url, workers, config, out_format, overwrite, plan=plan)
    _emit(report, report_path)


def _plan(workers: int | None, topology: str | None, levels: int | None, combine: bool):  # type: ignore[no-untyped-def]
    """The exchange plan the sort flags ask for (None: direct among --workers)."""
    from croupier.exchange.plan import ExchangePlan
    from croupier.exchange.topology import Topology, candidates

    if topology and levels:
        raise click.UsageError("give --topology or --levels, not both")
    if topology:
        try:
            chosen = Topology.parse(topology)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--topology") from exc
        if workers is not None and workers != chosen.workers:
            raise click.BadParameter(f"topology {topology} has {chosen.workers} workers but --workers is {workers}", param_hint="--topology")
        return ExchangePlan(chosen, combine)
    if levels or combine:
        if workers is None:
            raise click.UsageError("--levels and --write-combining need --workers")
        options = candidates(workers, levels or 1)
        if levels and len(options) < levels:
            raise click.BadParameter(f"P={workers} has no {levels}-level topology; the most is {len(options)} ({options[-1]})", param_hint="--levels")
        return ExchangePlan(options[-1], combine)
    return None


@main.command("valsort")
@click.argument("output_url", metavar="OUT")
@click.option("--input", "input_url", default=None, help="The sort's input: its record count and checksum must match.")
@click.option("--report", "report_path", default=None, help="Also write the run report as JSON here.")
@click.pass_context
@_guard
def valsort_cmd(ctx: click.Context, output_url: str, input_url: str | None, report_path: str | None) -> None:
    """Check OUT is globally sorted and (with --input) holds exactly IN's records; exit 1 if not."""
    from croupier.jobs.valsort import valsort

    result, report = valsort(output_url, _config(ctx), input_url)
    _emit(report, report_path)
    if not result.ok:
        raise click.ClickException("validation FAILED: " + "; ".join(result.problems))
    click.echo("validation passed")


@main.command("exchange-stats")
@click.option("--store", "store_url", default=None, help="Where to run (default: a temporary local folder).")
@click.option("--size", type=SIZE, default="20MB", show_default=True, help="Bytes of TeraSort records to exchange.")
@click.option("--workers", "-p", type=int, default=12, show_default=True, help="P; every topology candidate of P is run.")
@click.option("--max-levels", type=int, default=3, show_default=True, help="Largest number of levels to try.")
@click.pass_context
@_guard
def exchange_stats_cmd(ctx: click.Context, store_url: str | None, size: int, workers: int, max_levels: int) -> None:
    """Run every exchange algorithm on the same data; print requests per level beside the formulas."""
    import tempfile

    from croupier.exchange.plan import all_plans
    from croupier.jobs import exchange_stats
    from croupier.jobs.gensort import gensort
    from croupier.storage import open_store

    config = _config(ctx)
    with tempfile.TemporaryDirectory(prefix="croupier-xstats-") as tmp:
        base = (store_url or Path(tmp).as_uri()).rstrip("/") + "/_exchange_stats"
        try:
            gensort(f"{base}/in", size, max(2, config.concurrency), config, overwrite=True)
            runs = exchange_stats.run_all(f"{base}/in", f"{base}/work", workers, config, all_plans(workers, max_levels))
        finally:
            open_store(base, config).delete_prefix()
    click.echo(exchange_stats.render(runs))
    if not all(exchange_stats.matches(r.levels, r.plan.counts()) for r in runs):
        raise click.ClickException("measured request counts differ from the formulas")


@main.command("demo")
@click.option("--size", type=SIZE, default="1GB", show_default=True, help="Bytes of TeraSort records to generate.")
@click.option("--dir", "workdir", default="croupier-demo", show_default=True, help="Local folder used as the object store.")
@click.option("--workers", "-p", type=int, default=None, help="Mappers and reducers (default: concurrency).")
@click.option("--keep", is_flag=True, help="Keep the generated input and sorted output.")
@click.pass_context
@_guard
def demo_cmd(ctx: click.Context, size: int, workdir: str, workers: int | None, keep: bool) -> None:
    """The main job on the embedded default: gensort SIZE, sort it, validate it, print the summary."""
    from croupier.jobs.gensort import default_parts, gensort
    from croupier.jobs.sort import sort
    from croupier.jobs.valsort import valsort

    config = _config(ctx)
    root = Path(workdir).resolve()
    inp, out = (root / "input").as_uri(), (root / "output").as_uri()
    workers = workers or config.concurrency
    click.echo(f"Croupier demo: {format_bytes(size)} of TeraSort records in {root}, {workers} workers, {config.concurrency} at once")
    try:
        started = time.perf_counter()
        gen = gensort(inp, size, default_parts(size, config.concurrency), config, overwrite=True)
        click.echo(f"generated {gen.summary['records']:,} records in {gen.wall_seconds:.2f} s")
        srt = sort(inp, out, workers, config, overwrite=True)
        click.echo(srt.render())
        result, val = valsort(out, config, inp)
        click.echo(val.render())
        total = time.perf_counter() - started
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    records = srt.summary["records"]
    click.echo(
        f"\nsorted {records:,} records ({format_bytes(records * 100)}) in {srt.wall_seconds:.2f} s "
        f"({records * 100 / srt.wall_seconds / 1e6:.0f} MB/s); validation {'passed' if result.ok else 'FAILED'}; "
        f"demo total {total:.1f} s"
    )
    if not result.ok:
        raise click.ClickException("validation FAILED: " + "; ".join(result.problems))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
