"""The one exception family the CLI turns into a one-line message and a non-zero exit.

It lives in ``data`` because every other package imports downstream -> upstream only
(app -> backtests -> agents -> envs -> data), so all of them can raise it.
"""

from __future__ import annotations


class PodracerError(Exception):
    """A user-facing error: bad input, bad config, missing artifact. The message is one line."""

    exit_code = 2


class DataError(PodracerError):
    """Malformed or insufficient market data."""


class ConfigError(PodracerError):
    """An invalid config file or option."""


class CheckpointError(PodracerError):
    """A missing, truncated, tampered or mismatched checkpoint / bundle."""


class BrokerError(PodracerError):
    """A broker reply we cannot act on (after retries)."""
