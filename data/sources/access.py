"""What every Alpaca client shares (market data and the paper broker): the keys, checked; the URLs,
allow-listed; every request with a deadline.

- Keys come only from ``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY``. One holding whitespace or a
  control character is refused before any request (one line naming the variable, never the value):
  ``requests`` would refuse the header and quote its value in ``InvalidHeader``.
- A key goes only to Alpaca's hosts over https or to a loopback server (tests): the trading URL must
  be the *paper* host, the market-data URL Alpaca's data host.
- alpaca-py sends requests without a timeout; :func:`with_deadline` gives a client a session whose
  every request has one, so a server that accepts and never answers cannot hang a fetch or a cycle.

The error class is the caller's (``DataError`` in the data path, ``BrokerError`` in the broker's), so
each path reports in its own family.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from data.errors import PodracerError

KEY_ENV = "APCA_API_KEY_ID"
SECRET_ENV = "APCA_API_SECRET_KEY"
BASE_URL_ENV = "APCA_API_BASE_URL"
DATA_URL_ENV = "APCA_API_DATA_URL"
PAPER_URL = "https://paper-api.alpaca.markets"
DATA_URL = "https://data.alpaca.markets"
PAPER_HOSTS = frozenset({"paper-api.alpaca.markets"})
DATA_HOSTS = frozenset({"data.alpaca.markets", "data.sandbox.alpaca.markets"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: Seconds a market-data request may take (a page is up to 10,000 bars); the broker's is its
#: ``app.paper.alpaca_broker.BrokerRetryPolicy.timeout``.
DATA_TIMEOUT_S = 30.0


def allowed_url(url: str, hosts: frozenset[str] | set[str]) -> str | None:
    """``url`` without a trailing slash when its host is loopback (http/https) or one of ``hosts``
    over https; None otherwise."""
    parsed = urlparse(url)
    host = (parsed.hostname or "").lower()
    if host in LOOPBACK_HOSTS and parsed.scheme in {"http", "https"}:
        return url.rstrip("/")
    if host in hosts and parsed.scheme == "https":
        return url.rstrip("/")
    return None


def check_trading_url(url: str, error: type[PodracerError] = PodracerError) -> str:
    """Accept only Alpaca's paper host (https) or a loopback server; refuse anything else."""
    if (ok := allowed_url(url, PAPER_HOSTS)) is not None:
        return ok
    parsed = urlparse(url)
    raise error(
        f"refusing trading URL {parsed.scheme}://{(parsed.hostname or '').lower()}: podracer trades paper "
        f"accounts only ({PAPER_URL}); unset {BASE_URL_ENV} or point it at the paper API"
    )


def check_data_url(url: str, error: type[PodracerError] = PodracerError) -> str:
    """Accept only Alpaca's market-data host (https) or a loopback server, like the trading URL."""
    if (ok := allowed_url(url, DATA_HOSTS)) is not None:
        return ok
    parsed = urlparse(url)
    raise error(
        f"refusing market-data URL {parsed.scheme}://{(parsed.hostname or '').lower()}: the keys go only to "
        f"Alpaca's data API ({DATA_URL}) or a loopback server; unset {DATA_URL_ENV} or point it there"
    )


def bad_key_chars(value: str) -> bool:
    """Whitespace (a stray CR/LF from a copied .env line) or any control character in a key."""
    return any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value)


def keys_from_env(
    error: type[PodracerError] = PodracerError, *, what: str = "Alpaca paper keys"
) -> tuple[str, str]:
    """The API key pair from the environment, or a one-line ``error`` naming the variable (never its
    value)."""
    key = os.environ.get(KEY_ENV, "")
    secret = os.environ.get(SECRET_ENV, "")
    missing = [name for name, value in ((KEY_ENV, key), (SECRET_ENV, secret)) if not value.strip()]
    if missing:
        raise error(f"missing {what}: set {' and '.join(missing)} (keys are read from the environment only)")
    for name, value in ((KEY_ENV, key), (SECRET_ENV, secret)):
        if bad_key_chars(value):
            raise error(
                f"{name} contains whitespace or control characters (a stray newline or carriage "
                "return?): re-export it without them"
            )
    return key, secret


def with_deadline(client: Any, timeout_s: float) -> Any:
    """``client`` (an alpaca-py REST client) with a ``requests`` session whose every request times
    out after ``timeout_s`` seconds (connect and each read), unless the call sets its own."""
    import requests  # deferred: alpaca-py's dependency, only loaded when a client is made

    class _DeadlineSession(requests.Session):
        def request(self, *args, **kwargs):  # type: ignore[no-untyped-def]  # noqa: ANN002, ANN003, ANN202
            kwargs.setdefault("timeout", timeout_s)
            return super().request(*args, **kwargs)

    client._session = _DeadlineSession()
    return client
