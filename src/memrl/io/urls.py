"""Server URLs in messages: a user name or password inside a URL (``http://user:pass@host/v1``) is a secret,
and secrets are never printed or written (a key goes in an environment variable, sent as a header)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


def shown_url(url: str) -> str:
    """``url`` as messages and reprs show it: its user name and password replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a malformed URL>"
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def no_credentials(url: str | None) -> str | None:
    """A config validator: a ``*.base_url`` holding credentials is refused, since the config is written to
    config.yaml and to trackers and printed when it changes; the key belongs in the ``api_key_env`` variable."""
    if url is not None and "@" in urlsplit(url).netloc:
        raise ValueError(f"{shown_url(url)} holds a user name or password; put the key in the environment "
                         "variable api_key_env names (sent as a Bearer header), never in the URL, which is "
                         "written to config.yaml and logs")
    return url


_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def masked(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***`` (a value echoed in an error)."""
    return _USERINFO.sub(r"\1***@", text)
