"""The batcher that merges the executor calls of stages ready at the same time: a call waits for
the stages still preparing theirs (so consumers of one producer share the functions), and starts
at once when no other stage is coming."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from croupier.compute.base import Task
from croupier.config import Config
from croupier.dag.batcher import Batcher
from croupier.dag.run import Run


def _double(ctx: Any, x: int) -> int:
    return 2 * x


def _run(tmp_path: Path) -> tuple[Run, list[list[str]]]:
    """A run whose executor records the task ids of every call (two functions, as the rest of the
    suite: an executor of another concurrency makes later ones start their workers by spawning)."""
    run = Run("batcher", Config(concurrency=2, progress=False, tmp_url=(tmp_path / "tmp").as_uri()))
    calls: list[list[str]] = []
    inner = run.executor.map

    def recording(tasks: list[Task], *args: Any, **kwargs: Any) -> Any:
        calls.append([t.id for t in tasks])
        return inner(tasks, *args, **kwargs)

    run.executor.map = recording  # type: ignore[method-assign]
    return run, calls


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    thread.start()
    return thread, out


def test_a_call_waits_for_a_stage_still_preparing_and_they_share_one_executor_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Batcher, "LINGER", 60.0)  # only the other stage's call can end the wait
    run, calls = _run(tmp_path)
    try:
        batcher = Batcher(run, lambda queued: "b" not in queued)  # stage b is ready, not queued yet
        first, got_a = _in_thread(lambda: batcher.map("a", [Task("a-0", _double, (1,))]))
        first.join(timeout=0.5)
        assert first.is_alive(), "the call for stage a went without waiting for stage b"
        got_b = batcher.map("b", [Task("b-0", _double, (2,)), Task("b-1", _double, (3,))])
        first.join(timeout=30)
        assert not first.is_alive()
        assert [r.value for r in got_a["value"]] == [2] and [r.value for r in got_b] == [4, 6]
        assert calls == [["a-0", "b-0", "b-1"]]
        assert run.report.stage("a").shared == ("a", "b") == run.report.stage("b").shared
    finally:
        run.close()


def test_a_call_no_other_stage_is_coming_for_starts_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Batcher, "LINGER", 60.0)
    run, calls = _run(tmp_path)
    try:
        batcher = Batcher(run, lambda queued: False)
        thread, got = _in_thread(lambda: batcher.map("a", [Task("a-0", _double, (5,))]))
        thread.join(timeout=30)
        assert not thread.is_alive(), "the call waited for no other stage"
        assert [r.value for r in got["value"]] == [10] and calls == [["a-0"]]
        assert run.report.stage("a").shared == ()
    finally:
        run.close()


def test_a_stage_making_its_exchange_calls_is_not_waited_for_by_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage binding its input runs the exchange's levels as calls of their own labels
    ("s1 level 2"); they are the stage's calls, so the batch does not wait for the stage."""
    monkeypatch.setattr(Batcher, "LINGER", 60.0)
    run, calls = _run(tmp_path)
    try:
        batcher = Batcher(run, lambda queued: "s1" not in queued, lambda: "s1")
        thread, got = _in_thread(lambda: batcher.map("s0 level 2", [Task("l-0", _double, (7,))]))
        thread.join(timeout=30)
        assert not thread.is_alive(), "the level's call waited for the stage that made it"
        assert [r.value for r in got["value"]] == [14] and calls == [["l-0"]]
    finally:
        run.close()
