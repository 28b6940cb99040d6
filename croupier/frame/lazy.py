"""The lazy frame API: build a query like in Polars, run it on Croupier's functions and storage.

    import croupier.frame as cf
    from croupier.frame import col

    lineitem = cf.scan_parquet("s3://bucket/tpch/lineitem/", config=config)
    q = (lineitem.filter(col("l_shipdate") <= date(1998, 9, 2))
         .group_by("l_returnflag", "l_linestatus")
         .agg(col("l_quantity").sum().alias("sum_qty"), cf.count().alias("count_order"))
         .sort("l_returnflag", "l_linestatus"))
    df = q.collect()            # a polars DataFrame (kind="arrow" or "pandas" for the others)
    print(q.explain())          # logical, optimised and physical plans

Nothing runs until ``collect``/``sink_parquet``. Each run has its own intermediate prefix
(``<tmp>/_croupier_tmp/<run id>``, with a lease), deleted at the end, on success and on failure.
Paths and URLs are store locations with literal names (:mod:`croupier.storage.location`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import polars as pl

from croupier.compute.base import Executor
from croupier.config import Config
from croupier.dag.runner import DagRunner, StageOutput, read_output, scan_facts
from croupier.dag.scan import FORMATS, CsvOptions, ScanSpec, input_location, resolve
from croupier.dag.stage import ExchangeSink, OutputSink, Sink, SinglePartitioning
from croupier.dag.tiers import fast_tier_failure
from croupier.errors import ConfigError, CroupierError
from croupier.expr import Col, Expr, conjoin, count, expand, int_range, wrap
from croupier.frame.reference import to_polars
from croupier.plan.logical import Aggregate, Distinct, Filter, Join, Limit, Node, Project, Scan, Sort, Tagged, Union, mark_shared, walk
from croupier.plan.partial import hidden_prefix
from croupier.plan.optimize import optimize
from croupier.dag.run import Run
from croupier.plan.compile import Compiler, finish, preview_exchanges
from croupier.plan.output import commit_stage
from croupier.report import RunReport
from croupier.signals import handles_sigterm
from croupier.storage import Location, open_store, parse_location
from croupier.storage.commit import OutputCommit, check_disjoint

COLLECT_KINDS = ("polars", "arrow", "pandas")


class _Stores:
    """Opens stores for planning (schemas) before any run exists."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def store(self, url: str):  # type: ignore[no-untyped-def]
        return open_store(url, self.config)


def _as_url(path: str | Path) -> str:
    """The canonical URL of a scan's source (names literal, relative paths resolved now); a
    trailing ``/`` (a folder, never a file) is kept."""
    text = os.fspath(path)
    url = str(parse_location(text))
    return url + "/" if text.endswith("/") and not url.endswith("/") else url


@dataclass(frozen=True)
class _Output:
    """Where and how a run writes its output."""

    location: Location
    fmt: str
    max_rows_per_file: int | None
    overwrite: bool
    compression: str = "zstd"


#: Parquet compressions a sink writes (Polars' ``ParquetCompression``).
PARQUET_COMPRESSIONS = ("zstd", "snappy", "lz4", "gzip", "brotli", "uncompressed")


def _scan(url: str | Path, fmt: str, config: Config | None, csv: CsvOptions | None = None) -> LazyFrame:
    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {FORMATS}, got {fmt!r}")
    config = config or Config.from_env()
    spec = ScanSpec(_as_url(url), fmt, csv=csv or CsvOptions())
    schema, codec = scan_facts(spec, _Stores(config))
    return LazyFrame(Scan(replace(spec, codec=codec), schema), config)


def scan_parquet(source: str | Path, config: Config | None = None) -> LazyFrame:
    """Lazily read Parquet: one file, every file under a folder/prefix, or a glob (local or s3://)."""
    return _scan(source, "parquet", config)


def scan_csv(source: str | Path, separator: str = ",", has_header: bool = True, null_values: Sequence[str] = (), config: Config | None = None) -> LazyFrame:
    """Lazily read CSV (schema inferred from the first rows of the first file)."""
    return _scan(source, "csv", config, CsvOptions(separator=separator, has_header=has_header, null_values=tuple(null_values)))


def scan_gensort(source: str | Path, config: Config | None = None) -> LazyFrame:
    """Lazily read gensort records as columns ``key`` (10 bytes) and ``payload`` (90 bytes)."""
    return _scan(source, "gensort", config)


def scan_table(source: str | Path, config: Config | None = None) -> LazyFrame:
    """A TeraSort table: gensort objects, or Parquet objects with ``key`` and ``payload`` columns
    (the format is read off the object names, as ``croupier sort`` does)."""
    from croupier.ops.terasort import input_format

    config = config or Config.from_env()
    url = _as_url(source)
    _, objects = resolve(url, _Stores(config).store)
    return _scan(url, input_format(objects), config)


def concat(frames: Iterable[LazyFrame], how: str = "vertical") -> LazyFrame:
    """The rows of ``frames`` one after the other (equal schemas): Polars' ``pl.concat(how="vertical")``."""
    frames = list(frames)
    if how != "vertical":
        raise ConfigError(f"concat supports how='vertical' only, got {how!r}")
    if not frames:
        raise ConfigError("concat needs at least one frame")
    return frames[0]._with(Union(tuple(f._node for f in frames)))


def _exprs(items: Iterable[Any]) -> tuple[Expr, ...]:
    out: list[Expr] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            out += _exprs(item)
        else:
            out.append(Col(item) if isinstance(item, str) else wrap(item))
    return tuple(out)


def _names(items: Any) -> tuple[str, ...]:
    if items is None:
        return ()
    if isinstance(items, str):
        return (items,)
    return tuple(items)


@dataclass
class QueryResult:
    """What a run did: the stages it ran (with P and how it was chosen), decisions, and the report."""

    outputs: list[StageOutput] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report: RunReport | None = None
    compiler: Any = None
    tmp_url: str | None = None
    files: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The stages as run, each with measured against predicted time; the exchanges with the
        candidates the selector compared; the run-time decisions."""
        lines = ["physical stages as run:"]
        lines += ["  " + o.describe() for o in self.outputs]
        if self.report is not None:
            lines.append("measured against predicted, per stage (the model fed with what each stage measured):")
            lines += ["  " + _stage_line(s) for s in self.report.stages if s.predicted]
            for entry in self.report.exchanges:
                lines.append(f"exchange {entry['producer']} -> {entry['consumer']}: {entry['how']}")
                candidates = entry.get("candidates", [])
                for c in candidates[:5] + [c for c in candidates[5:] if c.get("chosen")]:
                    span = f"{c['low']:.3f}-{c['high']:.3f}" if "low" in c else ""
                    mark = "*" if c.get("chosen") else " "
                    lines.append(f"  {mark} {c['plan']:<18} P={c['workers']:<4} {c['seconds']:8.3f} s ({span})  dominant: {c['dominant']}")
                cached = f" (+ served from rows workers kept: {entry['cached_requests']})" if entry.get("cached_requests") else ""
                lines.append(f"    requests: plan {entry['predicted_requests']}, measured {entry.get('measured_requests')}{cached}")
        lines += ["decisions at run time:"] + ["  " + n for n in self.notes] if self.notes else []
        if self.report is not None:
            check = self.report.model_check()
            lines += [check] if check else []
            lines.append(f"wall {self.report.wall_seconds:.2f} s")
        return "\n".join(lines)


def _stage_line(stage: Any) -> str:
    p = stage.predicted
    cost = f"; ${p['measured_cost']:.6f} measured, ${p['cost']:.6f} predicted" if p.get("cost") or p.get("measured_cost") else ""
    span = f" ({p['low']:.3f}-{p['high']:.3f})" if "low" in p else ""
    return f"{stage.name:<24} measured {stage.wall_seconds:7.3f} s, predicted {p['seconds']:7.3f} s{span} (dominant: {p['dominant']}){cost}"


class GroupBy:
    """``frame.group_by(keys)``: call ``.agg(...)`` or ``.len()``."""

    def __init__(self, frame: LazyFrame, keys: tuple[Expr, ...], maintain_order: bool = False) -> None:
        self._frame, self._keys, self._maintain_order = frame, keys, maintain_order

    def agg(self, *aggs: Any) -> LazyFrame:
        """Aggregations per group (sum, count, mean, min, max, n_unique, std, var, median,
        null_count, len, first, last), or expressions over them such as
        ``col("a").sum() / col("b").sum()``; ``all()``/``exclude()`` stand for every column but
        the keys.
        With ``maintain_order``, the groups come in the order of their first rows in the input:
        each row is tagged with its position, each group keeps its least, and the groups are
        sorted on it (a range exchange when they are many)."""
        node = self._frame._node
        exprs = expand(_exprs(aggs), node.schema.names(), [k.output_name() for k in self._keys])  # (all() leaves the keys out, as in Polars)
        plain = Aggregate(node, self._keys, exprs)
        if not self._maintain_order or not self._keys:
            return self._frame._with(plain)
        tag = hidden_prefix([*node.schema.names(), *plain.schema.names()], "__first")
        grouped = Aggregate(Tagged(node, tag), self._keys, (*exprs, Col(tag).min().alias(tag)))
        ordered = Sort(grouped, (Col(tag),), (False,))
        return self._frame._with(Project(ordered, tuple(Col(c) for c in plain.schema.names())))

    def len(self, name: str | None = None) -> LazyFrame:
        """Rows per group, in a column ``name`` (default "len"), as Polars' ``group_by().len()``."""
        return self.agg(count().alias(name or "len"))


class LazyFrame:
    """A query not yet run: a logical plan and the config to run it with."""

    def __init__(self, node: Node, config: Config) -> None:
        self._node = node
        self.config = config
        self.last_run: QueryResult | None = None

    def _with(self, node: Node) -> LazyFrame:
        return LazyFrame(node, self.config)

    # --- schema ------------------------------------------------------------------------------
    @property
    def schema(self) -> pl.Schema:
        return self._node.schema

    @property
    def columns(self) -> list[str]:
        return list(self._node.schema)

    # --- transformations ---------------------------------------------------------------------
    def filter(self, *predicates: Any) -> LazyFrame:
        """Keep rows where every predicate holds (a predicate may aggregate, use windows, or
        test ``is_in(frame)``)."""
        node = self._node
        for p in _exprs(predicates):
            node = Filter(node, p)
        return self._with(node)

    def select(self, *exprs: Any) -> LazyFrame:
        """Exactly these columns. As in Polars, aggregations alone give one row; mixed with
        row-wise expressions they are repeated on every row."""
        return self._with(Project(self._node, expand(_exprs(exprs), self.columns), "select"))

    def with_columns(self, *exprs: Any) -> LazyFrame:
        """Add or replace columns (an aggregation is repeated on every row)."""
        return self._with(Project(self._node, expand(_exprs(exprs), self.columns), "with_columns"))

    def rename(self, mapping: Mapping[str, str], strict: bool = True) -> LazyFrame:
        """Columns renamed by ``mapping`` (old -> new), in place; ``strict``: a name not in the
        frame is an error (Polars' default)."""
        if strict:
            self._require("rename", mapping)
        return self.select(*[Col(c).alias(mapping[c]) if c in mapping else Col(c) for c in self.columns])

    def drop(self, *columns: str | Sequence[str], strict: bool = True) -> LazyFrame:
        """Every column but ``columns``; ``strict``: a name not in the frame is an error."""
        names = [c for item in columns for c in ([item] if isinstance(item, str) else item)]
        if strict:
            self._require("drop", names)
        return self.select(*[Col(c) for c in self.columns if c not in names])

    def drop_nulls(self, subset: str | Sequence[str] | None = None) -> LazyFrame:
        """Rows without a null in ``subset`` (default: in any column)."""
        names = [subset] if isinstance(subset, str) else list(subset or self.columns)
        keep = conjoin([Col(c).is_not_null() for c in names])
        return self if keep is None else self.filter(keep)

    def _require(self, what: str, names: Iterable[str]) -> None:
        """A ConfigError naming the first of ``names`` the frame has no column of."""
        missing = [c for c in names if c not in self.schema]
        if missing:
            raise ConfigError(f"{what}: no column {missing[0]!r}; the columns are {self.columns} (or pass strict=False)")

    def group_by(self, *keys: Any, maintain_order: bool = False) -> GroupBy:
        """Groups by ``keys`` (names or expressions); ``maintain_order``: the groups in the order
        of their first rows (Polars' meaning), else in any order."""
        return GroupBy(self, _exprs(keys), maintain_order)

    def join(
        self,
        other: LazyFrame,
        on: str | Sequence[str] | None = None,
        how: str = "inner",
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        suffix: str = "_right",
        coalesce: bool | None = None,
        nulls_equal: bool = False,
    ) -> LazyFrame:
        """Join with ``other``: inner, left, right, full, semi, anti on one or several equal keys
        (a null key matches nothing, or, ``nulls_equal``, a null key), or cross (no keys).
        ``coalesce`` merges the key columns as Polars does (default: yes, except for full joins)."""
        left, right = _names(left_on or on), _names(right_on or on)
        if how != "cross" and not left:
            raise ConfigError("join needs on=... or left_on=/right_on= (or how='cross')")
        return self._with(Join(self._node, other._node, left, right, how, suffix, coalesce, nulls_equal))

    def sort(self, by: Any, *more_by: Any, descending: bool | Sequence[bool] = False, nulls_last: bool | Sequence[bool] = False) -> LazyFrame:
        """Order by one or more keys, each ascending or descending, nulls first or last (a flag,
        or a list of flags, one per key)."""
        keys = _exprs([by, *more_by])
        flags = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if len(flags) != len(keys):
            raise ConfigError(f"sort got {len(keys)} keys but {len(flags)} descending flags")
        nulls = nulls_last if isinstance(nulls_last, bool) else tuple(nulls_last)
        return self._with(Sort(self._node, keys, tuple(flags), nulls))

    def head(self, n: int = 5) -> LazyFrame:
        return self._with(Limit(self._node, n))

    limit = head

    def tail(self, n: int = 5) -> LazyFrame:
        """The last ``n`` rows (Polars ``tail``): of the input's order, or of a sort's."""
        return self._with(Limit(self._node, n, from_end=True))

    def slice(self, offset: int, length: int | None = None) -> LazyFrame:
        """``length`` rows (all when None) from row ``offset`` on."""
        if offset < 0:
            raise ConfigError("slice needs offset >= 0")
        return self._with(Limit(self._node, length if length is not None else 2**63 - 1, offset))

    def top_k(self, k: int, by: Any, descending: bool | Sequence[bool] = True) -> LazyFrame:
        """The k rows with the largest ``by`` (smallest with ``descending=False``)."""
        return self.sort(by, descending=descending).head(k)

    def unique(self, subset: str | Sequence[str] | None = None, *, keep: str = "any", maintain_order: bool = False) -> LazyFrame:
        """Rows distinct on ``subset`` (all columns when None), as Polars' ``unique``: of each
        group of rows equal there, ``keep`` "first" or "last" (in input order; "any" keeps the
        first), or "none" drops every group of more than one row; ``maintain_order`` keeps the
        input order (the engine always does, except for whole distinct rows kept "any" way).

        Whole distinct rows are a distributed distinct; the rest is a filter over a window on the
        subset (the row's position in its group, or the group's size), which the engine runs
        with the input order kept."""
        if keep not in ("any", "first", "last", "none"):
            raise ConfigError(f"unique: keep must be 'any', 'first', 'last' or 'none', got {keep!r}")
        keys = [subset] if isinstance(subset, str) else list(subset) if subset is not None else self.columns
        missing = [c for c in keys if c not in self.schema]
        if missing:
            raise ConfigError(f"unique: no column {missing[0]!r} in subset; the columns are {self.columns}")
        if subset is None and keep != "none" and not maintain_order:
            return self._with(Distinct(self._node))
        size = count().over(*keys)
        if keep == "none":
            return self.filter(size == 1)
        position = int_range(0, count()).over(*keys)
        return self.filter(position == (size - 1 if keep == "last" else 0))

    distinct = unique

    def len(self) -> LazyFrame:
        """The number of rows, as a one-row frame with column "len" (UInt32): Polars'
        ``select(pl.len())`` (Polars' LazyFrame has no ``len``)."""
        return self.select(count())

    def count(self) -> LazyFrame:
        """Non-null values per column, one row: Polars' ``LazyFrame.count()``."""
        return self.select(*[Col(c).count() for c in self.columns])

    def to_polars(self, optimized: bool = True, partials: int = 0) -> pl.LazyFrame:
        """The same query as a Polars LazyFrame on this machine (local files only).

        This is the reference meaning of the plan (:mod:`croupier.frame.reference`). By default
        the optimised plan is translated (rewritten into the core nodes the engine runs, with
        pushdowns), so it checks the rewrites; ``optimized=False`` translates the plan as written.
        ``partials`` > 0 runs every aggregation as partial steps over that many chunks then a
        final step, as the stages do.
        """
        return to_polars(self.optimized_plan() if optimized else self._node, partials)

    # --- plans -----------------------------------------------------------------------------------
    def optimized_plan(self) -> Node:
        return optimize(self._node)

    def explain(self, optimized: bool = True, analyze: bool = False, executor: Executor | None = None, plot: str | Path | None = None) -> str:
        """The logical plan, the optimised plan and the physical stages with their exchanges.

        Without ``analyze`` the physical plan is a preview: join strategy and P are decided at run
        time and shown as such. With ``analyze=True`` the query runs and the stages actually run
        are shown with P, how the selector chose it, and the join/sort decisions; ``plot`` (with
        ``analyze``) also draws the run as a timeline of functions by phase to that file.
        """
        parts = ["logical plan:", mark_shared(self._node).tree(1)]
        plan = self.optimized_plan()
        if optimized:
            parts += ["optimized plan:", mark_shared(plan).tree(1)]
            if "<shared #" in parts[-1]:
                parts.append("  (#n: a node read by several parents, computed once)")
        if analyze:
            self.collect(executor=executor)
            assert self.last_run is not None
            parts.append(self.last_run.describe())
            if plot is not None and self.last_run.report is not None:
                from croupier.timeline import plot_timeline

                drawn = plot_timeline(self.last_run.report, str(plot))
                parts.append(f"timeline of {drawn} tasks drawn to {plot}")
            return "\n".join(parts)
        compiler = Compiler(None, self.config, dry=True)
        try:
            finish(compiler, compiler.compile(plan), ExchangeSink(SinglePartitioning()))
        except ConfigError as exc:
            parts.append(f"physical stages: not available: {exc}")
            return "\n".join(parts)
        parts.append("physical stages (preview; P, algorithm and topology are chosen per exchange at run time by the selector):")
        parts += ["  " + s.describe() for s in compiler.stages]
        parts += ["  note: " + n for n in compiler.notes]
        estimates = preview_exchanges(compiler, _Stores(self.config).store)
        if estimates:
            parts.append("exchanges, as the selector sees them from the input sizes (candidates compared, dominant term):")
            parts += ["  " + line for line in estimates]
        return "\n".join(parts)

    # --- running -----------------------------------------------------------------------------------
    def _tmp_base(self, output: Location | None) -> Location:
        """Where a run keeps its temporaries unless ``config.tmp_url`` says: beside the output
        being written, else the first scan's bucket (S3) or the system's temporary folder."""
        if output is not None:
            return output
        first = next(n for n in _walk(self._node) if isinstance(n, Scan))
        scanned = parse_location(first.spec.url)
        if scanned.is_s3:
            return Location("s3", scanned.bucket, "")
        return parse_location(os.path.join(tempfile.gettempdir(), "croupier"))

    def _inputs(self) -> list[Location]:
        """The locations the query reads (a glob's folder stands for the glob)."""
        return [input_location(n.spec.url) for n in _walk(self._node) if isinstance(n, Scan)]

    @handles_sigterm  # SIGTERM cleans up like Ctrl-C (issue 12, promise 6)
    def _run(self, sink: Sink | None, config: Config | None, executor: Executor | None, read: bool, job: str = "query", output: _Output | None = None) -> tuple[pl.DataFrame | None, StageOutput, QueryResult]:
        """Run the plan (see :meth:`_run_once`). A run whose fast tier filled up or died (see
        :func:`croupier.dag.tiers.fast_tier_failure`) has cleaned up and committed nothing; it
        is run once more with every exchange on the slow tier, and its report says so
        (``summary["fast_tier_fallback"]``)."""
        config = config or self.config
        try:
            return self._run_once(sink, config, executor, read, job, output)
        except CroupierError as exc:
            reason = fast_tier_failure(exc, config)
            if reason is None:
                raise
            failed = self.last_run.report if self.last_run is not None else None
        frame, out, result = self._run_once(sink, config.with_(tier="slow"), executor, read, job, output)
        if result.report is not None:
            result.report.summary["fast_tier_fallback"] = {
                "reason": reason,
                "failed_run": failed.run_id if failed is not None else None,
                "cleanup": failed.summary.get("cleanup", []) if failed is not None else [],
                "rerun": "every exchange on the slow tier",
            }
            result.notes.append(f"{reason}; ran again with every exchange on the slow tier")
        return frame, out, result

    def _run_once(self, sink: Sink | None, config: Config | None, executor: Executor | None, read: bool, job: str = "query", output: _Output | None = None) -> tuple[pl.DataFrame | None, StageOutput, QueryResult]:
        """Run the plan into ``sink``, or with ``output`` into that output: refused before any
        work if it overlaps an input; its writer lock taken and its location checked first; its
        manifest written when the last stage has finished (its requests count as the driver's)."""
        config = config or self.config
        if output is not None:
            check_disjoint(output.location, self._inputs())
        run = Run(job, config, executor)
        config = run.config  # the executor's platform limits (e.g. Lithops) included
        result = QueryResult()
        runner: DagRunner | None = None
        commit: OutputCommit | None = None
        try:
            runner = DagRunner(run, str(run.open_tmp(self._tmp_base(output.location if output is not None else None))))
            result.compiler = compiler = Compiler(runner, config)
            if output is not None:
                commit = run.begin_output(output.location, output.overwrite)
                sink = OutputSink(str(output.location), output.fmt, commit.tag, output.max_rows_per_file, output.compression)
            assert sink is not None
            plan = self.optimized_plan()
            runner.scans.prefetch(n.spec for n in _walk(plan) if isinstance(n, Scan))  # every table listed at once
            last = finish(compiler, compiler.compile(plan), sink)
            out = runner.result(last)
            frame = read_output(runner, out) if read else None
            if commit is not None:
                result.files = commit_stage(commit, out, {"job": job, "run_id": run.run_id})
        except BaseException:
            if runner is not None:
                runner.wait_all()
            run.drain()  # losing backup copies on Lithops end before their parts are deleted
            if commit is not None:
                commit.abort()
            raise
        finally:
            if runner is not None:
                runner.close()
                result.outputs, result.tmp_url = list(runner.outputs), runner.tmp_url
            run.drain()  # losing backup copies on Lithops end before the temporaries go
            result.notes = result.compiler.notes if result.compiler is not None else []
            result.report = run.finish()
            self.last_run = result
        return frame, out, result

    def collect(self, kind: str = "polars", config: Config | None = None, executor: Executor | None = None) -> Any:
        """Run the query; return a polars DataFrame, or an Arrow table (``kind="arrow"``) or pandas."""
        if kind not in COLLECT_KINDS:
            raise ConfigError(f"collect kind must be one of {COLLECT_KINDS}, got {kind!r}")
        frame, _, _ = self._run(ExchangeSink(SinglePartitioning(), to_driver=True), config, executor, read=True)
        assert frame is not None
        frame = frame.rechunk()
        if kind == "arrow":
            return frame.to_arrow()
        if kind == "pandas":
            try:
                import pandas  # noqa: F401
            except ImportError as exc:
                raise ConfigError("collect(kind='pandas') needs pandas: pip install 'croupier[pandas]'") from exc
            return frame.to_pandas()
        return frame

    def sink_parquet(
        self,
        path: str | Path,
        max_rows_per_file: int | None = None,
        overwrite: bool = False,
        config: Config | None = None,
        executor: Executor | None = None,
        compression: str = "zstd",
    ) -> list[str]:
        """Run the query and write its rows as Parquet part files under ``path`` (a folder/prefix),
        compressed with ``compression`` (as Polars' ``sink_parquet``: "zstd", its default,
        "snappy", "lz4", "gzip", "brotli" or "uncompressed").

        Files are named ``part-<task>-<run tag>[-<n>].parquet`` in row order and listed by the
        ``_SUCCESS`` manifest, written last: the one commit point. On failure nothing changes under
        ``path`` (an old output stays as it was).
        """
        if compression not in PARQUET_COMPRESSIONS:
            raise ConfigError(f"sink_parquet: compression {compression!r} is not one of {', '.join(PARQUET_COMPRESSIONS)}")
        return self._sink(path, "parquet", max_rows_per_file, overwrite, config, executor, compression=compression)

    def sink_csv(
        self, path: str | Path, max_rows_per_file: int | None = None, overwrite: bool = False, config: Config | None = None, executor: Executor | None = None
    ) -> list[str]:
        """Run the query and write its rows as CSV part files (each with a header) under ``path``.

        The same commit protocol as :meth:`sink_parquet`: parts named ``part-<task>-<run tag>[-<n>].csv``
        in row order, listed by the ``_SUCCESS`` manifest written last. Polars' ``sink_csv`` writes one
        file; here each task writes its own parts so that no task waits for another.
        """
        return self._sink(path, "csv", max_rows_per_file, overwrite, config, executor)

    def _sink(
        self, path: str | Path, fmt: str, max_rows_per_file: int | None, overwrite: bool, config: Config | None, executor: Executor | None, job: str = "query", compression: str = "zstd"
    ) -> list[str]:
        location = parse_location(path)
        _, _, result = self._run(None, config, executor, read=False, job=job, output=_Output(location, fmt, max_rows_per_file, overwrite, compression))
        return [str(location.join(f)) for f in result.files]


def _walk(node: Node) -> Iterable[Node]:
    return walk(node)

