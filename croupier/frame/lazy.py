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
(``<tmp>/_croupier_tmp/<run id>``), deleted at the end, on success and on failure.
"""

from __future__ import annotations

import posixpath
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import polars as pl

from croupier.compute.base import Executor
from croupier.config import Config
from croupier.dag.runner import DagRunner, StageOutput, read_output, scan_schema
from croupier.dag.scan import FORMATS, CsvOptions, ScanSpec, resolve
from croupier.dag.stage import ExchangeSink, OutputSink, Sink, SinglePartitioning
from croupier.errors import ConfigError
from croupier.expr import Col, Expr, wrap
from croupier.plan.logical import Aggregate, Distinct, Filter, Join, Limit, Node, Project, Scan, Sort
from croupier.plan.optimize import optimize
from croupier.dag.run import Run
from croupier.plan.compile import Compiler, finish, preview_exchanges
from croupier.plan.output import OutputWriter
from croupier.report import RunReport
from croupier.storage import open_store, split_url

COLLECT_KINDS = ("polars", "arrow", "pandas")


class _Stores:
    """Opens stores for planning (schemas) before any run exists."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def store(self, url: str):  # type: ignore[no-untyped-def]
        return open_store(url, self.config)


def _as_url(path: str | Path) -> str:
    text = str(path)
    scheme = split_url(text)[0]
    if scheme == "file" and not text.startswith("file:"):
        # a plain absolute path, not Path.as_uri(): that would percent-encode glob characters
        return str(Path(text).resolve()) + ("/" if text.endswith("/") else "")
    return text


def _scan(url: str | Path, fmt: str, config: Config | None, csv: CsvOptions | None = None) -> LazyFrame:
    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {FORMATS}, got {fmt!r}")
    config = config or Config.from_env()
    spec = ScanSpec(_as_url(url), fmt, csv=csv or CsvOptions())
    return LazyFrame(Scan(spec, scan_schema(spec, _Stores(config))), config)


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
                for c in entry.get("candidates", [])[:5]:
                    span = f"{c['low']:.3f}-{c['high']:.3f}" if "low" in c else ""
                    lines.append(f"    {c['plan']:<18} P={c['workers']:<4} {c['seconds']:8.3f} s ({span})  dominant: {c['dominant']}")
                lines.append(f"    requests: plan {entry['predicted_requests']}, measured {entry.get('measured_requests')}")
        lines += ["decisions at run time:"] + ["  " + n for n in self.notes] if self.notes else []
        if self.report is not None:
            lines.append(f"wall {self.report.wall_seconds:.2f} s")
        return "\n".join(lines)


def _stage_line(stage: Any) -> str:
    p = stage.predicted
    cost = f"; ${p['measured_cost']:.6f} measured, ${p['cost']:.6f} predicted" if p.get("cost") or p.get("measured_cost") else ""
    span = f" ({p['low']:.3f}-{p['high']:.3f})" if "low" in p else ""
    return f"{stage.name:<24} measured {stage.wall_seconds:7.3f} s, predicted {p['seconds']:7.3f} s{span} (dominant: {p['dominant']}){cost}"


class GroupBy:
    """``frame.group_by(keys)``: call ``.agg(...)``."""

    def __init__(self, frame: LazyFrame, keys: tuple[Expr, ...]) -> None:
        self._frame, self._keys = frame, keys

    def agg(self, *aggs: Any) -> LazyFrame:
        """Aggregations per group: sum, count, mean, min, max, n_unique, and count() for rows."""
        return self._frame._with(Aggregate(self._frame._node, self._keys, _exprs(aggs)))

    def len(self, name: str = "len") -> LazyFrame:
        from croupier.expr import count

        return self.agg(count().alias(name))


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
        """Keep rows where every predicate holds."""
        node = self._node
        for p in _exprs(predicates):
            node = Filter(node, p)
        return self._with(node)

    def select(self, *exprs: Any) -> LazyFrame:
        return self._with(Project(self._node, _exprs(exprs), "select"))

    def with_columns(self, *exprs: Any) -> LazyFrame:
        return self._with(Project(self._node, _exprs(exprs), "with_columns"))

    def group_by(self, *keys: Any) -> GroupBy:
        return GroupBy(self, _exprs(keys))

    def join(
        self,
        other: LazyFrame,
        on: str | Sequence[str] | None = None,
        how: str = "inner",
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        suffix: str = "_right",
    ) -> LazyFrame:
        """Equi-join (inner, left, semi, anti) with ``other`` on one or several keys."""
        left, right = _names(left_on or on), _names(right_on or on)
        if not left:
            raise ConfigError("join needs on=... or left_on=/right_on=")
        return self._with(Join(self._node, other._node, left, right, how, suffix))

    def sort(self, by: Any, *more_by: Any, descending: bool | Sequence[bool] = False, nulls_last: bool = False) -> LazyFrame:
        """Order by one or more keys, each ascending or descending (a list of flags)."""
        keys = _exprs([by, *more_by])
        flags = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if len(flags) != len(keys):
            raise ConfigError(f"sort got {len(keys)} keys but {len(flags)} descending flags")
        return self._with(Sort(self._node, keys, tuple(flags), nulls_last))

    def head(self, n: int = 5) -> LazyFrame:
        return self._with(Limit(self._node, n))

    limit = head

    def top_k(self, k: int, by: Any, descending: bool | Sequence[bool] = True) -> LazyFrame:
        """The k rows with the largest ``by`` (smallest with ``descending=False``)."""
        return self.sort(by, descending=descending).head(k)

    def unique(self) -> LazyFrame:
        """Distinct rows."""
        return self._with(Distinct(self._node))

    distinct = unique

    def to_polars(self) -> pl.LazyFrame:
        """The same query as a Polars LazyFrame on this machine (local files only): for debugging,
        for small data, and as a peer in benchmarks."""
        return _polars(self._node)

    # --- plans -----------------------------------------------------------------------------------
    def optimized_plan(self) -> Node:
        return optimize(self._node)

    def explain(self, optimized: bool = True, analyze: bool = False, executor: Executor | None = None) -> str:
        """The logical plan, the optimised plan and the physical stages with their exchanges.

        Without ``analyze`` the physical plan is a preview: join strategy and P are decided at run
        time and shown as such. With ``analyze=True`` the query runs and the stages actually run
        are shown with P, how the selector chose it, and the join/sort decisions.
        """
        parts = ["logical plan:", self._node.tree(1)]
        plan = self.optimized_plan()
        if optimized:
            parts += ["optimized plan:", plan.tree(1)]
        if analyze:
            self.collect(executor=executor)
            assert self.last_run is not None
            parts.append(self.last_run.describe())
            return "\n".join(parts)
        compiler = Compiler(None, self.config, dry=True)
        finish(compiler, compiler.compile(plan), ExchangeSink(SinglePartitioning()))
        parts.append("physical stages (preview; P, algorithm and topology are chosen per exchange at run time by the selector):")
        parts += ["  " + s.describe() for s in compiler.stages]
        parts += ["  note: " + n for n in compiler.notes]
        estimates = preview_exchanges(compiler, _Stores(self.config).store)
        if estimates:
            parts.append("exchanges, as the selector sees them from the input sizes (candidates compared, dominant term):")
            parts += ["  " + line for line in estimates]
        return "\n".join(parts)

    # --- running -----------------------------------------------------------------------------------
    def _tmp_base(self, config: Config, output_url: str | None = None) -> str:
        """Where a run keeps its temporaries: ``config.tmp_url``, else beside the output being
        written, else the first scan's bucket (S3) or the system's temporary folder."""
        if config.tmp_url:
            return config.tmp_url.rstrip("/")
        if output_url is not None:
            return output_url.rstrip("/")
        first = next(n for n in _walk(self._node) if isinstance(n, Scan))
        scheme, bucket, _ = split_url(first.spec.url)
        if scheme == "s3":
            return f"s3://{bucket}"
        return Path(tempfile.gettempdir()).joinpath("croupier").as_uri()

    def _run(self, sink: Sink, config: Config | None, executor: Executor | None, read: bool, job: str = "query", output: OutputWriter | None = None) -> tuple[pl.DataFrame | None, StageOutput, QueryResult]:
        """Run the plan into ``sink``; with ``output``, check the output location first and commit
        it when the last stage has finished (its requests count as the driver's)."""
        config = config or self.config
        run = Run(job, config, executor)
        config = run.config  # the executor's platform limits (e.g. Lithops) included
        runner = DagRunner(run, f"{self._tmp_base(config, output.url if output is not None else None)}/_croupier_tmp/{run.run_id}")
        compiler = Compiler(runner, config)
        result = QueryResult()
        try:
            if output is not None:
                output.attach(run.store(output.url), run.run_id)
                output.begin()
            last = finish(compiler, compiler.compile(self.optimized_plan()), sink)
            out = runner.result(last)
            frame = read_output(runner, out) if read else None
            if output is not None:
                result.files = output.commit(out, {"job": job, "run_id": run.run_id})
        except BaseException:
            runner.wait_all()
            if output is not None:
                output.abort()
            raise
        finally:
            runner.close()
            run.drain()  # losing backup copies on Lithops end before the temporaries go
            run.store(runner.tmp_url).delete_prefix()
            result.outputs, result.notes, result.compiler, result.tmp_url = list(runner.outputs), compiler.notes, compiler, runner.tmp_url
            result.report = run.finish()
            self.last_run = result
        return frame, out, result

    def collect(self, kind: str = "polars", config: Config | None = None, executor: Executor | None = None) -> Any:
        """Run the query; return a polars DataFrame, or an Arrow table (``kind="arrow"``) or pandas."""
        if kind not in COLLECT_KINDS:
            raise ConfigError(f"collect kind must be one of {COLLECT_KINDS}, got {kind!r}")
        frame, _, _ = self._run(ExchangeSink(SinglePartitioning()), config, executor, read=True)
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
        self, path: str | Path, max_rows_per_file: int | None = None, overwrite: bool = False, config: Config | None = None, executor: Executor | None = None
    ) -> list[str]:
        """Run the query and write its rows as Parquet part files under ``path`` (a folder/prefix).

        Files are named ``part-<task>-<run tag>[-<n>].parquet`` in row order and listed by the
        ``_SUCCESS`` manifest, written last: the one commit point. On failure nothing changes under
        ``path`` (an old output stays as it was).
        """
        return self._sink(path, "parquet", max_rows_per_file, overwrite, config, executor)

    def _sink(self, path: str | Path, fmt: str, max_rows_per_file: int | None, overwrite: bool, config: Config | None, executor: Executor | None, job: str = "query") -> list[str]:
        url = _as_url(str(path).rstrip("/"))
        writer = OutputWriter(url, overwrite)
        _, _, result = self._run(OutputSink(url, fmt, writer.tag, max_rows_per_file), config, executor, read=False, job=job, output=writer)
        return [posixpath.join(url, f) for f in result.files]


def _polars(node: Node) -> pl.LazyFrame:
    """Translate a logical plan node by node into Polars' lazy API."""
    if isinstance(node, Scan):
        if split_url(node.spec.url)[0] != "file":
            raise ConfigError(f"to_polars() reads local files only, not {node.spec.url}")
        if node.spec.format == "gensort":
            raise ConfigError("to_polars() cannot read gensort files")
        base, objects = resolve(node.spec.url, _Stores(Config()).store)
        files = [str(Path(split_url(base)[2]) / o.key) for o in objects]
        csv = node.spec.csv
        scan = pl.scan_parquet(files) if node.spec.format == "parquet" else pl.scan_csv(files, separator=csv.separator, has_header=csv.has_header)
        if node.spec.predicate is not None:
            scan = scan.filter(node.spec.predicate.to_polars())
        return scan.select(list(node.schema))
    if isinstance(node, Filter):
        return _polars(node.input).filter(node.predicate.to_polars())
    if isinstance(node, Project):
        exprs = [e.to_polars() for e in node.exprs]
        child = _polars(node.input)
        return child.select(exprs) if node.kind == "select" else child.with_columns(exprs)
    if isinstance(node, Aggregate):
        child = _polars(node.input)
        aggs = [a.to_polars() for a in node.aggs]
        keys = [k.to_polars() for k in node.keys]
        if not keys:
            return child.select(aggs)
        if not aggs:
            return child.select(keys).unique(maintain_order=True)
        return child.group_by(keys, maintain_order=True).agg(aggs)
    if isinstance(node, Join):
        return _polars(node.left).join(_polars(node.right), left_on=list(node.left_on), right_on=list(node.right_on), how=node.how, suffix=node.suffix)  # type: ignore[arg-type]
    if isinstance(node, Sort):
        return _polars(node.input).sort([e.to_polars() for e in node.by], descending=list(node.descending), nulls_last=node.nulls_last, maintain_order=True)
    if isinstance(node, Limit):
        return _polars(node.input).head(node.n)
    if isinstance(node, Distinct):
        return _polars(node.input).unique(maintain_order=True)
    raise ConfigError(f"to_polars() cannot translate {node.label()}")


def _walk(node: Node) -> Iterable[Node]:
    yield node
    for child in node.children():
        yield from _walk(child)

