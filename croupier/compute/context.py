"""What a running task sees: its id, the run's config, and counted stores."""

from __future__ import annotations

from dataclasses import dataclass, field

from croupier.storage.prefetch import PrefetchCache
from croupier.config import Config
from croupier.storage import IOStats, Store, open_backend
from croupier.storage.backend import Backend
from croupier.storage.stats import BusyClock


@dataclass
class TaskContext:
    """Per-task handle to config and storage.

    State:
        task_id:  id of the running task
        config:   the run's config
        channels: request counters of this task by channel ("data" for input and output,
                  "exchange" for shuffle objects), returned to the driver with the result
        backends: backend cache of the worker process, shared across its tasks (connection reuse)
        prefetch: this task's inputs fetched ahead by the worker (look-ahead prefetch), if any
        clock:    wall-clock seconds this task had a request in flight (the union over its stores
                  and threads: the time it waited on storage)
    """

    task_id: str
    config: Config
    channels: dict[str, IOStats] = field(default_factory=dict)
    backends: dict[str, Backend] = field(default_factory=dict)
    prefetch: PrefetchCache | None = None
    clock: BusyClock = field(default_factory=BusyClock)

    def store(self, url: str, channel: str = "data") -> Store:
        """Open the store named by ``url``; its requests count against this task, under ``channel``."""
        backend = self.backends.get(url)
        if backend is None:
            backend = self.backends[url] = open_backend(url, self.config)
        return Store(backend, self.config.retry, self.channels.setdefault(channel, IOStats()), prefetch=self.prefetch, clock=self.clock)

    @property
    def io(self) -> IOStats:
        """All of this task's requests, every channel together."""
        return IOStats.total(self.channels.values())
