"""Merging executor calls: stages that become ready together share one batch of functions."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from croupier.compute.base import Task, TaskResult
from croupier.dag.run import Run


class Batcher:
    """Merges executor calls made at about the same time from several stage threads into one.

    A call that finds no batch running starts one, after waiting (at most ``LINGER``) for the
    calls of other stages that are ready to run but still preparing their tasks, as ``coming``
    says: stages that became ready together (the consumers of one producer) then share the
    functions, while a stage nothing else is about to join starts at once. (A fixed wait of 5 ms
    before every call was a fifth of a short query's time: TPC-H Q11 runs six stages one after
    another.) Without ``coming``, every batch waits the whole ``LINGER``.
    """

    #: Longest a batch waits for the calls of stages still preparing theirs.
    LINGER = 0.005
    #: How often the wait looks again at whether a stage is still coming.
    POLL = 0.0005

    def __init__(self, run: Run, coming: Callable[[set[str]], bool] | None = None, owner: Callable[[], str | None] | None = None) -> None:
        self._run = run
        self._coming = coming
        self._owner = owner  # the stage the calling thread runs (its exchange levels and rounds are its calls)
        self._cond = threading.Condition()
        self._queue: list[dict[str, Any]] = []
        self._busy = False
        self._seen: set[str] = set()  # names of the stages whose calls have been queued

    def map(self, name: str, tasks: list[Task]) -> list[TaskResult]:
        """Run one stage's tasks; return their results in order."""
        return self.map_many([(name, tasks)])[0]

    def map_many(self, parts: list[tuple[str, list[Task]]]) -> list[list[TaskResult]]:
        """Run several stages' tasks in one executor call (each reported as its own stage)."""
        request: dict[str, Any] = {"parts": parts, "done": False}
        with self._cond:
            self._queue.append(request)
            self._seen.update(name for name, _ in parts)
            owner = self._owner() if self._owner is not None else None
            if owner is not None:
                self._seen.add(owner)
            self._cond.notify_all()  # a batch waiting for this stage's call can go
            while not request["done"]:
                if not self._busy:
                    self._busy = True
                    break
                self._cond.wait()
            else:
                return self._outcome(request)
        try:
            with self._cond:
                self._linger()
                batch, self._queue = self._queue, []
            self._run_batch(batch)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        return self._outcome(request)

    def _linger(self) -> None:
        """Wait (holding the condition) up to LINGER while another stage's call is coming."""
        deadline = time.monotonic() + self.LINGER
        while (left := deadline - time.monotonic()) > 0:
            if self._coming is not None and not self._coming(set(self._seen)):
                return
            self._cond.wait(min(left, self.POLL))

    @staticmethod
    def _outcome(request: dict[str, Any]) -> list[list[TaskResult]]:
        if "error" in request:
            raise request["error"]
        return request["results"]  # type: ignore[no-any-return]

    def _run_batch(self, batch: list[dict[str, Any]]) -> None:
        tasks = [t for r in batch for _, part in r["parts"] for t in part]
        label = " + ".join(name for r in batch for name, _ in r["parts"])
        started = time.perf_counter()
        try:
            with self._run.progress_bar(label, len(tasks)) as bar:  # per stage (stages run together share one)
                results = {r.task_id: r for r in self._run.executor.map(tasks, self._run.config, on_done=lambda _: bar.update(1))}
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting stage
            for r in batch:
                r["error"], r["done"] = exc, True
            return
        wall = time.perf_counter() - started
        names = tuple(name for r in batch for name, _ in r["parts"])
        for r in batch:
            r["results"] = []
            for name, part in r["parts"]:
                got = [results[t.id] for t in part]
                r["results"].append(got)
                report = self._run.record(name, got, wall)
                report.shared = names if len(names) > 1 else ()  # one wall time for all of them
            r["done"] = True
