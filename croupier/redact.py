"""Keeping credentials out of text: URLs with a user and password in them, shown without.

Credentials reach Croupier in two ways: as :class:`croupier.config.Secret` values (which never print
themselves) and embedded in an endpoint URL (``http://user:secret@host``). :class:`S3Options`
moves the latter into Secrets when it is built, so no endpoint in a config holds them; every place
that turns a URL or a client library's message into text (store names, storage errors, the CLI's
error output) also passes it through :func:`redact`, in case one comes from elsewhere.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

#: ``http(s)://user[:password]@`` at the start of an endpoint URL. The password may hold ``/``,
#: ``+`` or ``?`` unescaped (AWS secret keys do), so everything up to the ``@`` counts; only
#: http(s) URLs are endpoints (``s3://bucket/a@b`` names an object and is left alone).
_USERINFO = re.compile(r"(?P<scheme>\bhttps?://)(?P<userinfo>[^\s@]*)@", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the user and password of every ``scheme://user:password@host`` replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the (percent-decoded) user and password;
    (url, None, None) when it has none."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url, None, None
    userinfo, _, address = rest.rpartition("@")  # a password may hold '/', '?', '#' unescaped
    user, _, password = userinfo.partition(":")
    return f"{scheme}://{address}", unquote(user) or None, unquote(password) or None
