"""Planning a query at cloud scale: its stages from a dry compile, its exchanges sized from the
tables' sizes, each planned by the selector (see :mod:`croupier.plan.cloud`).

Tables are given as ``NAME=SIZE`` (a TPC-H table: its schema comes from a tiny generated copy) or
``NAME=URL`` (real files: schema and bytes from them). The query is SQL text, ``@FILE``, or a
TPC-H query number. Every partitioned exchange whose producers scan a table is sized by the
table's bytes times the share of its columns the scan keeps; a later exchange by what flows into
its producers (an upper bound: filters, aggregates and joins are taken to keep everything).
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path
from typing import Any

from croupier.config import Config
from croupier.errors import ConfigError, CroupierError
from croupier.units import parse_size

#: Rows per TPC-H schema copy: the smallest scale dbgen makes (only the schema is used).
SCHEMA_SCALE = 0.001
#: Bytes a scan task reads at most (M of a scan-fed exchange = table bytes / this).
SPLIT_BYTES = 128 * 2**20


def query_text(query: str) -> str:
    """SQL text of ``query``: the text, @FILE, or TPC-H query N (``3`` or ``q3``)."""
    if query.startswith("@"):
        return Path(query[1:]).read_text()
    match = re.fullmatch(r"[qQ]?(\d{1,2})", query.strip())
    if match:
        from croupier.examples.tpc import reference_sql

        return reference_sql("tpch", int(match.group(1)))
    return query


def table_sources(tables: dict[str, str]) -> tuple[dict[str, str], dict[str, float]]:
    """URLs the SQL front-end reads schemas from, and the bytes of each table's URL."""
    from croupier.examples.tpc import ALL_TABLES, generate

    urls: dict[str, str] = {}
    sizes: dict[str, float] = {}
    tpch = set(ALL_TABLES["tpch"])
    schema_dir: dict[str, Path] | None = None
    for name, value in tables.items():
        try:
            size = float(parse_size(value))
        except ValueError:
            urls[name] = value
            continue
        if name.lower() not in tpch:
            raise ConfigError(f"--table {name}={value}: only TPC-H tables can be given by size (their schema is known); give {name}=URL of real files")
        if schema_dir is None:
            schema_dir = generate("tpch", SCHEMA_SCALE, Path(tempfile.gettempdir()) / "croupier-plan-schemas", tables=ALL_TABLES["tpch"])
        urls[name] = str(schema_dir[name.lower()])
        sizes[urls[name]] = size
    return urls, sizes


def plan_query(query: str, tables: dict[str, str], options: Any) -> Any:
    """A :class:`croupier.plan.cloud.CloudPlan` for ``query`` over ``tables``."""
    from croupier.dag.binding import stage_kinds
    from croupier.dag.stage import ExchangeInput, ExchangeSink, ScanSource, SinglePartitioning, UnionSource
    from croupier.plan.cloud import CloudPlan, PlannedExchange, _choose_query, exchange_cost, exchange_profile, stage_names
    from croupier.plan.compile import Compiler, finish
    from croupier.sql import sql

    if not tables:
        raise ConfigError("a query plan needs its tables: --table lineitem=600GB ... (or NAME=URL)")
    text = query_text(query)
    urls, sizes = table_sources(tables)
    config = Config.from_env()
    frame = sql(text, urls, config=config)
    compiler = Compiler(None, config, dry=True)
    finish(compiler, compiler.compile(frame.optimized_plan()), ExchangeSink(SinglePartitioning()))
    stages = compiler.stages
    out_bytes: dict[str, float] = {}

    def scan_bytes(source: Any) -> float:
        spec = source.spec
        given = [size for path, size in sizes.items() if spec.url == path or spec.url.endswith(path)]
        total = given[0] if given else _listed_bytes(spec.url, config)
        schema = source.file_schema
        if spec.columns is not None and schema:
            total *= max(1, len(spec.columns)) / max(1, len(schema))
        return total

    def inputs(stage: Any) -> float:
        src = stage.source
        if isinstance(src, ScanSource):
            total = scan_bytes(src)
        elif isinstance(src, ExchangeInput):
            total = out_bytes.get(src.stage.name, 0.0)
        elif isinstance(src, UnionSource):
            total = sum(out_bytes.get(i.stage.name, 0.0) for i in src.inputs)
        else:
            total = 0.0
        return total + sum(out_bytes.get(side.stage.name, 0.0) for side in stage.sides.values())

    consumers: dict[str, Any] = {}
    for stage in stages:
        srcs = [stage.source] if isinstance(stage.source, ExchangeInput) else list(getattr(stage.source, "inputs", ()))
        for src in srcs + list(stage.sides.values()):
            consumers.setdefault(src.stage.name, stage)

    def fmt(rep: str) -> str:
        return "raw" if rep == "records" else "arrow-zstd"

    planned = []
    notes = [
        "exchange sizes are upper bounds: each stage is taken to pass on all it reads (scans: the table's bytes times the share of columns kept)",
        "stage times add up as if independent branches ran one after the other (the DAG runner overlaps them: an upper bound)",
    ]
    platform = profile = None
    for stage in stages:
        out_bytes[stage.name] = inputs(stage)
        sink = stage.sink
        if not isinstance(sink, ExchangeSink) or isinstance(sink.partitioning, SinglePartitioning):
            continue
        nbytes = max(1, int(out_bytes[stage.name]))
        consumer = consumers.get(stage.name)
        phases = {"map": stage_kinds(stage, fmt)}
        if consumer is not None:
            phases["reduce"] = stage_kinds(consumer, fmt)
        senders = max(1, math.ceil(nbytes / SPLIT_BYTES)) if isinstance(stage.source, ScanSource) else None
        platform, profile, tier = exchange_profile(options, nbytes)
        try:
            choice = _choose_query(nbytes, profile, options, senders, phases)
        except CroupierError as exc:
            notes.append(f"{stage.name}: not planned ({exc})")
            continue
        best = choice.best
        cname = consumer.name if consumer is not None else "consumers"
        names = (stage.name,) + tuple(f"{stage.name} {name}" for name in stage_names(best.plan)[1:-1]) + (cname,)
        cost = exchange_cost(best, profile, platform.prices, tier, output_writes=False)
        kind = type(sink.partitioning).__name__.removesuffix("Partitioning").lower()
        planned.append(PlannedExchange(f"{stage.name} -> {cname} ({kind})", nbytes, "from scanned table sizes" if isinstance(stage.source, ScanSource) else "upper bound from its inputs", choice, cost, names))
    if not planned or platform is None or profile is None:
        raise ConfigError("the query has no partitioned exchange to plan (it runs as one task after its scans); nothing to choose")
    names = ", ".join(f"{k}={v}" for k, v in tables.items())
    return CloudPlan(f"query over {names}", platform, profile, options, tuple(planned), tuple(notes))


def _listed_bytes(url: str, config: Config) -> float:
    from croupier.dag.scan import resolve
    from croupier.frame.lazy import _Stores

    try:
        _, objects = resolve(url, _Stores(config).store)
    except (CroupierError, OSError) as exc:
        raise ConfigError(f"cannot list {url} for its size ({exc}); give the table as NAME=SIZE") from exc
    return float(sum(o.size for o in objects))
