"""The ``croupier`` command: gensort, sort, valsort, sql, and ``demo`` (the main job end to end)."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, TypeVar

import click

from croupier import __version__
from croupier.config import ALGORITHMS, MIN_FUNCTION_MEMORY, Config
from croupier.errors import CroupierError, TaskError
from croupier.redact import redact
from croupier.signals import EXIT_TERMINATED, exit_status, terminate_like_interrupt
from croupier.report import RunReport
from croupier.units import format_bytes, parse_size

F = TypeVar("F", bound=Callable[..., object])


class SizeType(click.ParamType):
    """A size with units: 2GB, 512MiB, 1e9; at least ``minimum`` bytes (sizes <= 0 are refused)."""

    name = "size"

    def __init__(self, minimum: int = 1) -> None:
        self.minimum = minimum

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            size = parse_size(value if isinstance(value, (int, float)) else str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size < self.minimum:
            least = "more than 0 bytes" if self.minimum == 1 else f"at least {format_bytes(self.minimum)}"
            self.fail(f"{value!r} is too small; give {least}", param, ctx)
        return size


SIZE = SizeType()
#: A function needs this much memory to run at all (Config refuses less).
MEMORY = SizeType(MIN_FUNCTION_MEMORY)
#: Counts that must be positive (workers, concurrency, parts, levels, ...).
POSITIVE = click.IntRange(min=1)
#: Money: a positive amount of USD.
USD = click.FloatRange(min=0, min_open=True)


class StoreUrl(click.ParamType):
    """A store URL or path (checked by :func:`parse_location`: scheme, bucket, names); passed on
    as the text given, so every job reads it exactly as the Python API would."""

    name = "url"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from croupier.storage.location import parse_location

        try:
            parse_location(str(value))
        except CroupierError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


URL = StoreUrl()


def _endpoint(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An S3 endpoint must be an http(s) URL with a host (credentials in it are never shown)."""
    if value is None:
        return None
    from urllib.parse import urlsplit

    from croupier.redact import split_userinfo

    address = split_userinfo(value)[0]  # checked without the credentials, so no message holds them
    shown = address if address == value else address.replace("://", "://***@", 1)
    try:
        parts = urlsplit(address)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError as exc:
        raise click.BadParameter(f"cannot read {shown!r} as a URL ({exc})", ctx, param) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{shown!r} is not an endpoint; write http://host:port or https://host", ctx, param)
    return value


def _report_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--report FILE`` is checked before the job runs: its folder must exist and FILE must not be a folder."""
    if value is None:
        return None
    path = Path(value)
    if path.is_dir():
        raise click.BadParameter(f"{value} is a folder; give a file name", ctx, param)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise click.BadParameter(f"folder {parent} does not exist; create it first", ctx, param)
    return value


def _config(ctx: click.Context) -> Config:
    return ctx.obj["config"]  # type: ignore[no-any-return]


def _emit(report: RunReport, report_path: str | None) -> None:
    click.echo(report.render())
    for warning in fast_tier_warnings(report.summary):
        click.echo(f"warning: {warning}", err=True)
    if report_path:
        report.write_json(report_path)
        click.echo(f"report written to {report_path}")


def fast_tier_warnings(summary: dict[str, object]) -> list[str]:
    """What went wrong with the fast tier in a run that still succeeded (the report has the
    details): said on stderr too, so a user who forced the fast tier learns it was not used."""
    out = []
    fallback = summary.get("fast_tier_fallback")
    if isinstance(fallback, dict):
        out.append(f"{fallback.get('reason')}; the job ran again with every exchange on the slow tier")
    spills = summary.get("fast_tier_spills")
    if isinstance(spills, dict):
        senders = sum(spills.get("senders", {}).values())
        out.append(f"{senders} producer(s) could not write to the fast tier and wrote to the slow tier instead (first: {spills.get('first_error')})")
    return out


def _guard(fn: F) -> F:
    """Turn Croupier errors into a clear message and exit code 1 instead of a traceback; Ctrl-C
    and SIGTERM into exit codes 130 and 143 after the run's clean-up."""

    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            with terminate_like_interrupt(redeliver=False):
                return fn(*args, **kwargs)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated): the run cleaned up on the way out
            status = exit_status(exc)
            click.echo(f"{'terminated' if status == EXIT_TERMINATED else 'interrupted'}: stopped; temporary objects removed", err=True)
            raise click.exceptions.Exit(status) from None
        except TaskError as exc:
            verbose = click.get_current_context().find_root().params.get("verbose")
            detail = f"\n{exc.worker_traceback}" if verbose and exc.worker_traceback else ""
            raise click.ClickException(redact(f"task {exc.task_id} failed: {exc.cause}{detail}")) from exc
        except CroupierError as exc:
            raise click.ClickException(redact(str(exc))) from exc

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper  # type: ignore[return-value]


def _takes_value(option: click.Option) -> bool:
    return not option.is_flag and not option.count


def _option_names(command: click.Command) -> dict[str, click.Option]:
    return {name: p for p in command.params if isinstance(p, click.Option) for name in (*p.opts, *p.secondary_opts)}


def hoist_global_options(group: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """Move the group's options that follow the subcommand name to before it, so that
    ``croupier sort IN OUT --tmp X`` means ``croupier --tmp X sort IN OUT``. An option the
    subcommand defines itself (e.g. sort's ``--workers``) stays with the subcommand; ``--``
    ends the search."""
    own = _option_names(group)
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        name, has_value = args[i].split("=", 1)[0], "=" in args[i]
        option = own.get(name)
        i += 2 if option is not None and _takes_value(option) and not has_value else 1
    if i >= len(args) or args[i] == "--":
        return args
    command = group.get_command(ctx, args[i])
    if command is None:
        return args
    theirs = _option_names(command)
    moved: list[str] = []
    kept: list[str] = [args[i]]
    j = i + 1
    while j < len(args):
        token = args[j]
        if token == "--":
            kept.extend(args[j:])
            break
        name, has_value = token.split("=", 1)[0], "=" in token
        option = theirs.get(name) or own.get(name)
        step = 2 if option is not None and _takes_value(option) and not has_value else 1
        (moved if name in own and name not in theirs else kept).extend(args[j : j + step])
        j += step
    return args[:i] + moved + kept


class CroupierGroup(click.Group):
    """The ``croupier`` group: its (global) options may also be given after the subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(self, ctx, list(args)))


@click.group(cls=CroupierGroup)
@click.version_option(__version__, "--version", prog_name="croupier", message="%(prog)s %(version)s")
@click.option("--concurrency", type=POSITIVE, default=None, help="Functions running at once (default: CPU count).")
@click.option("--function-memory", type=MEMORY, default=None, help="Memory budget of one function, e.g. 2GiB (at least 256MiB; default 4GiB).")
@click.option("--tmp", "tmp_url", type=URL, default=None, help="Where intermediate objects go (default: under the output).")
@click.option("--intermediate", type=click.Choice(["auto", "raw", "arrow", "arrow-lz4", "arrow-zstd"]), default=None, help="Encoding of shuffle objects (auto: raw locally, arrow-zstd on S3).")
@click.option("--s3-endpoint", default=None, callback=_endpoint, help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL or AWS).")
@click.option("--s3-anonymous", is_flag=True, default=False, help="Send unsigned S3 requests.")
@click.option("--profile", "profile_name", default=None, help="Storage profile for the selector (file from `croupier calibrate`, or a shipped name).")
@click.option("--max-workers", type=POSITIVE, default=None, help="Largest P the selector may choose.")
@click.option("--workers", "workers", type=POSITIVE, default=None, help="Force P for every exchange of the job (default: the selector picks P per exchange from the measured data and the store's profile).")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default=None, help="Force the exchange algorithm of every exchange; the selector still picks P and the topology.")
@click.option("--topology", default=None, help="Force the exact topology g1xg2x... (e.g. 4x3: P=12 in two levels) of every exchange.")
@click.option("--objective", type=click.Choice(["time", "cost"]), default=None, help="What the selector minimises for every exchange (default: time).")
@click.option("--budget", type=USD, default=None, help="Most a run's exchange may cost (USD) when minimising time.")
@click.option("--executor", type=click.Choice(["local", "lithops"]), default=None, help="Where functions run: local processes (default) or Lithops.")
@click.option("--lithops-config", default=None, help="Lithops configuration file (default: Lithops' own lookup).")
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: when stderr is a terminal).")
@click.option("--calibrate/--no-calibrate", "calibrate", default=None, help="Calibrate a store on its first run here and refine its profile from every run (default), or use the shipped profile.")
@click.option("--fast-tier", "fast_tier", type=URL, default=None, help="A fast store for exchange objects beside the slow one: redis://host:port[/db]/prefix.")
@click.option("--tier", type=click.Choice(["auto", "slow", "fast", "hybrid"]), default=None, help="Where exchanges put their objects: auto (the model chooses per exchange, default), slow, fast, or hybrid (rounds through the fast tier, runs on the slow one); fast and hybrid need --fast-tier.")
@click.option("--pipelined/--no-pipelined", "pipelined", default=None, help="A hybrid exchange's rounds pipelined (combiners beside the producers) or not (default: the variant the model predicts better).")
@click.option("-v", "--verbose", is_flag=True, help="Show worker tracebacks on failure.")
@click.pass_context
def main(ctx: click.Context, concurrency: int | None, function_memory: int | None, tmp_url: str | None, intermediate: str | None, s3_endpoint: str | None, s3_anonymous: bool, profile_name: str | None, max_workers: int | None, workers: int | None, algorithm: str | None, topology: str | None, objective: str | None, budget: float | None, executor: str | None, lithops_config: str | None, progress: bool | None, calibrate: bool | None, fast_tier: str | None, tier: str | None, pipelined: bool | None, verbose: bool) -> None:
    """Croupier: serverless-style data analytics through object storage.

    The options here may also be given after the subcommand (unless it has an option of the same
    name, e.g. sort's --workers). --workers/--algorithm/--topology/--objective/--budget force the
    choice for every exchange of any job (sort, sql, ...).
    """
    try:
        config = Config.from_env(
            concurrency=concurrency, function_memory=function_memory, tmp_url=tmp_url, intermediate_format=intermediate, progress=progress,
            profile=profile_name, max_workers=max_workers, executor=executor, lithops_config=lithops_config,
            calibration=None if calibrate is None else ("auto" if calibrate else "off"),
            fast_tier=fast_tier, tier=tier, pipelined=pipelined, workers=workers, algorithm=algorithm, topology=topology, objective=objective, budget=budget,
        )  # fmt: skip
    except (CroupierError, ValueError) as exc:
        raise click.UsageError(redact(str(exc)), ctx) from exc
    if s3_endpoint:
        config = config.with_(s3=replace(config.s3, endpoint=s3_endpoint, allow_http=s3_endpoint.startswith("http://")))
    if s3_anonymous:
        config = config.with_(s3=replace(config.s3, anonymous=True))
    ctx.obj = {"config": config}


@main.command("gensort")
@click.argument("out", type=URL)
@click.option("--size", type=SIZE, required=True, help="Bytes of records to write, e.g. 2GB (100 bytes per record).")
@click.option("--parts", type=POSITIVE, default=None, help="Number of objects (default: ~128 MB each, at least one per worker).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--ascii", "ascii_keys", is_flag=True, help="Printable keys and payload (gensort -a).")
@click.option("--overwrite", is_flag=True, help="Replace what OUT already holds.")
@click.option("--report", "report_path", default=None, callback=_report_path, help="Also write the run report as JSON here.")
@click.pass_context
@_guard
def gensort_cmd(ctx: click.Context, out: str, size: int, parts: int | None, seed: int, ascii_keys: bool, overwrite: bool, report_path: str | None) -> None:
    """Write SIZE bytes of TeraSort records (gensort layout) to OUT as several objects."""
    from croupier.jobs.gensort import default_parts, gensort

    config = _config(ctx)
    report = gensort(out, size, parts or default_parts(size, config.concurrency), config, seed, ascii_keys, overwrite)
    _emit(report, report_path)


@main.command("sort")
@click.argument("input_url", metavar="IN", type=URL)
@click.argument("output_url", metavar="OUT", type=URL)
@click.option("--workers", "-p", type=POSITIVE, default=None, help="Number of mappers and reducers P (default: the global --workers, else the selector picks P from the measured data size and the store's profile).")
@click.option("--format", "out_format", type=click.Choice(["gensort", "parquet"]), default="gensort", show_default=True, help="Output format.")
@click.option("--topology", default=None, help="Exchange group sizes g1xg2x... (e.g. 4x3); default: the selector's choice.")
@click.option("--objective", type=click.Choice(["time", "cost"]), default=None, help="What the selector minimises (default: the global --objective, else time).")
@click.option("--budget", type=USD, default=None, help="Most a run may cost (USD) when minimising time.")
@click.option("--levels", type=POSITIVE, default=None, help="Use the fewest-edges topology with this many levels.")
@click.option("--write-combining", is_flag=True, help="One exchange object per worker per level; receivers read byte ranges.")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default=None, help="Fix the exchange algorithm; the selector still picks P and the topology.")
@click.option("--reducers", type=click.Choice(["lazy", "eager"]), default="lazy", show_default=True, help="eager: start reducers once 25% of mappers finished (direct exchange).")
@click.option("--overwrite", is_flag=True, help="Replace what OUT already holds.")
@click.option("--report", "report_path", default=None, callback=_report_path, help="Also write the run report as JSON here.")
@click.pass_context
@_guard
def sort_cmd(ctx: click.Context, input_url: str, output_url: str, workers: int | None, out_format: str, topology: str | None, objective: str | None, budget: float | None, levels: int | None, write_combining: bool, algorithm: str | None, reducers: str, overwrite: bool, report_path: str | None) -> None:
    """Sort the records under IN by key into OUT (part-00000, part-00001, ... in key order).

    By default P and the exchange algorithm are chosen at run time from the measured data size and
    the store's profile; --workers fixes P, --algorithm fixes the algorithm (the selector picks P),
    --topology/--levels/--write-combining fix the exact plan.
    """
    from croupier.jobs.sort import sort

    config = _config(ctx).with_(reducers=reducers)
    plan = _plan(workers, topology, levels, write_combining)
    if algorithm and plan is not None:
        raise click.UsageError("give --algorithm, or --topology/--levels/--write-combining, not both")
    try:  # sort's own choices beside the global ones: a clash is a usage error, found before any work
        config.with_(
            workers=plan.workers if plan else workers or config.workers, algorithm=plan.family if plan else algorithm or config.algorithm,
            topology=str(plan.topology) if plan else config.topology, objective=objective or config.objective, budget=budget or config.budget,
        )  # fmt: skip
    except CroupierError as exc:
        raise click.UsageError(str(exc)) from exc
    report = sort(input_url, output_url, plan.workers if plan else workers, config, out_format, overwrite, plan=plan, objective=objective, budget=budget, algorithm=algorithm)
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


@main.command("calibrate")
@click.option("--store", "store_url", type=URL, default=None, help="Store to measure, e.g. s3://bucket/scratch or file:///tmp/x (objects under it are deleted afterwards).")
@click.option("--quick", is_flag=True, help="What a first run does (10-15 s); default: a larger calibration (about 90 s).")
@click.option("--out", "out_path", required=True, help="Where to save the profile (JSON).")
@click.option("--name", default=None, help="Profile name (default: the store URL).")
@click.option("--cache/--no-cache", default=True, show_default=True, help="Also make it this machine's profile of the store (runs use it).")
@click.option("--from-reports", "reports", multiple=True, help="Refit the profile (--profile, or the store's) to these run reports (JSON from --report) instead of measuring; repeatable.")
@click.option("--plot", "plot_path", default=None, help="Also plot the fitted curves to this PNG (needs the plots extra).")
@click.pass_context
@_guard
def calibrate_cmd(ctx: click.Context, store_url: str | None, quick: bool, out_path: str, name: str | None, cache: bool, reports: tuple[str, ...], plot_path: str | None) -> None:
    """Measure a store (a grid of requests, then a standard workload of stages) and fit its profile,
    every coefficient with its standard error; or refit a profile from stored run reports."""
    from croupier.jobs.calibrate import calibrate, describe, from_reports
    from croupier.model.profile import profile_for

    config = _config(ctx)
    if store_url is not None and store_url.lower().startswith("redis://") and not reports:
        from croupier.jobs.calibrate_tier import calibrate_fast_tier, describe_tier

        tier = calibrate_fast_tier(store_url, config, quick=quick, name=name)
        tier.save(out_path)
        click.echo(describe_tier(tier))
        return
    if reports:
        base = profile_for(config, store_url or "file:///")
        result = from_reports(reports, base, config.concurrency)
    elif store_url is None:
        raise click.UsageError("give --store to measure, or --from-reports to refit")
    else:
        result = calibrate(store_url, config, quick=quick, name=name, cache=cache).result
    profile = replace(result.profile, name=name) if name else result.profile
    profile.save(out_path)
    click.echo(describe(profile))
    click.echo(result.describe())
    click.echo(f"profile saved to {out_path}")
    if plot_path:
        from croupier.model.plots import plot_profile

        plot_profile(profile, plot_path)
        click.echo(f"curves plotted to {plot_path}")


@main.command("explain")
@click.argument("input_url", metavar="IN", required=False, type=URL)
@click.option("--size", type=SIZE, default=None, help="What-if: plan for this many bytes instead of measuring IN.")
@click.option("--workers", "-p", type=POSITIVE, default=None, help="Fix P; only the algorithm is chosen.")
@click.option("--objective", type=click.Choice(["time", "cost"]), default=None, help="What the selector minimises (default: the global --objective, else time).")
@click.option("--budget", type=USD, default=None, help="With --objective time: the most a run may cost, USD.")
@click.option("--profile", "profile_name", default=None, help="Profile file or shipped name (local, seaweedfs-loopback, aws-s3, ibm-cos).")
@click.option("--rows", type=POSITIVE, default=15, show_default=True, help="Candidates to show.")
@click.pass_context
@_guard
def explain_cmd(ctx: click.Context, input_url: str | None, size: int | None, workers: int | None, objective: str | None, budget: float | None, profile_name: str | None, rows: int) -> None:
    """Show what the selector would choose for sorting IN (or --size bytes), and why."""
    from croupier.jobs.common import list_inputs
    from croupier.model.profile import StorageProfile, profile_for
    from croupier.exchange.topology import Topology
    from croupier.model.selector import choose
    from croupier.storage import open_store

    config = _config(ctx)
    if size is None:
        if input_url is None:
            raise click.UsageError("give IN (its size is measured) or --size")
        size = sum(o.size for o in list_inputs(open_store(input_url, config)))
    profile = StorageProfile.load(profile_name) if profile_name else profile_for(config, config.tmp_url or input_url or "file:///")
    workers, objective, budget = workers or config.workers, objective or config.objective, budget if budget is not None else config.budget
    choice = choose(size, profile, objective, budget, workers=workers, concurrency=min(config.concurrency, profile.concurrency) if profile.concurrency < 100 else None, max_workers=config.max_workers, algorithm=config.algorithm, topology=Topology.parse(config.topology) if config.topology else None)
    click.echo(f"profile: {profile.label}")
    click.echo(choice.explain(rows))
    click.echo(choice.best.explain())


@main.command("valsort")
@click.argument("output_url", metavar="OUT", type=URL)
@click.option("--input", "input_url", type=URL, default=None, help="The sort's input: its record count and checksum must match.")
@click.option("--report", "report_path", default=None, callback=_report_path, help="Also write the run report as JSON here.")
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


@main.command("clean")
@click.argument("url", type=URL)
@click.option("--run-id", default=None, help="Only this run's leftovers.")
@click.option("--force", is_flag=True, help="With --run-id: remove that run even if its lease is live.")
@click.option("--older-than", default=None, help="Only runs started longer ago than this, e.g. 2h, 30m.")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.pass_context
@_guard
def clean_cmd(ctx: click.Context, url: str, run_id: str | None, force: bool, older_than: str | None, dry_run: bool) -> None:
    """Delete what dead runs left under URL: expired runs' temporaries (URL/_croupier_tmp/) and an
    expired writer lock with its run's uncommitted parts. Live runs are never touched."""
    from croupier.jobs.clean import clean
    from croupier.units import format_bytes, parse_duration

    if force and run_id is None:
        raise click.UsageError("--force needs --run-id: name the one run to remove")
    try:
        age = parse_duration(older_than) if older_than else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from exc
    result = clean(url, _config(ctx), run_id=run_id, older_than=age, dry_run=dry_run, force=force)
    verb = "would delete" if dry_run else "deleted"
    for run in result.removed:
        click.echo(f"{verb} run {run.run_id}: {len(run.keys)} object(s), {format_bytes(run.bytes)} ({run.reason})")
    for run in result.skipped:
        click.echo(f"skipped run {run.run_id}: {run.reason}")
    writer = result.writer
    if writer is not None and writer.removable and (dry_run or result.writer_removed):
        click.echo(f"{verb} the writer lock of dead run {writer.lease.run_id} and {len(writer.parts)} uncommitted part(s) ({writer.reason})")
    elif writer is not None:
        click.echo(f"skipped the writer lock of run {writer.lease.run_id}: {writer.reason or 'it changed while cleaning'}")
    if not result.removed and not result.skipped and writer is None:
        click.echo(f"nothing to clean under {result.url}")


@main.command("exchange-stats")
@click.option("--store", "store_url", type=URL, default=None, help="Where to run (default: a temporary local folder).")
@click.option("--size", type=SIZE, default="20MB", show_default=True, help="Bytes of TeraSort records to exchange.")
@click.option("--workers", "-p", type=POSITIVE, default=12, show_default=True, help="P; every topology candidate of P is run.")
@click.option("--max-levels", type=POSITIVE, default=3, show_default=True, help="Largest number of levels to try.")
@click.pass_context
@_guard
def exchange_stats_cmd(ctx: click.Context, store_url: str | None, size: int, workers: int, max_levels: int) -> None:
    """Run every exchange algorithm on the same data; print requests per level beside the formulas."""
    import tempfile

    from croupier.exchange.plan import all_plans
    from croupier.jobs import exchange_stats
    from croupier.jobs.gensort import gensort
    from croupier.storage import open_store, parse_location

    config = _config(ctx)
    with tempfile.TemporaryDirectory(prefix="croupier-xstats-") as tmp:
        base = parse_location(store_url or tmp).child("_exchange_stats")
        try:
            gensort(str(base.child("in")), size, max(2, config.concurrency), config, overwrite=True)
            runs = exchange_stats.run_all(str(base.child("in")), str(base.child("work")), workers, config, all_plans(workers, max_levels))
        finally:
            open_store(base, config).delete_prefix()
    click.echo(exchange_stats.render(runs))
    if not all(exchange_stats.matches(r.levels, r.plan.counts()) for r in runs):
        raise click.ClickException("measured request counts differ from the formulas")


@main.command("demo")
@click.option("--size", type=SIZE, default="1GB", show_default=True, help="Bytes of TeraSort records to generate.")
@click.option("--dir", "workdir", default="croupier-demo", show_default=True, help="Local folder used as the object store.")
@click.option("--workers", "-p", type=POSITIVE, default=None, help="Mappers and reducers (default: the selector picks P from the data size and the store's profile).")
@click.option("--keep", is_flag=True, help="Keep the generated input and sorted output.")
@click.pass_context
@_guard
def demo_cmd(ctx: click.Context, size: int, workdir: str, workers: int | None, keep: bool) -> None:
    """The main job on the embedded default: gensort SIZE, sort it, validate it, print the summary."""
    from croupier.jobs.gensort import default_parts, gensort
    from croupier.jobs.sort import sort
    from croupier.jobs.valsort import valsort

    from croupier.storage import parse_location

    config = _config(ctx)
    location = parse_location(workdir)
    root = Path(location.path)
    inp, out = str(location.child("input")), str(location.child("output"))
    click.echo(f"Croupier demo: {format_bytes(size)} of TeraSort records in {root}, {workers or 'auto-tuned'} workers, {config.concurrency} at once")
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


@main.command("report")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--plot", "plot_path", default=None, help="Draw the run as a timeline of functions by phase, with predicted against measured per stage, to this file (.png, .svg, .pdf).")
@_guard
def report_cmd(path: str, plot_path: str | None) -> None:
    """Print a run report written by --report PATH; optionally draw it."""
    report = RunReport.read_json(path)
    click.echo(report.render())
    if plot_path:
        from croupier.timeline import plot_timeline

        drawn = plot_timeline(report, plot_path)
        click.echo(f"timeline of {drawn} tasks drawn to {plot_path}")


@main.command("sql")
@click.argument("query")
@click.option("--table", "tables", multiple=True, metavar="NAME=URL", help="A table the query reads: Parquet (or .csv) files at URL (a file, a folder/prefix or a glob). Repeat for each table.")
@click.option("--out", "out_url", type=URL, default=None, help="Write the result as part files under this folder/prefix instead of printing it.")
@click.option("--format", "out_format", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True, help="With --out: the format of the part files.")
@click.option("--overwrite", is_flag=True, help="With --out: replace what the folder holds.")
@click.option("--engine", type=click.Choice(["croupier", "polars"]), default="croupier", show_default=True, help="croupier: run on functions and storage; polars: the same plan in Polars on this machine (local files).")
@click.option("--rows", type=click.IntRange(min=0), default=50, show_default=True, help="Rows to print.")
@click.option("--explain", "explain_only", is_flag=True, help="Print the plans instead of running.")
@click.pass_context
@_guard
def sql_cmd(ctx: click.Context, query: str, tables: tuple[str, ...], out_url: str | None, out_format: str, overwrite: bool, engine: str, rows: int, explain_only: bool) -> None:
    """Run the SQL QUERY (DuckDB's dialect; @FILE reads it from FILE) over --table NAME=URL ..."""
    import polars as pl

    from croupier.sql import sql

    if query.startswith("@"):
        query = Path(query[1:]).read_text()
    sources = {}
    for item in tables:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise click.UsageError(f"--table takes NAME=URL, got {item!r}")
        URL.convert(url, None, click.get_current_context())
        sources[name] = url
    frame = sql(query, sources, config=_config(ctx))
    if explain_only:
        click.echo(frame.explain())
        return
    if out_url is not None:
        if engine != "croupier":
            raise click.UsageError("--out runs on Croupier's engine; drop --engine polars")
        sink = frame.sink_csv if out_format == "csv" else frame.sink_parquet
        files = sink(out_url, overwrite=overwrite)
        click.echo(f"wrote {len(files)} file(s) under {out_url}")
        return
    result = frame.collect() if engine == "croupier" else frame.to_polars().collect()
    with pl.Config(tbl_rows=rows, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
        click.echo(result)


from croupier.jobs.plan import plan_cmd  # noqa: E402  (croupier plan: cloud-scale time and cost)

main.add_command(plan_cmd)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
