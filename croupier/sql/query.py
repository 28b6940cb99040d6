"""An optimised SQL tree (see :mod:`croupier.sql.parse`) to a logical plan.

A SELECT becomes, bottom-up::

    FROM sources (scans, CTEs, derived tables; columns renamed alias.column)
      -> joins (equality conjuncts of ON as keys; the rest filters, or pushed into one side)
      -> WHERE (correlated subqueries left by sqlglot decorrelated into joins first)
      -> Aggregate (GROUP BY keys, each distinct aggregate call once) or GroupingSets (ROLLUP, CUBE)
      -> HAVING -> select list (windows become Window nodes when lowered) -> DISTINCT
      -> ORDER BY (DuckDB's null order: NULLS LAST unless asked) -> LIMIT/OFFSET

UNION [ALL] is ``Union`` (then ``Distinct``), INTERSECT/EXCEPT [ALL] a ``SetOperation``; columns
pair up by position and take the left side's names, both sides cast to a common type. A CTE is
translated once: every reference reads the same node, so the engine computes it once.

Correlated subqueries sqlglot leaves in place (a correlation that is not only equalities, or
an OR around it) are decorrelated with the distinct values of the outer columns they read::

    outer ───────────────────────────────────────────┐
      └─> distinct outer columns ─> join inner rows ─> group by outer columns ─> left join ─> value
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import polars as pl
from sqlglot import exp
from sqlglot.optimizer.scope import build_scope

from croupier.errors import ConfigError
from croupier.expr import Agg, Col, Expr, Lit, Over, coalesce, conjoin, identity, when
from croupier.plan.logical import (
    Aggregate,
    Distinct,
    Filter,
    GroupingSets,
    Join,
    Limit,
    Node,
    Project,
    SetOperation,
    Sort,
    Union,
)
from croupier.sql.exprs import ExprTranslator, sql_text
from croupier.sql.windows import order_rank, row_order
from croupier.sql.parse import KEEP
from croupier.sql.scope import Names, Relation, dtype_of, source, supertype

_SIDES = {"LEFT": "left", "RIGHT": "right", "FULL": "full"}


class QueryTranslator:
    """Translates queries over ``tables`` (name -> plan node) into logical plans."""

    def __init__(self, tables: dict[str, Node]) -> None:
        self.tables = {name.lower(): node for name, node in tables.items()}
        self.ctes: list[dict[str, Node]] = []
        self.names = Names()

    # --- queries ------------------------------------------------------------------------------------
    def query(self, e: exp.Expr) -> Node:
        """The plan of a query; its columns are named by the select list."""
        if isinstance(e, exp.Subquery):
            return self._modifiers(e, self.query(e.this))
        if isinstance(e, exp.Select):
            with self._cte_scope(e):
                rel = self.from_clause(e)
                rel = self.where(rel, e.args.get("where"))
                return self.select_rest(e, rel, [])
        if isinstance(e, exp.SetOperation):
            with self._cte_scope(e):
                return self.set_operation(e)
        raise ConfigError(f"SQL: {type(e).__name__} is not supported as a query")

    @contextmanager
    def _cte_scope(self, e: exp.Expr) -> Iterator[None]:
        scope: dict[str, Node] = {}
        self.ctes.append(scope)
        try:
            with_ = e.args.get("with_")
            for cte in with_.expressions if with_ is not None else []:
                scope[cte.alias.lower()] = self.query(cte.this)
            yield
        finally:
            self.ctes.pop()

    def set_operation(self, e: exp.SetOperation) -> Node:
        left, right = self.query(e.left), self.query(e.right)
        if len(left.schema) != len(right.schema):
            raise ConfigError(f"SQL: {type(e).__name__.upper()} of {len(left.schema)} and {len(right.schema)} columns")
        names = list(left.schema)
        types = [supertype(a, b) for a, b in zip(left.schema.values(), right.schema.values())]
        left = _conform(left, names, types)
        right = _conform(right, names, types)
        distinct = bool(e.args.get("distinct"))
        node: Node
        if isinstance(e, exp.Union):
            node = Union((left, right))
            node = Distinct(node) if distinct else node
        else:
            node = SetOperation("intersect" if isinstance(e, exp.Intersect) else "except", left, right, distinct)
        return self._modifiers(e, node)

    def _modifiers(self, e: exp.Expr, node: Node) -> Node:
        """ORDER BY / LIMIT / OFFSET attached to a set operation or a parenthesised query."""
        order = e.args.get("order")
        if order is not None:
            names = list(node.schema)
            keys, desc, nulls_last = [], [], []
            for o in order.expressions:
                keys.append(Col(_output_ref(o.this, names) or _fail(f"ORDER BY {sql_text(o.this)} must name an output column here")))
                desc.append(bool(o.args.get("desc")))
                nulls_last.append(not o.args.get("nulls_first"))
            node = Sort(node, tuple(keys), tuple(desc), tuple(nulls_last))
        return _limit(e, node)

    # --- FROM and joins ------------------------------------------------------------------------------
    def from_clause(self, sel: exp.Select) -> Relation:
        from_ = sel.args.get("from_")
        if from_ is None:
            one = Aggregate(self._any_table(), (), (Agg("len", None).alias("__one"),))
            rel = Relation(Project(one, (Lit(1).alias("__one"),), "select"))
        else:
            rel = self.source(from_.this)
        for join in sel.args.get("joins") or []:
            rel = self.join(rel, join)
        return rel

    def _any_table(self) -> Node:
        """A one-row source for SELECT without FROM."""
        for node in self.tables.values():
            return Aggregate(node, (), (Agg("len", None).alias("n"),))
        raise ConfigError("SQL: SELECT without FROM needs at least one table registered")

    def source(self, e: exp.Expr) -> Relation:
        alias = e.alias_or_name
        if isinstance(e, exp.Table):
            name = e.name.lower()
            for scope in reversed(self.ctes):
                if name in scope:
                    return source(scope[name], alias)
            if name not in self.tables:
                raise ConfigError(f"SQL: unknown table {e.name}; known: {sorted(self.tables)}")
            return source(self.tables[name], alias)
        if isinstance(e, exp.Subquery):
            return source(self.query(e.this), alias)
        if isinstance(e, exp.Values):
            raise ConfigError("SQL: VALUES in FROM is not supported; pass the rows as a table (a LazyFrame or a Parquet/CSV file in tables={...})")
        raise ConfigError(f"SQL: {type(e).__name__} in FROM is not supported")

    def join(self, left: Relation, join: exp.Join) -> Relation:
        right = self.source(join.this)
        kind = (join.kind or "").upper()
        how = _SIDES.get((join.side or "").upper(), "inner")
        if kind in ("SEMI", "ANTI"):
            how = kind.lower()
        using = join.args.get("using")
        on = join.args.get("on")
        if using:
            on = exp.and_(*[exp.column(u.name, left_alias).eq(exp.column(u.name, join.this.alias_or_name)) for u in using for left_alias in [_alias_of(left, u.name)]])
        if on is None or kind == "CROSS":
            on = exp.true()
        return self.join_on(left, right, on, how)

    def join_on(self, left: Relation, right: Relation, on: exp.Expr, how: str) -> Relation:
        """Join on the equalities between the two sides in ``on``; a condition on one side filters
        it where the join drops that side's unmatched rows, else makes its keys NULL (no match)."""
        pairs: list[tuple[exp.Expr, exp.Expr]] = []
        left_only: list[exp.Expr] = []
        right_only: list[exp.Expr] = []
        residual: list[exp.Expr] = []
        for part in _conjuncts(on):
            if isinstance(part, exp.Boolean) and part.this:
                continue
            if isinstance(part, exp.EQ) and _sides(part.left, left, right) in ({"l"}, {"r"}) and _sides(part.left, left, right) | _sides(part.right, left, right) == {"l", "r"}:
                pairs.append((part.left, part.right) if _sides(part.left, left, right) == {"l"} else (part.right, part.left))
                continue
            sides = _sides(part, left, right)
            (left_only if sides <= {"l"} else right_only if sides == {"r"} else residual).append(part)
        if how in ("inner", "semi", "right") and left_only:
            left, left_only = self.where(left, conjoin_sql(left_only)), []
        if how in ("inner", "semi", "left", "anti") and right_only:
            right, right_only = self.where(right, conjoin_sql(right_only)), []
        if residual and how != "inner":
            raise ConfigError(f"SQL: a {how.upper()} JOIN condition over both sides must be equalities: {sql_text(conjoin_sql(residual))}")
        lkeys = [ExprTranslator(self, left)(a) for a, _ in pairs]
        rkeys = [ExprTranslator(self, right)(b) for _, b in pairs]
        if not pairs and how == "inner":
            rel = Relation(Join(left.node, right.node, (), (), "cross"), {**left.columns, **right.columns})
            return self.where(rel, conjoin_sql(residual)) if residual else rel
        if not pairs:  # no equality: every row matches every row, through a constant key
            lkeys, rkeys = [Lit(1)], [Lit(1)]
        if left_only:  # left (kept) rows failing their condition match nothing
            cond = ExprTranslator(self, left)(conjoin_sql(left_only))
            lkeys = [when(cond).then(k).otherwise(Lit(None)) for k in lkeys]
        if right_only:
            cond = ExprTranslator(self, right)(conjoin_sql(right_only))
            rkeys = [when(cond).then(k).otherwise(Lit(None)) for k in rkeys]
        lnode, lnames = self._keys(left.node, lkeys)
        rnode, rnames = self._keys(right.node, rkeys)
        lnode, lnames, rnode, rnames = self._same_key_types(lnode, lnames, rnode, rnames)
        node = Join(lnode, rnode, tuple(lnames), tuple(rnames), how, coalesce=False)
        columns = dict(left.columns) if how in ("semi", "anti") else {**left.columns, **right.columns}
        rel = Relation(node, columns)
        return self.where(rel, conjoin_sql(residual)) if residual else rel

    def _keys(self, node: Node, keys: list[Expr]) -> tuple[Node, list[str]]:
        names, extra = [], []
        for k in keys:
            if isinstance(k, Col):
                names.append(k.name)
            else:
                name = self.names.fresh("k")
                extra.append(k.alias(name))
                names.append(name)
        return (Project(node, tuple(extra), "with_columns") if extra else node), names

    def _same_key_types(self, lnode: Node, lnames: list[str], rnode: Node, rnames: list[str]) -> tuple[Node, list[str], Node, list[str]]:
        """Both sides' keys of one type: a key that needs a cast is a new column, so the column
        keeps its own type in the result (``ON t.k = u.w`` with an integer k and a float w) and
        may be a key twice (``ON t.k = u.k AND t.k = u.w``)."""
        lcast: list[Expr] = []
        rcast: list[Expr] = []
        lnames, rnames = list(lnames), list(rnames)
        for i, (a, b) in enumerate(zip(lnames, rnames)):
            ta, tb = lnode.schema[a], rnode.schema[b]
            if ta == tb or (ta.is_integer() and tb.is_integer()):
                continue
            common = supertype(ta, tb)
            if ta != common:
                lnames[i] = self.names.fresh("k")
                lcast.append(Col(a).cast(common).alias(lnames[i]))
            if tb != common:
                rnames[i] = self.names.fresh("k")
                rcast.append(Col(b).cast(common).alias(rnames[i]))
        if lcast:
            lnode = Project(lnode, tuple(lcast), "with_columns")
        if rcast:
            rnode = Project(rnode, tuple(rcast), "with_columns")
        return lnode, lnames, rnode, rnames

    # --- WHERE --------------------------------------------------------------------------------------
    def where(self, rel: Relation, cond: exp.Expr | None) -> Relation:
        if cond is None:
            return rel
        if isinstance(cond, exp.Where):
            cond = cond.this
        rel, replace = self.decorrelate_all(rel, cond)
        predicate = ExprTranslator(self, rel, replace)(cond)
        return rel.with_node(Filter(rel.node, predicate))

    # --- after FROM/WHERE: grouping, select list, DISTINCT, ORDER BY, LIMIT -------------------------------
    def select_rest(self, sel: exp.Select, rel: Relation, carry: list[str]) -> Node:
        clauses = [p for p in sel.expressions] + [x for x in (sel.args.get("having"), sel.args.get("order"), sel.args.get("qualify")) if x is not None]
        calls = _aggregate_calls(clauses)
        group = sel.args.get("group")
        replace: dict[str, Expr] = {}
        if group is not None or calls or sel.args.get("having") is not None or carry:
            rel, replace = self.aggregate(rel, group, calls, _groupings(clauses), carry)
            having = sel.args.get("having")
            if having is not None:
                rel = rel.with_node(Filter(rel.node, ExprTranslator(self, rel, replace)(having.this)))
        rel, more = self.decorrelate_all(rel, *sel.expressions)
        replace.update(more)
        t = ExprTranslator(self, rel, replace)
        names = _unique([p.alias_or_name for p in sel.expressions])
        outputs = [t(p.unalias() if isinstance(p, exp.Alias) else p).alias(n) for p, n in zip(sel.expressions, names)]
        exprs = [Col(c) for c in carry] + outputs
        order = sel.args.get("order")
        keys, desc, nulls_last, hidden = [], [], [], []
        by_alias = dict(replace)  # ORDER BY expressions may read select-list aliases
        for n, out in zip(names, outputs):
            for quoted in (True, False):
                by_alias.setdefault(sql_text(exp.column(n, quoted=quoted)), out.operand)  # type: ignore[attr-defined]
        ordering = ExprTranslator(self, rel, by_alias)
        for o in order.expressions if order is not None else []:
            keys.append(Col(_output_ref(o.this, names) or self._named(ordering(o.this), names, outputs, hidden)))
            desc.append(bool(o.args.get("desc")))
            nulls_last.append(not o.args.get("nulls_first"))
        distinct = sel.args.get("distinct")
        on = distinct.args.get("on") if distinct is not None else None
        on_keys = [Col(self._named(ordering(e), names, outputs, hidden)) for e in on.expressions] if on is not None else []
        node: Node = self._qualified(_per_row(rel.node, tuple(exprs + hidden)), sel.args.get("qualify"), ordering)
        if on is not None:
            node = _first_per_key(node, on_keys, keys, desc, nulls_last, self.names.fresh("rn"))
        elif distinct is not None:
            if hidden:
                raise ConfigError("SQL: with SELECT DISTINCT, ORDER BY expressions must be in the select list")
            node = Distinct(node)
        if keys:
            node = Sort(node, tuple(keys), tuple(desc), tuple(nulls_last))
        if hidden:
            node = Project(node, tuple(Col(c) for c in list(node.schema)[: len(exprs)]), "select")
        return _limit(sel, node)

    def _named(self, e: Expr, names: list[str], outputs: list[Expr], hidden: list[Expr]) -> str:
        """The column holding ``e`` (an ORDER BY or DISTINCT ON key): the select-list column that
        computes it, or a hidden column added to ``hidden`` (dropped after sorting)."""
        key = identity(e)
        match = [n for n, out in zip(names, outputs) if identity(out.operand) == key]  # type: ignore[attr-defined]
        if match:
            return match[0]
        for h in hidden:
            if identity(h.operand) == key:  # type: ignore[attr-defined]
                return h.output_name()
        name = self.names.fresh("s")
        hidden.append(e.alias(name))
        return name

    def _qualified(self, node: Project, qualify: exp.Qualify | None, ordering: ExprTranslator) -> Node:
        """QUALIFY, as DuckDB runs it: a filter on the select list's rows once windows are
        computed (before DISTINCT and ORDER BY). The condition is computed as one more column of
        the select list (it reads the rows before it, and may hold windows, which a filter cannot
        run), dropped after the filter."""
        if qualify is None:
            return node
        flag = self.names.fresh("q")
        columns = tuple(Col(c) for c in node.schema)
        flagged = Project(node.input, node.exprs + (ordering(qualify.this).alias(flag),), "select")
        return Project(Filter(flagged, Col(flag)), columns, "select")

    def aggregate(self, rel: Relation, group: exp.Group | None, calls: list[exp.Expr], groupings: list[exp.Grouping], carry: list[str]) -> tuple[Relation, dict[str, Expr]]:
        keys, sets = _grouping(group)
        pre = ExprTranslator(self, rel)
        key_names = [self.names.fresh("g") for _ in keys]
        key_exprs = tuple(Col(c) for c in carry) + tuple(pre(k).alias(n) for k, n in zip(keys, key_names))
        agg_names = [self.names.fresh("a") for _ in calls]
        agg_exprs = tuple(pre.aggregate(c).alias(n) for c, n in zip(calls, agg_names))
        replace: dict[str, Expr] = {sql_text(k): Col(n) for k, n in zip(keys, key_names)}
        replace.update({sql_text(c): Col(n) for c, n in zip(calls, agg_names)})
        node: Node
        if sets is None:
            if not key_exprs and not agg_exprs:
                agg_exprs = (Agg("len", None).alias(self.names.fresh("a")),)
            node = Aggregate(rel.node, key_exprs, agg_exprs)
            for g in groupings:
                replace[sql_text(g)] = Lit(0, pl.Int64())
        else:
            offset = len(carry)
            all_sets = tuple(tuple(range(offset)) + tuple(i + offset for i in s) for s in sets)
            grouping = []
            for g in groupings:
                positions = tuple(offset + _position(x, keys) for x in g.expressions)
                name = self.names.fresh("gi")
                grouping.append((name, positions))
                replace[sql_text(g)] = Col(name)
            node = GroupingSets(rel.node, key_exprs, all_sets, agg_exprs, tuple(grouping))
        columns = {k: v for k, v in rel.columns.items() if v in carry}
        return Relation(node, columns), replace

    # --- subqueries -------------------------------------------------------------------------------------
    def scalar_source(self, sub: exp.Expr, outer: Relation, keep_columns: bool = False) -> Node:
        """The plan of an uncorrelated subquery (one column unless ``keep_columns``)."""
        if _external_columns(sub):
            raise ConfigError(f"SQL: this correlated subquery is not supported: {sql_text(sub)[:200]}")
        node = self.query(sub)
        if not keep_columns and len(node.schema) != 1:
            raise ConfigError(f"SQL: a subquery used as a value must return one column, got {list(node.schema)}")
        return node

    def decorrelate_all(self, rel: Relation, *clauses: exp.Expr) -> tuple[Relation, dict[str, Expr]]:
        """Join ``rel`` with every correlated subquery in ``clauses``; their SQL text -> value."""
        replace: dict[str, Expr] = {}
        for clause in clauses:
            for node in _subqueries(clause):
                kind, select, wrapper = _correlated(node)
                if select is None:
                    continue
                rel, value = self.decorrelate(rel, select, kind)
                replace[sql_text(wrapper)] = value
        return rel, replace

    def decorrelate(self, rel: Relation, sel: exp.Select, kind: str) -> tuple[Relation, Expr]:
        """``rel`` left-joined with a correlated subquery's value per distinct outer value."""
        external = _external_columns(sel)
        refs: dict[tuple[str, str], str] = {}
        for c in external:
            name = rel.resolve(c.table, c.name)
            if name is None:
                raise ConfigError(f"SQL: correlated column {sql_text(c)} is not in the outer query")
            refs.setdefault((c.table.lower(), c.name.lower()), name)
        outer_names = list(dict.fromkeys(refs.values()))
        carried = {name: self.names.fresh("o") for name in outer_names}
        if kind == "exists":
            bounded = self._exists_by_bounds(rel, sel, refs, carried)
            if bounded is not None:
                return bounded
        distinct = Distinct(Project(rel.node, tuple(Col(n).alias(carried[n]) for n in outer_names), "select"))
        with self._cte_scope(sel):
            inner = self.from_clause(sel)
            correlated = Relation(inner.node, {**inner.columns, **{k: carried[v] for k, v in refs.items()}})
            joined = self._join_outer(inner, correlated, distinct, sel.args.get("where"), set(carried.values()))
            if kind == "exists":
                node: Node = Aggregate(joined.node, tuple(Col(c) for c in carried.values()), (Agg("len", None).alias(self.names.fresh("n")),))
            else:
                node = self.select_rest(sel.copy(), joined, list(carried.values()))
        value = list(node.schema)[-1]
        out = self._join_null_safe(rel.node, outer_names, node, list(carried.values()))
        result = Col(value)
        if kind == "exists":
            return rel.with_node(out), result.is_not_null()
        projection = sel.expressions[0].unalias()
        if isinstance(projection, exp.Count):
            return rel.with_node(out), coalesce(result, Lit(0, pl.Int64()))
        return rel.with_node(out), result

    def _join_null_safe(self, left: Node, lnames: list[str], right: Node, rnames: list[str]) -> Node:
        """``left`` left-joined with ``right`` on equal keys, NULL matching NULL: each outer row
        takes the subquery's value computed for its outer values, a NULL among them too (the
        distinct outer values hold it; ``WHERE u.a IS NOT DISTINCT FROM t.a`` matches it). Keys
        of types with no constant to stand for NULL join as before."""
        lkeys, rkeys, lextra, rextra = [], [], [], []
        for a, b in zip(lnames, rnames):
            dtype = left.schema[a]
            if not (dtype.is_numeric() or dtype.is_temporal() or dtype in (pl.String, pl.Boolean)):
                lkeys.append(a)
                rkeys.append(b)
                continue
            for node_extra, keys, name in ((lextra, lkeys, a), (rextra, rkeys, b)):
                filled, missing = self.names.fresh("k"), self.names.fresh("k")
                node_extra += [coalesce(Col(name), Lit(0).cast(dtype)).alias(filled), Col(name).is_null().alias(missing)]
                keys += [filled, missing]
        left = Project(left, tuple(lextra), "with_columns") if lextra else left
        right = Project(right, tuple(rextra), "with_columns") if rextra else right
        return Join(left, right, tuple(lkeys), tuple(rkeys), "left", coalesce=False)

    def _exists_by_bounds(self, rel: Relation, sel: exp.Select, refs: dict[tuple[str, str], str], carried: dict[str, str]) -> tuple[Relation, Expr] | None:
        """EXISTS correlated by equalities plus one ``inner <> outer``, decided by per-key bounds.

        An inner row with equal keys and ``x <> y`` exists exactly when the smallest or the largest
        non-null ``x`` among the rows with those keys differs from ``y`` (a null on either side never
        satisfies ``<>``). So rather than joining every inner row with every distinct outer value —
        a blow-up on self-joins such as TPC-H q21's ``l2.l_suppkey <> l1.l_suppkey`` — aggregate
        ``min(x)`` and ``max(x)`` per key once and left-join them to the outer rows. None when the
        subquery has another shape (the general path handles it)."""
        if sel.args.get("where") is None or any(sel.args.get(k) for k in ("group", "having", "limit", "offset", "qualify")):
            return None
        with self._cte_scope(sel):
            inner = self.from_clause(sel)
            correlated = Relation(inner.node, {**inner.columns, **{k: carried[v] for k, v in refs.items()}})
            local, pairs, rest = self._split_correlated(sel.args["where"], correlated, set(carried.values()))
        if not pairs or len(rest) != 1 or not isinstance(rest[0][0], exp.NEQ):
            return None
        t = ExprTranslator(self, correlated)
        outer_cols = set(carried.values())
        a, b = t(rest[0][0].left), t(rest[0][0].right)
        if a.columns() and b.columns() <= outer_cols and b.columns() and not a.columns() & outer_cols:
            x, y = a, b
        elif b.columns() and a.columns() <= outer_cols and a.columns() and not b.columns() & outer_cols:
            x, y = b, a
        else:
            return None
        node = Filter(inner.node, conjoin(local)) if local else inner.node  # type: ignore[arg-type]
        inode, inames = self._keys(node, [p[0] for p in pairs])
        keys = [self.names.fresh("k") for _ in inames]
        lo, hi = self.names.fresh("lo"), self.names.fresh("hi")
        bounds: Node = Aggregate(inode, tuple(Col(n).alias(k) for n, k in zip(inames, keys)), (Agg("min", x).alias(lo), Agg("max", x).alias(hi)))
        outer = Project(rel.node, tuple(Col(n).alias(c) for n, c in carried.items()), "with_columns")
        onode, onames = self._keys(outer, [p[1] for p in pairs])
        onode, onames, bounds, keys = self._same_key_types(onode, onames, bounds, keys)
        out = Join(onode, bounds, tuple(onames), tuple(keys), "left", coalesce=False)
        return rel.with_node(out), coalesce((Col(lo) != y) | (Col(hi) != y), Lit(False, pl.Boolean()))

    def _split_correlated(self, where: exp.Where, correlated: Relation, outer_cols: set[str]) -> tuple[list[Expr], list[tuple[Expr, Expr]], list[tuple[exp.Expr, Expr]]]:
        """A correlated WHERE's conjuncts: local ones (inner columns only), equality pairs
        (inner expression, outer expression), and the rest (SQL node, translation)."""
        t = ExprTranslator(self, correlated)
        local: list[Expr] = []
        pairs: list[tuple[Expr, Expr]] = []
        rest: list[tuple[exp.Expr, Expr]] = []
        for part in _factor(where.this):
            translated = t(part)
            if not translated.columns() & outer_cols:
                local.append(translated)
                continue
            if isinstance(part, exp.EQ):
                a, b = t(part.left), t(part.right)
                if a.columns() and b.columns() and a.columns() <= outer_cols and not b.columns() & outer_cols:
                    pairs.append((b, a))
                    continue
                if a.columns() and b.columns() and b.columns() <= outer_cols and not a.columns() & outer_cols:
                    pairs.append((a, b))
                    continue
            rest.append((part, translated))
        return local, pairs, rest

    def _join_outer(self, inner: Relation, correlated: Relation, distinct: Node, where: exp.Where | None, outer_cols: set[str]) -> Relation:
        """The inner rows joined with the distinct outer values their WHERE accepts."""
        local, pairs, rest_parts = self._split_correlated(where, correlated, outer_cols) if where is not None else ([], [], [])
        rest = [r[1] for r in rest_parts]
        node = inner.node
        if local:
            node = Filter(node, conjoin(local))  # type: ignore[arg-type]
        if pairs:
            lnode, lnames = self._keys(node, [p[0] for p in pairs])
            rnode, rnames = self._keys(distinct, [p[1] for p in pairs])
            lnode, lnames, rnode, rnames = self._same_key_types(lnode, lnames, rnode, rnames)
            node = Join(lnode, rnode, tuple(lnames), tuple(rnames), "inner", coalesce=False)
        else:
            node = Join(node, distinct, (), (), "cross")
        if rest:
            node = Filter(node, conjoin(rest))  # type: ignore[arg-type]
        return correlated.with_node(node)


# --- helpers ----------------------------------------------------------------------------------------------


def _fail(message: str) -> str:
    raise ConfigError(f"SQL: {message}")


def _per_row(node: Node, exprs: tuple[Expr, ...]) -> Node:
    """SQL's select list over ``node``: one row per row of ``node``. Polars' select of constants
    only (``SELECT 1 FROM t``, a scalar subquery) gives one row: they are added to the rows
    (with_columns repeats them), then selected."""
    if not exprs or not all(e.is_scalar() and not e.has_agg() for e in exprs):
        return Project(node, exprs, "select")
    added = Project(node, exprs, "with_columns")
    return Project(added, tuple(Col(e.output_name()) for e in exprs), "select")


def _first_per_key(node: Node, on: list[Expr], keys: list[Expr], desc: list[bool], nulls_last: list[bool], rn: str) -> Node:
    """DuckDB's ``DISTINCT ON (on)``: of the rows with equal ``on`` values (NULLs equal), the
    first under ORDER BY (``keys``; any one without keys): row number 1 per key, as a window."""
    if keys:
        first = order_rank(keys, desc, [not n for n in nulls_last], "ordinal")
    else:
        first = order_rank([row_order()], [False], [False], "ordinal")
    columns = tuple(Col(c) for c in node.schema)
    numbered = Project(node, (Over(first, tuple(on)).alias(rn),), "with_columns")
    return Project(Filter(numbered, Col(rn) == 1), columns, "select")


def _limit(e: exp.Expr, node: Node) -> Node:
    limit, offset = e.args.get("limit"), e.args.get("offset")
    if limit is None and offset is None:
        return node
    n = _int(limit.expression) if limit is not None else 2**63 - 1
    skip = _int(offset.expression) if offset is not None else 0
    return Limit(node, n, skip)


def _int(e: exp.Expr) -> int:
    if not isinstance(e, exp.Literal) or e.is_string:
        raise ConfigError(f"SQL: LIMIT/OFFSET must be a constant, got {sql_text(e)}")
    return int(e.this)


def _output_ref(e: exp.Expr, names: list[str]) -> str | None:
    """The output column an ORDER BY key names: by position or by (unqualified) name."""
    if isinstance(e, exp.Literal) and not e.is_string:
        position = int(e.this)
        if not 1 <= position <= len(names):
            raise ConfigError(f"SQL: ORDER BY {position} is out of range (1..{len(names)})")
        return names[position - 1]
    if isinstance(e, exp.Column) and not e.table:
        lowered = {n.lower(): n for n in names}
        return lowered.get(e.name.lower())
    return None


def _unique(names: list[str]) -> list[str]:
    """Duplicate names made unique (x, x_1, x_2...), as Polars needs."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            candidate = f"{n}_{seen[n]}"
            while candidate in seen:
                seen[n] += 1
                candidate = f"{n}_{seen[n]}"
            seen[candidate] = 0
            out.append(candidate)
        else:
            seen[n] = 0
            out.append(n)
    return out


def _conform(node: Node, names: list[str], types: list[pl.DataType]) -> Node:
    exprs = []
    for (name, dtype), new, target in zip(node.schema.items(), names, types):
        e: Expr = Col(name)
        if dtype != target:
            e = e.cast(target)
        exprs.append(e.alias(new))
    if all(isinstance(e.operand, Col) and e.operand.name == n for e, n in zip(exprs, names)):  # type: ignore[attr-defined]
        return node
    return Project(node, tuple(exprs), "select")


def conjoin_sql(parts: list[exp.Expr]) -> exp.Expr:
    return exp.and_(*parts) if len(parts) > 1 else parts[0]


def _conjuncts(e: exp.Expr) -> list[exp.Expr]:
    e = e.this if isinstance(e, exp.Paren) else e
    if isinstance(e, exp.And):
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _disjuncts(e: exp.Expr) -> list[exp.Expr]:
    e = e.this if isinstance(e, exp.Paren) else e
    if isinstance(e, exp.Or):
        return _disjuncts(e.left) + _disjuncts(e.right)
    return [e]


def _factor(e: exp.Expr) -> list[exp.Expr]:
    """Conjuncts of ``e``, with conjuncts common to every branch of an OR pulled out of it."""
    out: list[exp.Expr] = []
    for part in _conjuncts(e):
        branches = _disjuncts(part)
        if len(branches) < 2:
            out.append(part)
            continue
        per_branch = [{sql_text(c): c for c in _conjuncts(b)} for b in branches]
        common = set(per_branch[0]).intersection(*per_branch[1:])
        if not common:
            out.append(part)
            continue
        out += [per_branch[0][k] for k in sorted(common)]
        rests = []
        for conj in per_branch:
            kept = [c for k, c in conj.items() if k not in common]
            if not kept:
                rests = []
                break
            rests.append(exp.and_(*kept) if len(kept) > 1 else kept[0])
        if rests:
            out.append(exp.or_(*[exp.paren(r) for r in rests]))
    return out


def _sides(e: exp.Expr, left: Relation, right: Relation) -> set[str]:
    """Which sides ("l", "r") the columns of ``e`` come from."""
    out = set()
    for c in e.find_all(exp.Column):
        if left.resolve(c.table, c.name) is not None:
            out.add("l")
        elif right.resolve(c.table, c.name) is not None:
            out.add("r")
        else:
            out.add("?")
    return out


def _alias_of(rel: Relation, column: str) -> str:
    tables = [t for (t, n) in rel.columns if n == column.lower()]
    if len(tables) != 1:
        raise ConfigError(f"SQL: USING ({column}) is ambiguous or unknown on the left side")
    return tables[0]


def _walk_scope(e: exp.Expr) -> Iterator[exp.Expr]:
    """Nodes of ``e`` without entering subqueries."""
    yield e
    for child in e.iter_expressions():
        if isinstance(child, (exp.Subquery, exp.Select, exp.SetOperation)) or (isinstance(child, exp.Anonymous) and child.name.upper() == KEEP):
            continue
        yield from _walk_scope(child)


def _aggregate_calls(clauses: list[exp.Expr]) -> list[exp.Expr]:
    """The distinct aggregate calls of the select list, HAVING, ORDER BY (not window functions)."""
    found: dict[str, exp.Expr] = {}
    for clause in clauses:
        for node in _walk_scope(clause):
            if isinstance(node, exp.AggFunc) and not isinstance(node, exp.Grouping) and not (isinstance(node.parent, exp.Window) and node.arg_key == "this"):
                if not any(isinstance(a, exp.AggFunc) and not (isinstance(a.parent, exp.Window) and a.arg_key == "this") for a in _ancestors(node, clause)):
                    found.setdefault(sql_text(node), node)
    return list(found.values())


def _ancestors(node: exp.Expr, stop: exp.Expr) -> Iterator[exp.Expr]:
    parent = node.parent
    while parent is not None and parent is not stop.parent:
        yield parent
        if parent is stop:
            break
        parent = parent.parent


def _groupings(clauses: list[exp.Expr]) -> list[exp.Grouping]:
    found: dict[str, exp.Grouping] = {}
    for clause in clauses:
        for node in _walk_scope(clause):
            if isinstance(node, exp.Grouping):
                found.setdefault(sql_text(node), node)
    return list(found.values())


def _grouping(group: exp.Group | None) -> tuple[list[exp.Expr], list[tuple[int, ...]] | None]:
    """GROUP BY as key expressions plus, for ROLLUP/CUBE/GROUPING SETS, the sets of key positions."""
    if group is None:
        return [], None
    keys: list[exp.Expr] = []

    def position(e: exp.Expr) -> int:
        e = e.this if isinstance(e, exp.Paren) else e
        for i, k in enumerate(keys):
            if sql_text(k) == sql_text(e):
                return i
        keys.append(e)
        return len(keys) - 1

    factors: list[list[tuple[int, ...]]] = []
    for item in group.expressions:
        if isinstance(item, exp.Rollup):
            members = [position(x) for x in item.expressions]
            factors.append([tuple(members[:i]) for i in range(len(members), -1, -1)])
        elif isinstance(item, exp.Cube):
            members = [position(x) for x in item.expressions]
            subsets = [tuple(m for j, m in enumerate(members) if mask >> (len(members) - 1 - j) & 1) for mask in range(2 ** len(members) - 1, -1, -1)]
            factors.append(subsets)
        elif isinstance(item, exp.GroupingSets):
            sets = []
            for s in item.expressions:
                parts = s.expressions if isinstance(s, exp.Tuple) else [s]
                sets.append(tuple(position(x) for x in parts))
            factors.append(sets)
        else:
            factors.append([(position(item),)])
    for key in ("rollup", "cube", "grouping_sets"):
        if group.args.get(key):
            raise ConfigError(f"SQL: GROUP BY {key.upper()} in this form is not supported")
    if all(len(f) == 1 for f in factors):
        return keys, None
    sets: list[tuple[int, ...]] = [()]
    for f in factors:
        sets = [tuple(sorted(set(a) | set(b))) for a in sets for b in f]
    return keys, sets


def _position(e: exp.Expr, keys: list[exp.Expr]) -> int:
    e = e.this if isinstance(e, exp.Paren) else e
    for i, k in enumerate(keys):
        if sql_text(k) == sql_text(e):
            return i
    raise ConfigError(f"SQL: GROUPING({sql_text(e)}) names no GROUP BY key")


def _subqueries(e: exp.Expr) -> Iterator[exp.Expr]:
    """Subquery expressions of ``e`` (not inside other subqueries)."""
    for node in _walk_all(e):
        if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.In) and node.args.get("query") is not None) or isinstance(node, exp.Anonymous) and node.name.upper() == KEEP:
            yield node


def _walk_all(e: exp.Expr) -> Iterator[exp.Expr]:
    yield e
    if isinstance(e, (exp.Subquery, exp.Exists, exp.Select)) or (isinstance(e, exp.Anonymous) and e.name.upper() == KEEP):
        return
    for child in e.iter_expressions():
        if isinstance(child, (exp.Subquery, exp.Exists, exp.Select)) or (isinstance(child, exp.Anonymous) and child.name.upper() == KEEP):
            yield child
            continue
        yield from _walk_all(child)


def _correlated(node: exp.Expr) -> tuple[str, exp.Select | None, exp.Expr]:
    """("exists" | "scalar", the correlated SELECT or None, the node its value replaces)."""
    wrapper = node
    if isinstance(node, exp.Anonymous):
        node = node.expressions[0]
    if isinstance(node, exp.Exists):
        kind, inner = "exists", node.this
    elif isinstance(node, exp.In):
        kind, inner = "in", node.args["query"]
    else:
        kind, inner = "scalar", node.this
    inner = inner.this if isinstance(inner, exp.Subquery) else inner
    if not isinstance(inner, exp.Select) or not _external_columns(inner):
        if wrapper is not node and kind != "in":
            raise ConfigError("SQL: internal error: a kept subquery is not correlated")
        return kind, None, wrapper
    if kind == "in":
        raise ConfigError("SQL: a correlated IN (subquery) is not supported; write it as EXISTS")
    if kind == "scalar" and len(inner.expressions) != 1:
        raise ConfigError("SQL: a scalar subquery must return one column")
    return kind, inner, wrapper


def _external_columns(sel: exp.Expr) -> list[exp.Column]:
    scope = build_scope(sel)
    if scope is None:
        return []
    out = list(scope.external_columns)
    for child in scope.traverse():
        out += [c for c in child.external_columns if c not in out and _defined_outside(c, sel)]
    return out


def _defined_outside(column: exp.Column, sel: exp.Expr) -> bool:
    aliases = {t.alias_or_name.lower() for t in sel.find_all(exp.Table)} | {s.alias.lower() for s in sel.find_all(exp.Subquery) if s.alias}
    return column.table.lower() not in aliases


__all__ = ["QueryTranslator", "dtype_of"]
