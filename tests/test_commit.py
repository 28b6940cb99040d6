"""Promises 2-4: ownership, atomic commit and one writer, on the local folder and on SeaweedFS.

The commit protocol is run step by step through a store that fails (or dies) at the n-th request,
for every n: readers always see the old output whole or the new one whole, byte for byte, and the
next writer always finds a location it can replace.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence, TypeVar

import pytest

from croupier.config import Config
from croupier.errors import ConfigError, CroupierError, InputError, OutputBusyError, OutputExistsError, StorageError
from croupier.storage import Store, open_store, parse_location
from croupier.storage.backend import Backend, Buffer, ObjectInfo
from croupier.storage.commit import LOCK, MANIFEST, OutputCommit, Part, read_manifest, read_parts

T = TypeVar("T")
OLD, NEW, NEXT = "20260101T000000Z-0000aaaa", "20260101T000001Z-0000bbbb", "20260101T000002Z-0000cccc"


class FailAt(Backend):
    """``inner``, except that request number ``n`` fails — before it is carried out, or after
    (the answer is lost). With ``crash`` every later request fails too: the writer is dead."""

    def __init__(self, inner: Backend, n: int, after: bool, crash: bool) -> None:
        self.inner, self.location = inner, inner.location
        self.n, self.after, self.crash = n, after, crash
        self.count, self.dead = 0, False

    @property
    def url(self) -> str:
        return self.inner.url

    def _call(self, fn: Callable[[], T]) -> T:
        if self.dead:
            raise StorageError("the writer is dead")
        self.count += 1
        if self.count != self.n:
            return fn()
        self.dead = self.crash
        if self.after:
            fn()
        raise StorageError(f"injected failure of request {self.n} ({'after' if self.after else 'before'} it)")

    def put(self, key: str, parts: Sequence[Buffer]) -> None:
        self._call(lambda: self.inner.put(key, parts))

    def put_create(self, key: str, parts: Sequence[Buffer]) -> str:
        return self._call(lambda: self.inner.put_create(key, parts))

    def put_replace(self, key: str, parts: Sequence[Buffer], version: str) -> str:
        return self._call(lambda: self.inner.put_replace(key, parts, version))

    def get(self, key: str) -> Buffer:
        return self._call(lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> Buffer:
        return self._call(lambda: self.inner.get_range(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._call(lambda: self.inner.head(key))

    def list_pages(self, prefix: str) -> list[list[ObjectInfo]]:
        return self._call(lambda: self.inner.list_pages(prefix))

    def delete(self, keys: Sequence[str]) -> None:
        self._call(lambda: self.inner.delete(keys))

    def purge_partial(self, prefix: str, contains: str = "") -> None:
        if not self.dead:
            self.inner.purge_partial(prefix, contains)


def write_output(store: Store, run_id: str, parts: dict[str, bytes], overwrite: bool = True, lease: float = 60) -> OutputCommit:
    """What a job does: begin, its tasks write the parts, commit."""
    commit = OutputCommit(store, run_id, overwrite, lease)
    commit.begin()
    for key, data in parts.items():
        store.put(key, data)
    commit.commit([Part(k, len(v), 1) for k, v in parts.items()], "records", "gensort", {"job": "test"})
    return commit


def parts_of(run_id: str, n: int) -> dict[str, bytes]:
    tag = run_id.rsplit("-", 1)[1]
    return {f"part-{i:05d}-{tag}": f"{run_id} part {i}".encode() * 50 for i in range(n)}


def visible(store: Store) -> dict[str, bytes] | None:
    """What a reader sees: the output's parts and their bytes (None: nothing committed)."""
    try:
        return {o.key: bytes(store.get(o.key)) for o in read_parts(store)}
    except InputError as exc:
        assert "being written" in str(exc), exc
        return None


# --- atomic commit: a failure at every step -------------------------------------------------------


def _requests_of_a_commit(location: str, config: Config) -> int:
    store = open_store(location, config)
    write_output(store, OLD, parts_of(OLD, 3))
    counter = FailAt(open_store(location, config).backend, n=0, after=False, crash=False)
    write_output(Store(counter), NEW, parts_of(NEW, 2))
    return counter.count


def test_a_failure_after_any_step_leaves_the_old_or_the_new_output_whole(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    steps = _requests_of_a_commit(f"{root}/count", config)
    assert steps >= 9  # lock, manifest read, listing, 2 parts, renewal, manifest, delete, release...
    old, new = parts_of(OLD, 3), parts_of(NEW, 2)
    seen_new = seen_old = 0
    for n in range(1, steps + 1):
        for after in (False, True):
            for crash in (False, True):
                location = f"{root}/n{n}-{after:d}{crash:d}"
                clean = open_store(location, config)
                write_output(clean, OLD, old)
                failing = Store(FailAt(open_store(location, config).backend, n, after, crash))
                commit = OutputCommit(failing, NEW, overwrite=True, lease=0.05)
                try:
                    commit.begin()
                    for key, data in new.items():
                        failing.put(key, data)
                    commit.commit([Part(k, len(v), 1) for k, v in new.items()], "records", "gensort", {"job": "test"})
                except StorageError:
                    try:
                        commit.abort()  # what the job does on failure (a dead writer cannot)
                    except StorageError:
                        assert crash
                state = visible(clean)
                assert state in (old, new), (n, after, crash, sorted(state or {}))
                seen_new += state == new
                seen_old += state == old
                if not crash and state == old:  # the failed writer cleaned up after itself
                    assert sorted(o.key for o in clean.list()) == sorted([MANIFEST, *old]), (n, after)
                if clean.exists(LOCK):  # a dead writer's lock: its lease expires and a period more passes; the next writer takes over
                    time.sleep(0.12)  # (no lock left: nothing to wait for, the next writer takes over at once)
                write_output(clean, NEXT, parts_of(NEXT, 2))
                assert visible(clean) == parts_of(NEXT, 2)
                assert sorted(o.key for o in clean.list()) == sorted([MANIFEST, *parts_of(NEXT, 2)]), (n, after, crash)
    assert seen_new and seen_old


def test_a_first_write_that_dies_leaves_nothing_visible(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    new = parts_of(NEW, 2)
    for n in range(1, 12):
        location = f"{root}/first{n}"
        failing = Store(FailAt(open_store(location, config).backend, n, after=True, crash=True))
        try:
            write_output(failing, NEW, new, overwrite=False, lease=0.05)
        except StorageError:
            pass
        assert visible(open_store(location, config)) in (None, new)


# --- one writer -----------------------------------------------------------------------------------


def test_two_concurrent_writers_one_commits_the_other_names_it(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    for round_ in range(8):
        location = f"{root}/race{round_}"
        barrier = threading.Barrier(2)
        outcome: dict[str, object] = {}
        runs = [f"20260101T00000{i}Z-{round_:04d}{i:04d}" for i in range(2)]

        def writer(run_id: str) -> None:
            store = open_store(location, config)
            commit = OutputCommit(store, run_id, overwrite=False, lease=30)
            try:
                commit.begin()
            except CroupierError as exc:
                outcome[run_id] = exc
                barrier.wait()
                return
            barrier.wait()  # the other writer has tried to begin meanwhile
            for key, data in parts_of(run_id, 2).items():
                store.put(key, data)
            commit.commit([Part(k, len(v), 1) for k, v in parts_of(run_id, 2).items()], "records", "gensort", {})
            outcome[run_id] = "committed"

        threads = [threading.Thread(target=writer, args=(r,)) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        winners = [r for r in runs if outcome[r] == "committed"]
        assert len(winners) == 1, outcome
        loser = next(r for r in runs if r not in winners)
        assert isinstance(outcome[loser], OutputBusyError) and f"run {winners[0]}" in str(outcome[loser])
        assert "host" in str(outcome[loser]) and "pid" in str(outcome[loser]) and "started" in str(outcome[loser])
        assert visible(open_store(location, config)) == parts_of(winners[0], 2)


def test_two_concurrent_jobs_into_one_output_one_commits(store_env: tuple[str, Config]) -> None:
    """Two gensort jobs into one new output at once: one commits, the other fails clearly; the
    output is the winner's, whole."""
    from croupier.jobs.gensort import gensort

    root, config = store_env
    out = f"{root}/both"
    results: dict[int, object] = {}

    def job(seed: int) -> None:
        try:
            results[seed] = gensort(out, 200_000, parts=2, config=config, seed=seed)
        except (OutputBusyError, OutputExistsError) as exc:
            results[seed] = exc

    threads = [threading.Thread(target=job, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    winners = [s for s, r in results.items() if not isinstance(r, Exception)]
    assert len(winners) == 1, results
    manifest = read_manifest(open_store(out, config))
    assert manifest is not None and manifest["seed"] == winners[0]
    assert manifest["run_id"] == results[winners[0]].run_id  # type: ignore[union-attr]
    keys = sorted(o.key for o in open_store(out, config).list())
    assert keys == sorted([MANIFEST, *(p["key"] for p in manifest["parts"])])


def test_a_writer_that_lost_its_lock_cannot_commit(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    store = open_store(f"{root}/lost", config)
    slow = OutputCommit(store, OLD, overwrite=False, lease=0.05)
    slow.begin()
    store.put("part-00000-0000aaaa", b"slow")
    time.sleep(0.12)  # its lease lapses and a period more passes: it was "suspended"
    write_output(store, NEW, parts_of(NEW, 1), overwrite=False)
    with pytest.raises(OutputBusyError, match="lost the writer lock"):
        slow.commit([Part("part-00000-0000aaaa", 4, 1)], "records", "gensort", {})
    slow.abort()
    assert visible(store) == parts_of(NEW, 1)
    assert sorted(o.key for o in store.list()) == sorted([MANIFEST, *parts_of(NEW, 1)])


# --- ownership --------------------------------------------------------------------------------------


def test_refusals_change_nothing(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    store = open_store(f"{root}/own", config)
    store.put("notes.txt", b"the user's")
    with pytest.raises(OutputExistsError, match="holds objects Croupier did not write, e.g. notes.txt"):
        write_output(store, OLD, parts_of(OLD, 1), overwrite=True)
    with pytest.raises(OutputExistsError, match="choose another output or pass --overwrite"):
        write_output(store, OLD, parts_of(OLD, 1), overwrite=False)
    assert [o.key for o in store.list()] == ["notes.txt"]  # no lock, no part left behind
    store.delete(["notes.txt"])
    write_output(store, OLD, parts_of(OLD, 2), overwrite=False)
    with pytest.raises(OutputExistsError, match="already holds an output"):
        write_output(store, NEW, parts_of(NEW, 1), overwrite=False)
    store.put("sub/added-by-hand.csv", b"x")
    before = {o.key: bytes(store.get(o.key)) for o in store.list()}
    with pytest.raises(OutputExistsError, match="e.g. sub/added-by-hand.csv"):
        write_output(store, NEW, parts_of(NEW, 1), overwrite=True)
    assert {o.key: bytes(store.get(o.key)) for o in store.list()} == before


def test_a_hadoop_success_marker_is_not_croupiers(store_env: tuple[str, Config]) -> None:
    """An empty ``_SUCCESS`` (Hadoop, Spark) is not a manifest: readers take every data object,
    and Croupier refuses to overwrite that output."""
    root, config = store_env
    store = open_store(f"{root}/spark", config)
    store.put("_SUCCESS", b"")
    store.put("part-00000.parquet", b"spark's")
    assert [o.key for o in read_parts(store)] == ["part-00000.parquet"]
    with pytest.raises(OutputExistsError, match="did not write"):
        write_output(store, OLD, parts_of(OLD, 1), overwrite=True)
    assert bytes(store.get("_SUCCESS")) == b"" and bytes(store.get("part-00000.parquet")) == b"spark's"


def test_readers_follow_the_manifest(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    store = open_store(f"{root}/read", config)
    commit = OutputCommit(store, OLD, overwrite=False, lease=30)
    commit.begin()
    store.put("part-00000-0000aaaa", b"not yet")
    with pytest.raises(InputError, match=f"being written by run {OLD}.*nothing is committed"):
        read_parts(store)
    commit.commit([Part("part-00000-0000aaaa", 7, 1)], "records", "gensort", {})
    store.put("part-00009-0000ffff", b"a stray part no manifest lists")
    assert [o.key for o in read_parts(store)] == ["part-00000-0000aaaa"]
    store.delete(["part-00000-0000aaaa"])
    with pytest.raises(InputError, match="lists part-00000-0000aaaa.*missing"):
        read_parts(store)


def test_outputs_overlapping_inputs_are_refused_before_any_work(store_env: tuple[str, Config]) -> None:
    from croupier.jobs.gensort import gensort
    from croupier.jobs.sort import sort

    root, config = store_env
    gensort(f"{root}/base/in", 100_000, parts=2, config=config)
    before = {o.key: bytes(open_store(root, config).get(o.key)) for o in open_store(root, config).list()}
    for out, message in ((f"{root}/base", "contains the input"), (f"{root}/base/in/sorted", "is inside the input"), (f"{root}/base/in", "contains the input")):
        with pytest.raises(ConfigError, match=message):
            sort(f"{root}/base/in", out, 2, config, overwrite=True)
    import croupier.frame as cf

    frame = cf.scan_gensort(f"{root}/base/in/*", config=config)
    with pytest.raises(ConfigError, match="contains the input"):
        frame.sink_parquet(f"{root}/base", overwrite=True)
    assert {o.key: bytes(open_store(root, config).get(o.key)) for o in open_store(root, config).list()} == before
    assert parse_location(f"{root}/base").contains(parse_location(f"{root}/base/in"))


# --- the issue's examples, through the command line -------------------------------------------------


def _cli(config: Config, root: str, *args: str):  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from croupier.cli import main

    prefix = ["--s3-endpoint", config.s3.endpoint] if root.startswith("s3://") and config.s3.endpoint else []
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "CROUPIER_CONCURRENCY": "2"}
    return CliRunner().invoke(main, [*prefix, *args], env=env)


def _snapshot(root: str, config: Config) -> dict[str, bytes]:
    store = open_store(root, config)
    return {o.key: bytes(store.get(o.key)) for o in store.list()}


def test_issue_examples_fragment_and_query_are_part_of_the_name(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    assert _cli(config, root, "gensort", f"{root}/in", "--size", "100KB", "--parts", "2").exit_code == 0
    open_store(f"{root}/data/out", config).put("precious.bin", b"the user's file")
    open_store(f"{root}/data/res", config).put("precious.bin", b"another file")
    for name in ("out#2", "res?v=2"):
        result = _cli(config, root, "sort", f"{root}/in", f"{root}/data/{name}")
        assert result.exit_code == 0, result.output
        assert read_manifest(open_store(f"{root}/data/{name}", config)) is not None
        check = _cli(config, root, "valsort", f"{root}/data/{name}", "--input", f"{root}/in")
        assert check.exit_code == 0 and "validation passed" in check.output, check.output
    assert bytes(open_store(f"{root}/data/out", config).get("precious.bin")) == b"the user's file"
    assert [o.key for o in open_store(f"{root}/data/out", config).list()] == ["precious.bin"]
    assert [o.key for o in open_store(f"{root}/data/res", config).list()] == ["precious.bin"]


def test_issue_examples_overwrite_never_deletes_inputs_or_other_files(store_env: tuple[str, Config]) -> None:
    root, config = store_env
    assert _cli(config, root, "gensort", f"{root}/base/in", "--size", "100KB", "--parts", "2").exit_code == 0
    open_store(f"{root}/base", config).put("beside.txt", b"unrelated")
    before = _snapshot(root, config)
    result = _cli(config, root, "sort", f"{root}/base/in", f"{root}/base", "--overwrite")
    assert result.exit_code != 0 and "contains the input" in result.output and "Traceback" not in result.output
    open_store(f"{root}/other", config).put("theirs.csv", b"a,b")
    result = _cli(config, root, "sort", f"{root}/base/in", f"{root}/other", "--overwrite")
    assert result.exit_code != 0 and "did not write, e.g. theirs.csv" in result.output
    assert _snapshot(root, config) == {**before, "other/theirs.csv": b"a,b"}
    assert _cli(config, root, "sort", f"{root}/base/in", f"{root}/mine").exit_code == 0
    result = _cli(config, root, "sort", f"{root}/base/in", f"{root}/mine")
    assert result.exit_code != 0 and "pass --overwrite" in result.output
    result = _cli(config, root, "sort", f"{root}/base/in", f"{root}/mine", "--overwrite", "-p", "3")
    assert result.exit_code == 0, result.output
    parts = [p["key"] for p in read_manifest(open_store(f"{root}/mine", config))["parts"]]  # type: ignore[index]
    assert len(parts) == 3 and sorted(o.key for o in open_store(f"{root}/mine", config).list()) == sorted([MANIFEST, *parts])


def test_a_chain_of_dead_writers_leaves_nothing_behind(store_env: tuple[str, Config]) -> None:
    """A writer dies holding the lock; the next one takes over and dies at any step of the take-
    over; the third finds the location clean enough to write, and leaves only its output."""
    root, config = store_env
    for n in range(1, 11):
        store = open_store(f"{root}/chain{n}", config)
        first = OutputCommit(store, OLD, overwrite=False, lease=0.05)
        first.begin()
        for key, data in parts_of(OLD, 2).items():
            store.put(key, data)  # then it dies
        time.sleep(0.12)  # lapsed a period ago: dead
        second = OutputCommit(Store(FailAt(open_store(f"{root}/chain{n}", config).backend, n, after=False, crash=True)), NEW, False, 0.05)
        try:
            second.begin()
            second.store.put(f"part-00000-{second.tag}", b"second")  # it may get this far, then dies
        except StorageError:
            pass
        time.sleep(0.12)
        write_output(store, NEXT, parts_of(NEXT, 1), overwrite=False)
        assert sorted(o.key for o in store.list()) == sorted([MANIFEST, *parts_of(NEXT, 1)]), n
