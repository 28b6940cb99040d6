"""Speculation policy, fault-injecting storage, chaos kills and stragglers: jobs still finish right."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.compute import LocalExecutor
from croupier.compute.base import Task
from croupier.compute.speculation import SpeculationPolicy, choose_backups
from croupier.config import Config, RetryPolicy
from croupier.errors import ConfigError, CroupierError, ObjectNotFound, TransientStorageError
from croupier.jobs.gensort import gensort
from croupier.jobs.sort import sort
from croupier.jobs.valsort import valsort
from croupier.storage import open_store
from croupier.storage.faults import FaultSpec, FaultyBackend
from croupier.storage.local import LocalBackend

from . import helpers
from .conftest import leftover_tmp, sigint_default

# --- the speculation policy (pure) ---------------------------------------------------------------


def test_no_backups_before_the_threshold_or_without_idle_functions() -> None:
    policy = SpeculationPolicy(after=0.75, slowness=1.5, budget=0.1, min_seconds=0.0)
    running = {"t9": 10.0}
    assert choose_backups(policy, 10, [1.0] * 7, running, set(), idle=1) == []  # 70% < 75%
    assert choose_backups(policy, 10, [1.0] * 8, running, set(), idle=0) == []
    assert choose_backups(policy, 10, [1.0] * 8, running, set(), idle=1) == ["t9"]


def test_only_stragglers_within_budget_slowest_first() -> None:
    policy = SpeculationPolicy(after=0.5, slowness=2.0, budget=0.1, min_seconds=0.0)
    running = {"a": 1.5, "b": 9.0, "c": 4.0, "d": 30.0}
    # median 1.0 -> stragglers run > 2.0 s: d, b, c; budget 10% of 40 tasks = 4, one already used
    assert choose_backups(policy, 40, [1.0] * 30, running, {"x"}, idle=8) == ["d", "b", "c"]
    assert choose_backups(policy, 40, [1.0] * 30, running, {"x", "y", "z", "w"}, idle=8) == []
    assert choose_backups(policy, 40, [1.0] * 30, running, {"d"}, idle=1) == ["b"]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 200),
    st.lists(st.floats(0.01, 100), max_size=200),
    st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.floats(0, 1000), max_size=30),
    st.integers(0, 10),
    st.floats(0.1, 1.0),
    st.floats(0.0, 0.5),
)
def test_backups_respect_every_limit(total: int, finished: list[float], running: dict[str, float], idle: int, after: float, budget: float) -> None:
    policy = SpeculationPolicy(after=after, budget=budget, min_seconds=0.0)
    finished = finished[:total]
    chosen = choose_backups(policy, total, finished, running, set(), idle)
    assert len(chosen) <= idle and len(chosen) <= policy.allowance(total)
    assert len(set(chosen)) == len(chosen) and set(chosen) <= set(running)
    if chosen:
        assert len(finished) >= after * total
        assert all(running[t] > policy.slowness * statistics.median(finished) for t in chosen)
        slower = [t for t in running if t not in chosen and running[t] > running[chosen[-1]]]
        assert not slower  # the longest-running stragglers go first


def test_bad_policy_is_refused() -> None:
    with pytest.raises(ConfigError):
        SpeculationPolicy(after=0.0)
    with pytest.raises(ConfigError):
        FaultSpec(error_rate=1.5)


# --- fault-injecting storage ---------------------------------------------------------------------


def test_faulty_backend_injects_and_the_store_retries(tmp_path: Path) -> None:
    spec = FaultSpec(error_rate=0.3, slow_rate=0.2, slow_factor=3.0, min_delay=0.001, seed=1)
    faulty = FaultyBackend(LocalBackend(str(tmp_path)), spec, sleep=lambda s: None)
    with pytest.raises(TransientStorageError):
        for i in range(50):
            faulty.put(f"k{i}", [b"x"])
    config = Config(faults=spec, retry=RetryPolicy(attempts=8, base_delay=0.0, max_delay=0.0))
    store = open_store(tmp_path.as_uri(), config)
    for i in range(100):
        store.put(f"obj{i}", b"v" * i)
    assert all(bytes(store.get(f"obj{i}")) == b"v" * i for i in range(100))
    assert store.stats.retries > 0
    injected = store.backend.injected  # type: ignore[attr-defined]
    assert injected["errors"] > 0 and injected["slow"] > 0


# --- executor: kills, stragglers, speculation ------------------------------------------------------


def test_killed_tasks_are_retried_alone(tmp_path: Path) -> None:
    config = Config(concurrency=2, speculation=None)
    tasks = [Task(f"t{i}", helpers.sleep_then_square, (0.2, i)) for i in range(10)]
    with LocalExecutor(config, kill_rate=0.5, seed=3) as executor:
        results = executor.map(tasks)
        assert executor.kills > 0
    assert [r.value for r in results] == [i * i for i in range(10)]
    assert sum(r.attempts > 1 for r in results) == executor.kills


def test_a_chosen_task_dies_even_when_it_finishes_before_its_kill_time() -> None:
    """Chaos kills follow the seed, not timing: a task chosen to die that finishes first dies just
    before its reply counts, so every task of a kill_rate=1 run is killed once and retried."""
    tasks = [Task(f"t{i}", helpers.square, (i,)) for i in range(6)]
    with LocalExecutor(Config(concurrency=2, speculation=None), kill_rate=1.0, seed=1) as executor:
        results = executor.map(tasks)
        assert executor.kills == 6
    assert [r.value for r in results] == [i * i for i in range(6)]
    assert [r.attempts for r in results] == [2] * 6


def test_a_straggler_gets_a_backup_copy_that_wins(tmp_path: Path) -> None:
    marker = tmp_path / "slow-once"
    config = Config(concurrency=2, speculation=SpeculationPolicy(after=0.5, slowness=1.5, budget=0.5, min_seconds=0.1))
    tasks = [Task(f"t{i}", helpers.slow_first_copy, (str(marker), i, 0.05, 30.0 if i == 3 else 0.0)) for i in range(6)]
    with LocalExecutor(config) as executor:
        results = executor.map(tasks)
        assert executor.backups == 1
    assert not (tmp_path / "slow-once-3.slept").exists()  # the 30-second first copy was stopped, not waited for
    assert [r.value for r in results] == list(range(6))
    assert [r.task_id for r in results if r.backup] == ["t3"]


# --- chaos: a sort through killed tasks and a faulty store ------------------------------------------


@pytest.mark.slow
def test_sort_survives_kills_throttling_and_slow_requests(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    chaos = config.with_(faults=FaultSpec(error_rate=0.05, slow_rate=0.01, slow_factor=10.0, seed=5), retry=RetryPolicy(attempts=10, base_delay=0.001, max_delay=0.01))
    gensort(f"{root}/in", 4_000_000, 4, config)
    with LocalExecutor(chaos, kill_rate=0.1, task_attempts=4, seed=5) as executor:
        report = sort(f"{root}/in", f"{root}/out", 8, chaos, executor=executor)
    result, _ = valsort(f"{root}/out", config, input_url=f"{root}/in")
    assert result.ok, result
    assert report.io.retries > 0
    assert leftover_tmp(root, config) == []


# --- cleaning up after crashed drivers --------------------------------------------------------------


def test_clean_removes_leftovers_by_run_id_and_age(store_env: tuple[str, Config]) -> None:
    from click.testing import CliRunner

    from croupier.cli import main
    from croupier.jobs.clean import clean, find_leftovers

    root, config = store_env
    store = open_store(root, config)
    store.put("data/keep.bin", b"data")
    store.put("_croupier_tmp/20200101T000000Z-aaaaaaaa/map/0", b"old")
    store.put("_croupier_tmp/20200101T000000Z-aaaaaaaa/map/1", b"old!")
    store.put("_croupier_tmp/20991231T000000Z-bbbbbbbb/x", b"new")
    runs = find_leftovers(root, config)
    assert [(r.run_id, len(r.keys), r.bytes) for r in runs] == [("20200101T000000Z-aaaaaaaa", 2, 7), ("20991231T000000Z-bbbbbbbb", 1, 3)]
    assert [r.run_id for r in clean(root, config, older_than=3600, dry_run=True).removed] == ["20200101T000000Z-aaaaaaaa"]
    assert len(find_leftovers(root, config)) == 2  # dry run deleted nothing
    assert [r.run_id for r in clean(root, config, older_than=3600).removed] == ["20200101T000000Z-aaaaaaaa"]
    args = ["clean", root, "--run-id", "20991231T000000Z-bbbbbbbb"]
    if root.startswith("s3://"):
        args = ["--s3-endpoint", config.s3.endpoint, *args]  # type: ignore[list-item]
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    out = CliRunner().invoke(main, args, env=env)  # no lease, started "in the future": may be starting
    assert out.exit_code == 0, out.output
    assert "skipped run 20991231T000000Z-bbbbbbbb: no lease" in out.output
    out = CliRunner().invoke(main, [*args, "--force"], env=env)
    assert out.exit_code == 0, out.output
    assert "deleted run 20991231T000000Z-bbbbbbbb: 1 object(s)" in out.output
    assert find_leftovers(root, config) == []
    assert [o.key for o in store.list()] == ["data/keep.bin"]


# --- isolation and secrets ---------------------------------------------------------------------------


@pytest.mark.s3
def test_two_jobs_at_once_on_one_bucket_stay_apart(s3_config: Config) -> None:
    import threading
    import uuid

    from .conftest import BUCKET

    root = f"s3://{BUCKET}/iso-{uuid.uuid4().hex[:8]}"
    config = s3_config
    gensort(f"{root}/in", 2_000_000, 2, config)
    errors: list[BaseException] = []

    def job(name: str) -> None:
        try:
            sort(f"{root}/in", f"{root}/{name}", 4, config)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for name in ("a", "b"):
        result, _ = valsort(f"{root}/{name}", config, input_url=f"{root}/in")
        assert result.ok, result
    assert leftover_tmp(root, config) == []
    open_store(root, config).delete_prefix()


@pytest.mark.s3
def test_credentials_never_appear_in_reports_errors_or_explain(s3_config: Config, seaweedfs) -> None:  # type: ignore[no-untyped-def]
    import uuid

    import croupier.frame as cf

    from .conftest import BUCKET

    secret = s3_config.s3.secret_access_key.reveal()  # type: ignore[union-attr]
    key_id = s3_config.s3.access_key_id.reveal()  # type: ignore[union-attr]
    root = f"s3://{BUCKET}/sec-{uuid.uuid4().hex[:8]}"
    report = gensort(f"{root}/in", 200_000, 2, s3_config)
    texts = [report.render(), str(report.to_dict()), repr(s3_config), str(s3_config)]
    frame = cf.scan_gensort(f"{root}/in", config=s3_config.with_(tmp_url=root))
    texts.append(frame.group_by().agg(cf.count()).explain(analyze=True))
    try:
        cf.scan_parquet(f"{root}/nothing-here", config=s3_config)
    except CroupierError as exc:
        texts.append(str(exc))
    assert len(texts) == 6
    for text in texts:
        assert secret not in text and key_id not in text
    open_store(root, s3_config).delete_prefix()


# --- eager and lazy reducers --------------------------------------------------------------------------


def test_gated_tasks_wait_for_their_share_of_prerequisites() -> None:
    config = Config(concurrency=2, speculation=None)
    first = [Task(f"m{i}", helpers.sleep_then_square, (0.15, i)) for i in range(8)]
    gated = [Task(f"r{i}", helpers.sleep_then_square, (0.0, i), after=(tuple(t.id for t in first), 0.5)) for i in range(3)]
    with LocalExecutor(config) as executor:
        results = {r.task_id: r for r in executor.map(gated + first)}  # gated first in the queue: still wait
    finished = sorted(results[t.id].finished for t in first)
    for t in gated:
        assert results[t.id].started >= finished[3] - 0.01  # half of the 8 first tasks were done
    assert [results[t.id].value for t in gated] == [0, 1, 4]


def test_a_retried_prerequisite_is_not_starved_by_waiting_tasks(tmp_path: Path) -> None:
    """A gated task is running and waits (polls) for m1's output; m1's first attempt crashes. Its
    retry must get a function before the other gated task, or both would wait forever."""
    config = Config(concurrency=2, speculation=None, task_timeout=60)
    marker = tmp_path / "crash"
    first = [Task("m0", helpers.sleep_then_square, (0.0, 3)), Task("m1", helpers.crash_once_after, (str(marker), 0.3))]
    gated = [Task(f"r{i}", helpers.wait_for_file, (str(marker) + ".done", 30.0), after=(("m0", "m1"), 0.5)) for i in range(2)]
    with LocalExecutor(config) as executor:
        results = executor.map(first + gated)
    assert [r.value for r in results] == [9, "survived", True, True]


@pytest.mark.parametrize("reducers", ["eager", "lazy"])
def test_eager_and_lazy_reducers_sort_correctly(store_env: tuple[str, Config], reducers: str) -> None:
    from croupier.exchange.plan import ExchangePlan
    from croupier.exchange.topology import Topology

    root, config = store_env
    config = config.with_(reducers=reducers)
    gensort(f"{root}/in", 2_000_000, 3, config)
    report = sort(f"{root}/in", f"{root}/out", 6, config, plan=ExchangePlan(Topology((6,)), False))
    result, _ = valsort(f"{root}/out", config, input_url=f"{root}/in")
    assert result.ok, result
    stages = [s.name for s in report.stages]
    assert "map" in stages and "reduce" in stages
    if reducers == "eager":  # one executor call ran the mappers and the (gated) reducers together
        assert report.summary["reducers"].startswith("eager")
        assert report.stage("map").wall_seconds == report.stage("reduce").wall_seconds
    assert leftover_tmp(root, config) == []


# --- look-ahead prefetch --------------------------------------------------------------------------------


def test_prefetch_serves_next_tasks_without_changing_request_counts(store_env: tuple[str, Config]) -> None:
    from croupier.exchange.plan import ExchangePlan
    from croupier.exchange.topology import Topology

    root, config = store_env
    gensort(f"{root}/in", 2_000_000, 8, config)
    plan = ExchangePlan(Topology((4, 2)), True)
    counts = {}
    for prefetch in (True, False):
        cfg = config.with_(prefetch=prefetch, speculation=None)
        report = sort(f"{root}/in", f"{root}/out-{prefetch}", 8, cfg, plan=plan)
        result, _ = valsort(f"{root}/out-{prefetch}", config, input_url=f"{root}/in")
        assert result.ok
        counts[prefetch] = {s.name: {k: v.requests for k, v in s.io.kinds.items()} for s in report.stages if s.name not in ("driver", "lease")}
        served = sum(k.prefetched for k in report.io.kinds.values())
        if prefetch:
            assert served > 0 and "look-ahead prefetch" in report.render()
        else:
            assert served == 0
    assert counts[True] == counts[False]


def test_a_prefetch_that_failed_transiently_counts_as_a_retry(store_env: tuple[str, Config]) -> None:
    """A look-ahead prefetch is one attempt of the task's request. One that failed transiently was
    dropped as a plain miss, so the run's retries depended on which requests happened to be
    prefetched (about a third of a chaos sort's GETs): the chaos sort's ``report.io.retries > 0``
    then failed now and then although faults were injected. It now counts as a retry of the request
    the task sends itself; an object not written yet stays a plain miss."""
    from croupier.storage import Store, open_backend
    from croupier.storage.prefetch import PrefetchCache

    root, config = store_env
    open_store(root, config).put("x/obj", b"0123456789")
    store = Store(open_backend(root, config), RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0), prefetch=PrefetchCache(1 << 20))
    assert store.prefetch is not None
    # seed 0: the first request of this faulty backend fails (Random(0).random() = 0.84 < 0.9)
    faulty = FaultyBackend(open_backend(root, config), FaultSpec(error_rate=0.9, seed=0), sleep=lambda s: None)
    store.prefetch.prepare("t1", [(faulty.url, "x/obj", 2, 6)], lambda url: faulty)
    assert bytes(store.get_range("x/obj", 2, 6)) == b"2345"
    assert faulty.injected["errors"] == 1
    got = store.stats.kinds["GET_RANGE"]
    assert (got.requests, got.retries, got.prefetched) == (1, 1, 0)

    # an object that is not there: a plain miss, no retry (the task's own GET fails as it would have)
    store.prefetch.prepare("t2", [(store.backend.url, "x/missing", None, None)], lambda url: store.backend)
    with pytest.raises(ObjectNotFound):
        store.get("x/missing")
    assert store.stats.requests("GET") == 0 and store.stats.misses("GET") == 1 and store.stats.retries == 1  # counted as a miss


# --- bad input and Ctrl-C ------------------------------------------------------------------------------


def test_unsortable_key_type_is_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from croupier.errors import InputError, TaskError

    inp = tmp_path / "in"
    inp.mkdir()
    pq.write_table(pa.table({"key": [[1, 2], [3]], "payload": [b"x" * 90, b"y" * 90]}), inp / "lists.parquet")
    with pytest.raises((InputError, TaskError), match=r"lists.parquet: column 'key' has type list<element: int64>.*expected binary"):
        sort(inp.as_uri(), (tmp_path / "out").as_uri(), 2, Config(concurrency=2))
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").rglob("*")) == []


def test_ctrl_c_during_a_sort_leaves_nothing_behind(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    config = Config(concurrency=2)
    inp, out = (tmp_path / "in").as_uri(), tmp_path / "out"
    gensort(inp, 200_000_000, 4, config)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path))  # (a killed process's pymp-* folder stays in the test's)
    proc = subprocess.Popen([sys.executable, "-m", "croupier.cli", "--concurrency", "2", "sort", inp, out.as_uri(), "--workers", "16"], env=env, stderr=subprocess.PIPE, preexec_fn=sigint_default)
    deadline = time.time() + 60
    while time.time() < deadline and not list(out.glob("_croupier_tmp/*/*/*")):
        time.sleep(0.02)
    assert proc.poll() is None, "the sort ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert [p for p in out.rglob("*") if p.is_file()] == []
