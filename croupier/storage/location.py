"""Store locations: one :class:`Location` type, parsed once from text, with literal names.

Every place that reads a store URL from a user calls :func:`parse_location`; everything that
derives one location from another (a run's temporaries under an output, an output's parts) goes
through :meth:`Location.child` / :meth:`Location.join`, never through string concatenation. Keys
inside a :class:`croupier.storage.Store` stay relative strings, checked by :func:`check_key`.

Rules (the README's "Names" promise):

* **Three kinds of store.** ``redis://host:port[/db]/prefix`` names a prefix in one database
  of a Redis server (a fast tier; the database number defaults to 0). ``file:///abs/folder`` (or ``file://localhost/abs/folder``) or a plain
  path names a local folder; ``s3://bucket/prefix`` names a prefix of an S3 bucket. A plain path
  and ``file://`` + its absolute path name the same objects. A relative plain path is resolved
  against the current folder once, when it is parsed (leading ``./`` and ``../`` segments are
  allowed there, as in a shell). Any other ``scheme://`` is refused, naming the supported ones.
* **Names are literal**, as in the AWS CLI: no percent-decoding, no fragment, no query. ``#``,
  ``?``, ``%``, ``+``, ``:``, ``*``, spaces and any unicode are part of the name, byte for byte, on
  both stores. ``str(location)`` is the canonical URL and parses back to the same location.
* **Refused** with a :class:`~croupier.errors.ConfigError`, before any work: empty segments
  (``a//b``; one trailing ``/`` is fine), ``.`` and ``..`` segments (other than the leading ones of
  a relative plain path), control characters (``\\x00``-``\\x1f``, ``\\x7f``), backslashes (S3
  clients turn them into ``/``), text that is not valid unicode, a segment longer than 255 bytes
  (the local file system's limit) or an S3 key longer than 1024 bytes (S3's), a ``file://`` URL
  with a host other than ``localhost``, and an S3 URL without a bucket or with an invalid bucket
  name (3-63 lowercase letters, digits, ``.`` and ``-``, starting and ending with a letter or digit).

Nothing is ever silently dropped or truncated: a name either means exactly what it says, or it is
refused with a message saying why.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from croupier.errors import ConfigError

SCHEMES = ("file", "s3", "redis")
#: Longest name segment: most local file systems (ext4, xfs, apfs) cap a file name at 255 bytes.
MAX_SEGMENT_BYTES = 255
#: Longest S3 object key (bucket prefix included).
MAX_S3_KEY_BYTES = 1024

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SUPPORTED = "use file:///absolute/path, a folder path, or s3://bucket/prefix (redis://host:port[/db]/prefix for a fast tier)"
_REDIS_SERVER = re.compile(r"^([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})/(\d{1,5})$")


@dataclass(frozen=True)
class Location:
    """One place in one store: a local folder, or a prefix of an S3 bucket.

    State:
        scheme: "file" or "s3"
        bucket: the S3 bucket ("" for a local folder)
        path:   for "file" the absolute folder path ("/" for the root, never a trailing "/");
                for "s3" the key prefix without leading or trailing "/" ("" for the bucket's root)
    """

    scheme: str
    bucket: str
    path: str

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unsupported store scheme {self.scheme!r}; {_SUPPORTED}")
        if self.scheme == "s3":
            _check_bucket(self.bucket, f"s3://{self.bucket}")
        elif self.scheme == "redis":
            if not _REDIS_SERVER.match(self.bucket):
                raise ConfigError(f"a Redis location needs host:port/db, got {self.bucket!r}")
        elif self.bucket or not self.path.startswith("/"):
            raise ConfigError(f"a local location needs an absolute path, got {self.path!r}")
        for segment in self.segments:
            _check_segment(segment, str(self))
        if self.scheme != "file" and len(self.path.encode()) > MAX_S3_KEY_BYTES:
            raise ConfigError(f"S3 prefix of {self!s} is longer than {MAX_S3_KEY_BYTES} bytes")

    @property
    def segments(self) -> tuple[str, ...]:
        """The path's segments (bucket excluded)."""
        return tuple(s for s in self.path.split("/") if s) if self.path not in ("", "/") else ()

    @property
    def name(self) -> str:
        """The last segment ("" at a store's root)."""
        return self.segments[-1] if self.segments else ""

    @property
    def parent(self) -> Location:
        """The location one segment up (the root is its own parent)."""
        return self._with(self.segments[:-1])

    def child(self, name: str) -> Location:
        """The location of one more segment ``name`` (which must not contain ``/``)."""
        if "/" in name:
            raise ConfigError(f"a child name cannot contain '/', got {name!r}; use join()")
        return self.join(name)

    def join(self, *parts: str) -> Location:
        """The location of ``parts`` below this one; each part may hold several ``/``-separated
        segments, each checked like a parsed name (a trailing ``/`` is ignored)."""
        segments = list(self.segments)
        for part in parts:
            part = part.removesuffix("/")
            for segment in part.split("/"):
                _check_segment(segment, f"{self}/{part}")
                segments.append(segment)
        return self._with(tuple(segments))

    def key_of(self, other: Location) -> str:
        """The relative key of ``other`` below this location ("" when equal); ConfigError if
        ``other`` is not inside it."""
        if not self.contains(other):
            raise ConfigError(f"{other} is not inside {self}")
        return "/".join(other.segments[len(self.segments) :])

    def contains(self, other: Location) -> bool:
        """Whether ``other`` is this location or below it: same store, and this location's
        segments are a prefix of the other's (segment-wise: ``s3://b/out`` does not contain
        ``s3://b/output``)."""
        if (self.scheme, self.bucket) != (other.scheme, other.bucket):
            return False
        return other.segments[: len(self.segments)] == self.segments

    def overlaps(self, other: Location) -> bool:
        """Whether either location contains the other."""
        return self.contains(other) or other.contains(self)

    @property
    def is_s3(self) -> bool:
        return self.scheme == "s3"

    @property
    def is_local(self) -> bool:
        """Whether this is a folder of the local file system (not an S3 or Redis store)."""
        return self.scheme == "file"

    @property
    def is_redis(self) -> bool:
        return self.scheme == "redis"

    def _with(self, segments: tuple[str, ...]) -> Location:
        joined = "/".join(segments)
        return Location(self.scheme, self.bucket, "/" + joined if self.is_local else joined)

    def __str__(self) -> str:
        if not self.is_local:
            root = f"{self.scheme}://{self.bucket}"
            return f"{root}/{self.path}" if self.path else root
        return f"file://{self.path}"


def parse_location(text: str | os.PathLike[str] | Location) -> Location:
    """The location ``text`` names (see the module docstring for the rules); a
    :class:`Location` is returned as is."""
    if isinstance(text, Location):
        return text
    text = os.fspath(text)
    if not isinstance(text, str):
        raise ConfigError(f"a store URL must be text, got {text!r}; {_SUPPORTED}")
    if not text.strip():
        raise ConfigError(f"empty store URL; {_SUPPORTED}")
    _check_text(text)
    scheme = _SCHEME.match(text)
    if scheme is None:
        if text.lower().startswith("file:"):
            raise ConfigError(f"bad file URL {text!r}: write file:///absolute/path (three slashes)")
        if text.lower().startswith("s3:"):
            raise ConfigError(f"bad S3 URL {text!r}: write s3://bucket/prefix")
        return _plain_path(text)
    kind = scheme.group(1).lower()
    rest = text[scheme.end() :]
    if kind == "s3":
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ConfigError(f"bad S3 URL {text!r}: no bucket; write s3://bucket/prefix")
        _check_bucket(bucket, text)
        return Location("s3", bucket, "/".join(_segments(prefix, text)))
    if kind == "redis":
        return _redis_location(rest, text)
    if kind == "file":
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise ConfigError(f"bad file URL {text!r}: host {host!r} is not this machine; write file:///absolute/path (three slashes)")
        if not slash:
            raise ConfigError(f"bad file URL {text!r}: no path; write file:///absolute/path")
        return Location("file", "", "/" + "/".join(_segments(path, text)))
    raise ConfigError(f"unsupported store URL scheme {kind!r} in {text!r}; {_SUPPORTED}")


def _redis_location(rest: str, text: str) -> Location:
    """``redis://host:port[/db]/prefix``: the first segment after the server is the database
    number when it is all digits (default 0); write the database explicitly
    (``redis://h:6379/0/12/x``) for a prefix whose first segment is a number."""
    server, _, path = rest.partition("/")
    host, colon, port = server.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bad Redis URL {text!r}: write redis://host:port[/db]/prefix (the port is required)")
    first, _, tail = path.partition("/")
    if first.isdigit():
        db, path = int(first), tail
    else:
        db = 0
    return Location("redis", f"{host}:{int(port)}/{db}", "/".join(_segments(path, text)))


def check_key(key: str, where: str = "") -> str:
    """Check one object key relative to a store (the same rules as a name, no trailing ``/``);
    return it unchanged. Every backend calls this, so every store refuses the same keys."""
    if not key:
        raise ConfigError(f"empty object name{_under(where)}")
    _check_text(key)
    for segment in key.split("/"):
        _check_segment(segment, key + _under(where))
    return key


def check_prefix(prefix: str, where: str = "") -> str:
    """Check a listing prefix: a key, a key ending in ``/``, a partial name, or ""."""
    if prefix:
        check_key(prefix.removesuffix("/"), where)
    return prefix


def _under(where: str) -> str:
    return f" under {where}" if where else ""


def _plain_path(text: str) -> Location:
    """A local folder named by a plain path, relative ones resolved against the current folder."""
    segments = text.split("/")
    if segments and segments[-1] == "":
        segments.pop()  # one trailing slash
    leading = True
    for i, segment in enumerate(segments):
        if i == 0 and segment == "" and text.startswith("/"):
            leading = False
            continue
        if leading and segment in (".", ".."):
            continue  # ./x and ../x: the shell's meaning, resolved below
        leading = False
        _check_segment(segment, text)
    return Location("file", "", os.path.normpath(os.path.join(os.getcwd(), text)) if not text.startswith("/") else "/" + "/".join(s for s in segments if s))


def _segments(path: str, text: str) -> list[str]:
    """The segments of a URL path: one trailing ``/`` allowed, every segment checked."""
    path = path.removesuffix("/")
    if not path:
        return []
    parts = path.split("/")
    for segment in parts:
        _check_segment(segment, text)
    return parts


def _check_text(text: str) -> None:
    if "\\" in text:
        raise ConfigError(f"{text!r}: backslashes are not allowed in names (S3 clients turn them into '/'); use '/' between folders")
    bad = _CONTROL.search(text)
    if bad:
        raise ConfigError(f"{text!r}: control character {bad.group()!r} is not allowed in names")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{text!r}: not valid unicode ({exc.reason}); names are UTF-8 text") from exc


def _check_segment(segment: str, where: str) -> None:
    if segment == "":
        raise ConfigError(f"{where!r}: empty path segment ('//'); names must not contain '//'")
    if segment in (".", ".."):
        raise ConfigError(f"{where!r}: {segment!r} segments are not allowed in names; write the path without them")
    _check_text(segment)
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        raise ConfigError(f"{where!r}: segment {segment[:40]!r}... is longer than {MAX_SEGMENT_BYTES} bytes")


def _check_bucket(bucket: str, text: str) -> None:
    if not _BUCKET.match(bucket) or ".." in bucket or _IP.match(bucket):
        raise ConfigError(
            f"bad S3 URL {text!r}: {bucket!r} is not a valid bucket name "
            "(3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit)"
        )
