"""Web origins (``scheme://host[:port]``), as allowed to call a chain from a browser.

The check is here, below both the authoring config (``RemoteConfig(cors_origins=...)``) and
the server (``CHAINS_CORS_ORIGINS``), so that both refuse the same mistakes with the same words.
"""

from __future__ import annotations

import re

from chains.errors import ChainsUsageError

__all__ = ["ANY_ORIGIN", "check_origin"]

ANY_ORIGIN = "*"
_ORIGIN = re.compile(
    r"(?i)(?P<scheme>https?)://(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>\d{1,5}))?"
)
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def check_origin(value: str) -> str:
    """``value`` as a browser sends it in ``Origin`` (``scheme://host[:port]``), or ``*``.

    >>> check_origin("HTTP://App.Example:80/")
    'http://app.example'
    >>> check_origin("https://app.example/page")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    chains.errors.ChainsUsageError: CORS origin 'https://app.example/page' has a path...
    """
    text = value.strip()
    if text == ANY_ORIGIN:
        return text
    if text.endswith("/"):
        text = text[:-1]
    match = _ORIGIN.fullmatch(text)
    if match is None:
        if re.fullmatch(r"https?://[^/]+/.+", text):
            raise ChainsUsageError(
                f"CORS origin {value!r} has a path; an origin is only scheme://host[:port], "
                "e.g. https://app.example or http://127.0.0.1:8080"
            )
        raise ChainsUsageError(
            f"CORS origin {value!r} is not an origin; give scheme://host[:port] "
            "(e.g. https://app.example or http://127.0.0.1:8080), or * for any origin"
        )
    scheme, host, port = match["scheme"].lower(), match["host"].lower(), match["port"]
    if port is not None and (int(port) > 65535 or port == _DEFAULT_PORTS[scheme]):
        if int(port) > 65535:
            raise ChainsUsageError(f"CORS origin {value!r} has port {port}, over 65535")
        port = None
    return f"{scheme}://{host}" + (f":{port}" if port else "")
