"""Keeping credentials out of text: URLs with a user and password in them, shown without.

Credentials reach Croupier in two ways: as :class:`croupier.config.Secret` values (which never print
themselves) and embedded in an endpoint URL (``http://user:secret@host``). :class:`S3Options`
moves the latter into Secrets when it is built, so no endpoint in a config holds them; every place
that turns a URL or a client library's message into text (store names, storage errors, the CLI's
error output) also passes it through :func:`redact`, in case one comes from elsewhere.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

#: ``scheme://user[:password]@`` at the start of a URL's authority.
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s?#]*)@")


def redact(text: str) -> str:
    """``text`` with the user and password of every ``scheme://user:password@host`` replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the (percent-decoded) user and password;
    (url, None, None) when it has none."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return clean, unquote(user) or None, unquote(password) or None
