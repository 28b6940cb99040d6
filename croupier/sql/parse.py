"""SQL text to an optimised sqlglot tree: parse (DuckDB dialect), qualify, normalise, decorrelate.

The work is sqlglot's optimizer (:data:`RULES`): every column is qualified with its table alias,
stars are expanded, conditions normalised, subqueries decorrelated into joins where sqlglot can
(``unnest_subqueries``), derived tables merged, unused CTEs dropped, expressions simplified.

One adjustment: sqlglot decorrelates an EXISTS whose correlation is not only equalities into
array aggregates and lambdas. Croupier keeps such a subquery (wrapped in ``CROUPIER_KEEP(...)``,
which sqlglot leaves alone) and decorrelates it itself into joins (:mod:`croupier.sql.query`).

The names of the result's columns are DuckDB's: the alias as written, the column's name, or for
an unnamed expression DuckDB's text of it (``sum(x)``, ``count_star()``).
"""

from __future__ import annotations

import inspect
import math
import re

from dataclasses import dataclass
from typing import Iterable

import polars as pl
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.canonicalize import canonicalize
from sqlglot.optimizer.eliminate_ctes import eliminate_ctes
from sqlglot.optimizer.eliminate_joins import eliminate_joins
from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.normalize import normalize
from sqlglot.optimizer.optimize_joins import optimize_joins
from sqlglot.optimizer.pushdown_predicates import pushdown_predicates
from sqlglot.optimizer.pushdown_projections import pushdown_projections
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.qualify_columns import quote_identifiers
from sqlglot.optimizer.scope import traverse_scope
from sqlglot.schema import ensure_schema
from sqlglot.optimizer.simplify import simplify
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries

from croupier.errors import ConfigError
from croupier.sql.types import sql_type

DIALECT = "duckdb"
KEEP = "CROUPIER_KEEP"


def sql_text(e: exp.Expr) -> str:
    """``e`` as DuckDB's SQL text (error messages; the key of a subtree already translated)."""
    return e.sql(dialect=DIALECT)


def unfilter_aggregates(expression: exp.Expr) -> exp.Expr:
    """``agg(x) FILTER (WHERE c)`` as ``agg(CASE WHEN c THEN x END)``: SQL aggregates skip NULLs,
    so both see the same values (``count(*)`` counts ``CASE WHEN c THEN 1 END``); list() keeps
    NULLs, so its FILTER is refused."""
    for node in list(expression.find_all(exp.Filter)):
        agg, where = node.this, node.expression
        if not isinstance(agg, exp.AggFunc) or not isinstance(where, exp.Where):
            raise ConfigError(f"SQL: {node.sql(DIALECT)}: FILTER (WHERE ...) applies to an aggregate function")
        if isinstance(agg, exp.ArrayAgg):  # keeps NULLs: CASE WHEN c THEN x END would add them
            raise ConfigError(f"SQL: {node.sql(DIALECT)}: FILTER on list()/array_agg() is not supported; filter the rows in a subquery")
        cond = where.this
        agg = agg.copy()
        if isinstance(agg, exp.Count) and (agg.this is None or isinstance(agg.this, exp.Star)):
            agg.set("this", exp.Case(ifs=[exp.If(this=cond.copy(), true=exp.Literal.number(1))]))
        else:
            target = agg.this.expressions[0] if isinstance(agg.this, exp.Distinct) and len(agg.this.expressions) == 1 else agg.this
            target = target.this if isinstance(target, exp.Order) else target  # list(x ORDER BY y): x
            if target is None or agg.expressions:
                raise ConfigError(f"SQL: {node.sql(DIALECT)}: FILTER is supported on aggregates of one argument")
            target.replace(exp.Case(ifs=[exp.If(this=cond.copy(), true=target.copy())]))
        node.replace(agg)
    return expression


def order_by_all(expression: exp.Expr) -> exp.Expr:
    """DuckDB's ``ORDER BY ALL`` (``DESC``, ``NULLS FIRST``): every output column, left to right.
    Runs after ``qualify``, which has expanded stars and named every output column."""
    for order in list(expression.find_all(exp.Order)):
        if len(order.expressions) != 1 or not _is_all(order.expressions[0].this):
            if any(_is_all(o.this) for o in order.expressions):
                raise ConfigError("SQL: ORDER BY ALL cannot be combined with other ORDER BY keys")
            continue
        select = order.parent
        while isinstance(select, (exp.SetOperation, exp.Subquery)):
            select = select.this
        if not isinstance(select, exp.Select):
            raise ConfigError("SQL: ORDER BY ALL needs a SELECT")
        template = order.expressions[0]
        order.set("expressions", [exp.Ordered(this=exp.column(p.alias_or_name, quoted=True), desc=template.args.get("desc"), nulls_first=template.args.get("nulls_first")) for p in select.expressions])
    return expression


def group_by_all(expression: exp.Expr) -> exp.Expr:
    """DuckDB's ``GROUP BY ALL``: group by every select-list expression that reads a column and
    holds no aggregate or window (a constant is no key: ``SELECT 1, count(*) ... GROUP BY ALL``
    over no rows still answers one row). Runs after ``qualify``, which has expanded stars."""
    for group in list(expression.find_all(exp.Group)):
        if not group.args.get("all"):
            continue
        select = group.parent
        keys = [p.unalias().copy() for p in select.expressions if _is_grouping_key(p)]
        if keys:
            group.replace(exp.Group(expressions=keys))
        else:
            group.pop()
    return expression


def _is_grouping_key(e: exp.Expr) -> bool:
    """A select item reading a column of this query, with no aggregate or window of its own (a
    subquery's columns and aggregates are its own: ``(SELECT max(w) FROM u) + c`` is a key)."""
    own = list(e.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Select))))
    return any(isinstance(n, exp.Column) for n in own) and not any(isinstance(n, (exp.AggFunc, exp.Window)) for n in own)


def _is_all(e: exp.Expr) -> bool:
    return isinstance(e, exp.Var) and e.name.upper() == "ALL"


def keep_non_equi_exists(expression: exp.Expr) -> exp.Expr:
    """Wrap each EXISTS subquery correlated by a non-equality in ``CROUPIER_KEEP(...)``."""
    for scope in list(traverse_scope(expression)):
        select = scope.expression
        exists = select.parent.parent if isinstance(select.parent, exp.Subquery) else select.parent
        if not isinstance(exists, exp.Exists) or not scope.external_columns:
            continue
        predicates = [c.find_ancestor(exp.Predicate) for c in scope.external_columns]
        if all(isinstance(p, exp.EQ) for p in predicates):
            continue
        exists.replace(exp.Anonymous(this=KEEP, expressions=[exists.copy()]))
    return expression


def keep_selected_in(expression: exp.Expr) -> exp.Expr:
    """Wrap each ``x IN (subquery)`` whose NULL would differ from FALSE in ``CROUPIER_KEEP(...)``:
    sqlglot unnests it into a left join tested with IS NOT NULL, which answers FALSE where SQL
    answers NULL (a NULL ``x``, or no match among values with a NULL); Croupier's translation keeps
    SQL's three values. Only where a WHERE clause takes it through AND, OR and parentheses alone
    do NULL and FALSE drop the row alike, and the unnested form stays (under NOT, IS NULL, CASE or
    in a SELECT list it does not)."""
    for node in list(expression.find_all(exp.In)):
        if node.args.get("query") is None or _filters_rows(node):
            continue
        node.replace(exp.Anonymous(this=KEEP, expressions=[node.copy()]))
    return expression


def _filters_rows(node: exp.Expr) -> bool:
    """Whether ``node`` is a WHERE clause's condition, or part of it through AND, OR and
    parentheses only: a row it makes NULL is dropped as if FALSE."""
    parent = node.parent
    while isinstance(parent, (exp.And, exp.Or, exp.Paren)):
        parent = parent.parent
    return isinstance(parent, exp.Where)


def _is_inner(join: exp.Join) -> bool:
    return not join.side and (join.kind or "").upper() in ("", "INNER", "CROSS") and not join.args.get("using") and not join.args.get("method")


def _conjuncts_of(on: exp.Expr | None) -> list[exp.Expr]:
    if on is None:
        return []
    parts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    return [p for p in parts if not (isinstance(p, exp.Boolean) and p.this is True)]


def _has_filter(join: exp.Join, ctes: dict[str, exp.Expr]) -> bool:
    """A derived table or CTE whose SELECT filters (WHERE or HAVING), e.g. sqlglot's ``_u_0`` for
    TPC-H q18's ``IN (SELECT l_orderkey ... HAVING sum(l_quantity) > 300)``."""
    table = join.this
    query = table.this if isinstance(table, exp.Subquery) else ctes.get(table.name.lower()) if isinstance(table, exp.Table) else None
    return isinstance(query, exp.Select) and (query.args.get("where") is not None or query.args.get("having") is not None)


def _inner_when_null_rejected(select: exp.Select, joins: list[exp.Join]) -> None:
    """A LEFT JOIN of ``a`` under ``WHERE ... AND a.x IS NOT NULL`` keeps exactly the rows an inner
    join keeps (rows without a match have a.x NULL and are dropped either way), so make it inner:
    then it can join early. sqlglot writes ``x IN (subquery)`` this way (TPC-H q18)."""
    where = select.args.get("where")
    if where is None:
        return
    rejected = set()
    for part in _conjuncts_of(where.this):
        if isinstance(part, exp.Not) and isinstance(part.this, exp.Is) and isinstance(part.this.expression, exp.Null) and isinstance(part.this.this, exp.Column):
            rejected.add(part.this.this.table.lower())
    for join in joins:
        if (join.side or "").upper() == "LEFT" and (join.kind or "").upper() in ("", "OUTER") and join.alias_or_name.lower() in rejected and join.args.get("on") is not None:
            join.set("side", None)
            join.set("kind", None)


def connect_joins(expression: exp.Expr, table_bytes: dict[str, int] | None = None) -> exp.Expr:
    """Order each SELECT's leading inner/cross joins so that every table joins on an equality
    with the tables before it whenever one exists, and put each ON conjunct at the first join
    where all its tables are present.

    ``FROM part, supplier, partsupp WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey``
    (TPC-H q2) would otherwise start with the cross product of part and supplier — 800 million
    rows at scale factor 10. sqlglot's own join reordering gives up when the FROM clause also has
    an outer join; this pass only reorders the inner prefix, which later joins may all read.
    Inner joins commute, so the answer is the same; only the order of unordered rows may change.
    Among the tables that connect, a filtered one joins first, the smallest stored first
    (``table_bytes``: name -> bytes, when known) — q21's nation (``n_name = 'SAUDI ARABIA'``) before
    lineitem, so the big table meets the smaller intermediate result; unfiltered ones keep the
    written order (a small unfiltered table joined early on a low-cardinality key, such as q5's
    supplier on the customer's nation, would multiply rows rather than remove them).
    """
    sizes = {k.lower(): v for k, v in (table_bytes or {}).items()}

    def size(join: exp.Join) -> float:
        table = join.this
        while isinstance(table, exp.Subquery) and isinstance(table.this, exp.Select) and not table.this.args.get("joins"):
            source = table.this.args.get("from_") or table.this.args.get("from")
            table = source.this if source is not None else None
        return float(sizes.get(table.name.lower(), math.inf)) if isinstance(table, exp.Table) else math.inf

    ctes = {cte.alias_or_name.lower(): cte.this for cte in expression.find_all(exp.CTE)}
    for select in list(expression.find_all(exp.Select)):
        source, joins = select.args.get("from_") or select.args.get("from"), select.args.get("joins") or []
        _inner_when_null_rejected(select, joins)
        block = []
        for join in joins:
            if not _is_inner(join):
                break
            block.append(join)
        if source is None or len(block) < 2:
            continue
        names = {j.alias_or_name for j in block}
        conds = [c for j in block for c in _conjuncts_of(j.args.get("on"))]
        tables = [exp.column_table_names(c) & (names | {source.alias_or_name}) for c in conds]
        where = select.args.get("where")
        where_tables = [exp.column_table_names(c) for c in _conjuncts_of(where.this if where is not None else None)]
        placed, order, left = {source.alias_or_name}, [], list(block)
        while left:
            connected = [j for j in left if any(isinstance(c, exp.EQ) and j.alias_or_name in t and len(t) > 1 and t <= placed | {j.alias_or_name} for c, t in zip(conds, tables))]
            filtered = [j for j in connected if any(t == {j.alias_or_name} for t in tables + where_tables) or _has_filter(j, ctes)]
            pick = min(filtered, key=size) if filtered else (connected or left)[0]  # min keeps the first of equals
            left.remove(pick)
            order.append(pick)
            placed.add(pick.alias_or_name)
        position = {j.alias_or_name: i for i, j in enumerate(order)}
        assigned: list[list[exp.Expr]] = [[] for _ in order]
        for c, t in zip(conds, tables):
            assigned[max((position[n] for n in t if n in position), default=0)].append(c)
        for join, parts in zip(order, assigned):
            if parts:
                join.set("kind", None)
                join.set("on", exp.and_(*[p.copy() for p in parts]))
            else:
                join.set("kind", "CROSS")
                join.set("on", None)
        select.set("joins", order + joins[len(block):])
    return expression


RULES = (
    unfilter_aggregates,
    qualify,
    group_by_all,
    order_by_all,
    pushdown_projections,
    normalize,
    keep_non_equi_exists,
    keep_selected_in,
    unnest_subqueries,
    pushdown_predicates,
    optimize_joins,
    connect_joins,  # after sqlglot's reordering, which also runs when there is no outer join
    eliminate_subqueries,
    merge_subqueries,
    eliminate_joins,
    eliminate_ctes,
    quote_identifiers,
    canonicalize,
    simplify,
)


#: The parameters each rule takes besides the tree (sqlglot's ``optimize()`` looks them up with
#: ``inspect`` for every rule of every query: a twentieth of the planning time).
_RULE_PARAMS = {rule: inspect.getfullargspec(rule).args for rule in RULES}


def optimize(tree: exp.Expr, schema: dict[str, dict[str, str]], table_bytes: dict[str, int]) -> exp.Expr:
    """``tree`` (changed in place) through :data:`RULES`, as sqlglot's ``optimize()`` runs them."""
    given = {"schema": ensure_schema(schema, dialect=DIALECT), "dialect": DIALECT, "db": None, "catalog": None, "sql": None,
             "isolate_tables": True, "quote_identifiers": False, "table_bytes": table_bytes}  # fmt: skip
    for rule in RULES:
        tree = rule(tree, **{p: given[p] for p in _RULE_PARAMS[rule] if p in given})
    return tree


@dataclass
class Parsed:
    """The optimised tree and the DuckDB names of the result's columns (None: take the tree's)."""

    tree: exp.Expr
    names: list[str] | None
    case: dict[str, str]  # lower-case name -> as declared (aliases as written, table columns)


def parse_query(text: str) -> exp.Expr:
    """The syntax tree of the query ``text``; a ConfigError when it does not parse or is not a query."""
    try:
        original = sqlglot.parse_one(text, dialect=DIALECT)
    except SqlglotError as exc:
        raise ConfigError(f"SQL does not parse: {exc}") from exc
    if not isinstance(original, (exp.Select, exp.SetOperation, exp.Subquery)):
        raise ConfigError(f"SQL must be a query (SELECT ...), got {type(original).__name__}")
    return original


def parse(text: str, schemas: dict[str, pl.Schema], table_bytes: dict[str, int] | None = None, given: Iterable[str] = (), original: exp.Expr | None = None) -> Parsed:
    """Parse and optimise ``text`` against the tables ``schemas`` (name -> Polars schema);
    ``table_bytes`` (name -> stored bytes, where known) orders inner joins (:func:`connect_joins`);
    ``given``: every table the caller was given (an unknown table's error lists them);
    ``original``: the tree of ``text`` when the caller has it already (:func:`parse_query`)."""
    original = parse_query(text) if original is None else original
    _check_tables(original, schemas, sorted(set(given) | set(schemas)))
    schema = {name: {column: sql_type(dtype) for column, dtype in s.items()} for name, s in schemas.items()}
    names = output_names(original, schemas, text)
    try:
        tree = optimize(known_functions(original.copy()), schema, table_bytes or {})
    except SqlglotError as exc:
        raise ConfigError(f"SQL: {exc}") from exc
    return Parsed(tree, names, declared_case(original, schemas))


def known_functions(tree: exp.Expr) -> exp.Expr:
    """DuckDB functions sqlglot leaves unknown, as the ones they are: ``mean(x)`` is ``avg(x)``,
    ``date_part('year', d)`` (``datepart``) is ``EXTRACT(year FROM d)``. Rewrites ``tree`` in place."""

    def rewrite(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Anonymous):
            return node
        name, args = node.name.lower(), node.expressions
        if name == "mean" and len(args) == 1:
            return exp.Avg(this=args[0])
        if name == "strlen" and len(args) == 1:  # bytes (length counts characters)
            return exp.ByteLength(this=args[0])
        if name in ("prefix", "suffix") and len(args) == 2:
            return (exp.StartsWith if name == "prefix" else exp.EndsWith)(this=args[0], expression=args[1])
        if name in ("date_part", "datepart") and len(args) == 2 and isinstance(args[0], exp.Literal) and args[0].is_string:
            return exp.Extract(this=exp.var(args[0].this.upper()), expression=args[1])
        return node

    return tree.transform(rewrite, copy=False)  # (the caller's tree is a copy already)


def referenced_tables(tree: exp.Expr) -> set[str]:
    """Lower-case names of the tables the query ``tree`` reads (CTE names among them)."""
    return {table.name.lower() for table in tree.find_all(exp.Table)}


def _check_tables(tree: exp.Expr, schemas: dict[str, pl.Schema], given: list[str]) -> None:
    """Raise a clear error for a table that is neither given nor a CTE."""
    known = {name.lower() for name in schemas} | {cte.alias.lower() for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if table.name.lower() not in known:
            raise ConfigError(f"SQL: unknown table {table.name}; tables given: {given} (pass it in tables={{...}} or --table NAME=URL)")


# --- DuckDB's names for result columns -----------------------------------------------------------


def declared_case(tree: exp.Expr, schemas: dict[str, pl.Schema]) -> dict[str, str]:
    """Names as declared (DuckDB keeps an alias's case as written; sqlglot lower-cases them)."""
    out = {c.lower(): c for s in schemas.values() for c in s}
    for alias in tree.find_all(exp.Alias):
        out.setdefault(alias.alias.lower(), alias.alias)
    for table_alias in tree.find_all(exp.TableAlias):
        for column in table_alias.columns:
            out.setdefault(column.name.lower(), column.name)
    return out


def output_names(tree: exp.Expr, schemas: dict[str, pl.Schema], text: str) -> list[str] | None:
    """DuckDB's names of the query's columns, or None when a star makes them the tree's."""
    select = tree
    while isinstance(select, (exp.SetOperation, exp.Subquery)):
        select = select.left if isinstance(select, exp.SetOperation) else select.this
    if not isinstance(select, exp.Select) or any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star)) for p in select.expressions):
        return None
    namer = _Namer({c.lower(): c for s in schemas.values() for c in s}, text)
    return [namer(p) for p in select.expressions]


_OPS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.IntDiv: "//", exp.DPipe: "||",
        exp.EQ: "=", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.And: "AND", exp.Or: "OR",
        exp.BitwiseAnd: "&", exp.BitwiseOr: "|", exp.BitwiseLeftShift: "<<", exp.BitwiseRightShift: ">>"}  # fmt: skip
#: A comparison's negation, as DuckDB names ``NOT (a > b)``: ``(a <= b)``.
_OPPOSITE = {exp.EQ: "!=", exp.NEQ: "=", exp.GT: "<=", exp.GTE: "<", exp.LT: ">=", exp.LTE: ">"}
#: DuckDB's operators for pattern matches (``!`` in front when negated).
_MATCHES = {exp.Like: "~~", exp.ILike: "~~*", exp.Glob: "~~~"}
#: DuckDB (1.5) keywords that are also function names: a column named after a call of one quotes
#: it (``"year"(d)``); the three its parser reads as special forms name the schema too.
KEYWORD_FUNCTIONS = frozenset(
    "add aggregate century checkpoint day decade error filter first functions glob hour json last left map microsecond millennium "
    "millisecond minute mode month nullif position quarter range replace right row second show substring trim user version week year".split()
)
SCHEMA_FUNCTIONS = frozenset({"position", "substring", "trim"})
#: DuckDB's own names of SQL type names, and those it writes unquoted (its column-name keywords).
_TYPE_NAMES = {"INT": "INTEGER", "INT4": "INTEGER", "INT8": "BIGINT", "INT2": "SMALLINT", "INT1": "TINYINT", "INT128": "HUGEINT", "TEXT": "VARCHAR",
               "STRING": "VARCHAR", "REAL": "FLOAT", "FLOAT4": "FLOAT", "FLOAT8": "DOUBLE", "NUMERIC": "DECIMAL", "BOOL": "BOOLEAN"}  # fmt: skip
_PLAIN_TYPES = frozenset({"INTEGER", "SMALLINT", "BIGINT", "BOOLEAN", "TIMESTAMP", "VARCHAR", "FLOAT", "DECIMAL", "TIME", "INTERVAL", "CHAR"})
#: How a query may spell functions that sqlglot reads under one name without noting where the
#: name stood: found in the text in the order they come.
_SPELLINGS = {
    exp.GroupConcat: ("string_agg", "listagg", "group_concat"),
    exp.PercentileCont: ("quantile_cont", "percentile_cont"),
    exp.PercentileDisc: ("quantile_disc", "percentile_disc"),
    exp.ArgMax: ("arg_max", "max_by", "argmax"),
    exp.ArgMin: ("arg_min", "min_by", "argmin"),
    exp.AnyValue: ("any_value",),
    exp.StrPosition: ("position",),  # (strpos and instr keep where they stood)
}
#: Functions of one operand that sqlglot reads as a two-operand one (``log10(x)`` is LOG(10, x)).
_ONE_OPERAND = frozenset({"log10", "log2", "ln"})


class _Namer:
    """DuckDB's text for an expression used as a column name (the common forms): a function by the
    name the query wrote (``ifnull`` and ``coalesce`` are one function to sqlglot, and two names
    to DuckDB), quoted as DuckDB quotes it."""

    def __init__(self, columns: dict[str, str], text: str) -> None:
        self.columns, self.text = columns, text
        self.spelled = {kind: iter(m.group(1).lower() for m in re.finditer(rf"\b({'|'.join(names)})\s*\(", text, re.IGNORECASE)) for kind, names in _SPELLINGS.items()}

    def __call__(self, e: exp.Expr) -> str:
        if isinstance(e, exp.Alias):
            return e.alias
        if isinstance(e, exp.Column):
            return self.columns.get(e.name.lower(), e.name)
        if isinstance(e, (exp.Paren, exp.IgnoreNulls)):  # (DuckDB's any_value reads as IGNORE NULLS of it)
            return self(e.this)
        if isinstance(e, exp.Literal):
            if e.is_string:
                return f"'{e.this}'"
            return repr(float(e.this)) if "e" in str(e.this).lower() else str(e.this)  # 1e3 is a DOUBLE: DuckDB names it 1000.0
        if isinstance(e, exp.Case):
            return self._case(e)
        if isinstance(e, exp.Not):
            return self._not(e.this)
        if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
            return f"({self(e.this)} IS NULL)"
        if isinstance(e, exp.Between):
            return f"({self(e.this)} BETWEEN {self(e.args['low'])} AND {self(e.args['high'])})"
        if isinstance(e, (exp.Like, exp.ILike, exp.Glob)) and not e.args.get("escape"):
            return f"({self(e.this)} {'!' if e.args.get('negate') else ''}{_MATCHES[type(e)]} {self(e.expression)})"
        if isinstance(e, exp.In) and e.expressions and not e.args.get("query"):
            return self._in_list(e, "IN")
        if type(e) in _OPS:
            return f"({self(e.left)} {_OPS[type(e)]} {self(e.right)})"  # type: ignore[attr-defined]
        if isinstance(e, exp.Count) and isinstance(e.this, exp.Star):
            return "count_star()"
        if isinstance(e, exp.Filter) and isinstance(e.expression, exp.Where):
            return f"{self(e.this)} FILTER (WHERE {self(e.expression.this)})"
        if isinstance(e, exp.Cast):
            return f"{'TRY_CAST' if isinstance(e, exp.TryCast) else 'CAST'}({self(e.this)} AS {_type_name(e.to)})"
        if isinstance(e, exp.Distinct):
            return "DISTINCT " + ", ".join(self(x) for x in e.expressions)
        if isinstance(e, exp.Coalesce):
            return f"COALESCE({', '.join(self(a) for a in [e.this, *e.expressions])})"
        if isinstance(e, exp.Extract):
            return f"main.date_part('{e.this.name.lower()}', {self(e.expression)})"
        if isinstance(e, exp.GroupConcat):
            return self._string_agg(e)
        if isinstance(e, exp.BitwiseNot):
            return f"~({self(e.this)})"
        if isinstance(e, exp.BitwiseXor):
            return f"xor({self(e.left)}, {self(e.right)})"
        if isinstance(e, exp.Array) and not self._written(e):  # [a, b]
            return f"main.list_value({', '.join(self(a) for a in e.expressions)})"
        if isinstance(e, exp.Neg):  # (a negative number is one constant to DuckDB)
            return f"-{self(e.this)}" if isinstance(e.this, exp.Literal) and not e.this.is_string else f"-({self(e.this)})"
        if isinstance(e, exp.DateDiff):  # (this: the end, expression: the start)
            unit = e.args["unit"].name.lower() if e.args.get("unit") is not None else "day"
            return f"{self._function(e)}('{unit}', {self(e.expression)}, {self(e.this)})"
        if isinstance(e, (exp.TimestampTrunc, exp.DateTrunc)) and e.args.get("unit") is not None:
            return f"{self._function(e)}('{e.args['unit'].name.lower()}', {self(e.this)})"
        if isinstance(e, exp.Func):
            args = [a for a in e.args.values() if isinstance(a, exp.Expr)] + [a for v in e.args.values() if isinstance(v, list) for a in v]
            group = e.args.get("group") if isinstance(e, exp.RegexpExtract) else None
            if group is not None and "start" in e.meta and "start" not in group.meta:  # the parser's default group 0, not written
                args = [a for a in args if a is not group]
            name = self._function(e)
            if name in _ONE_OPERAND and isinstance(e, exp.Log) and e.expression is not None:
                args = [e.expression]
            return f"{name}({', '.join(self(a) for a in args)})"
        return e.sql(DIALECT)

    def _not(self, e: exp.Expr) -> str:
        """DuckDB's text of ``NOT e``: a comparison's negation is the opposite comparison, ``NOT
        IN`` and ``IS NOT NULL`` are their own forms (``NOT (s IS NULL)`` is not), else ``(NOT e)``."""
        inner = e.this if isinstance(e, exp.Paren) else e
        if isinstance(inner, exp.Not) and type(inner.this.unnest()) in _OPPOSITE:  # NOT NOT (a > b): (a > b)
            return self(inner.this.unnest())
        if type(inner) in _OPPOSITE:
            return f"({self(inner.left)} {_OPPOSITE[type(inner)]} {self(inner.right)})"  # type: ignore[attr-defined]
        if isinstance(inner, exp.In) and inner.expressions and not inner.args.get("query"):
            return self._in_list(inner, "NOT IN")
        if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
            return f"({self(e.this)} IS NOT NULL)"
        return f"(NOT {self(e)})"

    def _in_list(self, e: exp.In, op: str) -> str:
        """``(x IN (a, b))`` or, ``op`` "NOT IN", its negation."""
        return f"({self(e.this)} {op} ({', '.join(self(x) for x in e.expressions)}))"

    def _case(self, e: exp.Case) -> str:
        """DuckDB's text of a CASE: each condition and value in parentheses (a simple CASE's
        conditions as the comparisons it stands for), ``ELSE NULL`` where none is given."""
        parts = []
        for branch in e.args.get("ifs") or []:
            when = self(branch.this) if e.this is None else f"({self(e.this)} = {self(branch.this)})"
            parts.append(f" WHEN ({when}) THEN ({self(branch.args['true'])})")
        default = e.args.get("default")
        return f"CASE {''.join(parts)} ELSE {'NULL' if default is None else self(default)} END"

    def _written(self, e: exp.Func) -> str:
        """The function's name as the query wrote it, lower-case ("" where it cannot be told)."""
        start, end = e.meta.get("start"), e.meta.get("end")
        if isinstance(start, int) and isinstance(end, int):
            written = self.text[start : end + 1]
            if written.replace("_", "").isalnum():
                return written.lower()
        spelled = self.spelled.get(type(e))
        return next(spelled, "") if spelled is not None else ""

    def _function(self, e: exp.Func) -> str:
        """The function's name as the query wrote it (else sqlglot's), quoted as DuckDB does."""
        name = self._written(e) or ("substring" if isinstance(e, exp.Substring) else e.sql_name().lower())
        if name in SCHEMA_FUNCTIONS:
            return f'main."{name}"'
        return f'"{name}"' if name in KEYWORD_FUNCTIONS else name

    def _string_agg(self, e: exp.GroupConcat) -> str:
        """``string_agg(x, sep ORDER BY ...)``, by the name the query used."""
        name = self._written(e) or "string_agg"
        this, order = (e.this.this, e.this) if isinstance(e.this, exp.Order) else (e.this, None)
        args = [self(this)] + ([self(e.args["separator"])] if e.args.get("separator") is not None else [])
        ordered = f" ORDER BY {', '.join(o.sql(DIALECT) for o in order.expressions)}" if order is not None else ""
        return f"{name}({', '.join(args)}{ordered})"


def _type_name(to: exp.DataType) -> str:
    """DuckDB's name of a cast's target type (``INT`` is ``INTEGER``; ``"DOUBLE"`` quoted)."""
    text = to.sql(DIALECT).upper()
    base, paren, rest = text.partition("(")
    base = _TYPE_NAMES.get(base.strip(), base.strip())
    return (base if base in _PLAIN_TYPES else f'"{base}"') + paren + rest
