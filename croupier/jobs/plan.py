"""``croupier plan``: predicted time and cost of a sort or a query at cloud scale (see
:mod:`croupier.plan.cloud`), optionally simulated (:mod:`croupier.sim.engine`)."""

from __future__ import annotations

import json

import click

from croupier.errors import CroupierError
from croupier.units import parse_size

ALGORITHMS = ["direct", "direct+wc", "2-level", "2-level+wc", "3-level", "3-level+wc"]


def _size(text: str, what: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise click.UsageError(f"{what}: {exc}") from exc


def _tables(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise click.UsageError(f"--table takes NAME=SIZE (e.g. lineitem=600GB) or NAME=URL of real files, got {item!r}")
        out[name] = value
    return out


@click.command("plan")
@click.option("--profile", "profile", default="aws-s3", show_default=True, help="Shipped cloud profile (aws-s3: Lambda + S3; ibm-cos: IBM Cloud Functions + COS) or a profile file.")
@click.option("--size", default=None, help="Plan a sort of this many bytes, e.g. 100TB.")
@click.option("--query", default=None, help="Plan a query: SQL text, @FILE, or a TPC-H query number (3 or q3).")
@click.option("--table", "tables", multiple=True, metavar="NAME=SIZE|URL", help="A table of the query: its size (lineitem=600GB) or real files to read statistics from. Repeat.")
@click.option("--memory", default=None, help="Memory of one function, e.g. 2GiB (default: the profile's).")
@click.option("--workers", "-p", type=int, default=None, help="Fix P; the selector still picks the algorithm and topology.")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default=None, help="Fix the exchange algorithm family.")
@click.option("--fast-tier", default=None, help="Run the exchange on a fast tier of the platform (aws-lambda: s3-express, elasticache).")
@click.option("--objective", type=click.Choice(["time", "cost"]), default="time", show_default=True)
@click.option("--budget", type=float, default=None, help="Most the job may cost (USD) when minimising time.")
@click.option("--simulate", is_flag=True, help="Also run the chosen plan in the discrete-event simulator: p50/p95 and where time went.")
@click.option("--runs", type=int, default=5, show_default=True, help="With --simulate: simulated runs (seeds seed..seed+runs-1).")
@click.option("--seed", type=int, default=0, show_default=True, help="With --simulate: first seed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (seconds, cost with its parts, stages, exchanges, runners-up).")
def plan_cmd(profile: str, size: str | None, query: str | None, tables: tuple[str, ...], memory: str | None, workers: int | None, algorithm: str | None, fast_tier: str | None, objective: str, budget: float | None, simulate: bool, runs: int, seed: int, as_json: bool) -> None:
    """Predict what a sort (--size) or a query (--query with --table NAME=SIZE ...) takes and costs
    on a cloud platform, with the selector and stage models the runner uses."""
    from dataclasses import replace

    from croupier.plan.cloud import PlanOptions, plan_query, plan_sort

    if (size is None) == (query is None):
        raise click.UsageError("give either --size (a sort) or --query with --table NAME=SIZE ... (a query)")
    options = PlanOptions(profile, _size(memory, "--memory") if memory else None, workers, algorithm, fast_tier, objective, budget)
    try:
        if size is not None:
            plan = plan_sort(_size(size, "--size"), options)
        else:
            assert query is not None
            plan = plan_query(query, _tables(tables), options)
        if simulate:
            from croupier.sim.engine import simulate_plan

            plan = replace(plan, simulation=simulate_plan(plan, runs=runs, seed=seed))
    except CroupierError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(plan.to_dict(), indent=1) if as_json else plan.render())
