"""The one exception family the CLI turns into a one-line message and a non-zero exit, and
:func:`one_line`, how any exception is quoted inside such a message.

It lives in ``data`` because every other package imports downstream -> upstream only
(app -> backtests -> agents -> envs -> data), so all of them can raise it.
"""

from __future__ import annotations

from data.scrub import scrub


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


class ArtifactError(PodracerError):
    """A file one stage wrote for another (``metrics.json``, the run record, ...) that is malformed or
    from a newer or unknown schema version (``data.artifact``)."""


def one_line(err: BaseException, limit: int | None = None, *, typed: bool = True) -> str:
    """``err`` as one line for a message: the first line of its text, after its type's name unless it
    is a :class:`PodracerError` (whose messages are written for the user); the type's name alone when
    the text is empty. ``limit``: at most that many characters of the text (a foreign reply's body).
    ``typed=False``: the text without the type's name (still the name when the text is empty), for a
    message that already says what failed, or quotes a message that names its own cause. Secrets
    are masked (``data.scrub``): a foreign error may quote a header or an echoed key."""
    text = scrub(str(err)).strip().splitlines()
    msg = text[0][:limit] if text else ""
    if not typed:
        return msg or type(err).__name__
    if isinstance(err, PodracerError):
        return msg
    return f"{type(err).__name__}: {msg}" if msg else type(err).__name__
