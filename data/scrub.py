"""The one scrubber of secrets: every error text podracer writes to a file (registry, journal, run
and heartbeat records, alert state), a log, ``podracer status`` or the dashboard goes through
:func:`scrub`.

Why by value: an HTTP library quotes a refused header's value in its exception (``requests``'
``InvalidHeader`` with a secret holding a newline), a server may echo a key in an error body, and no
list of message formats can foresee every one. So the values of the secret environment variables
are replaced by ``***`` wherever they appear: as given, stripped, escaped as ``repr`` writes them
(``\\n`` for a newline), and each piece of one split by whitespace or control characters (a message
may quote half of it).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

#: Environment variables whose values never leave memory.
SECRET_ENVS = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY")
MASK = "***"
MIN_PIECE = 6  # shorter pieces of a split secret are too common to mask (and say too little to leak)
_SPLIT = re.compile(r"[\s\x00-\x1f\x7f]+")


def secret_values(names: tuple[str, ...] = SECRET_ENVS) -> list[str]:
    """Every form of every secret in the environment worth masking, longest first."""
    forms: set[str] = set()
    for name in names:
        value = os.environ.get(name, "")
        if not value.strip():
            continue
        candidates = {value, value.strip(), value.encode("unicode_escape").decode("ascii", "replace")}
        candidates |= {repr(value)[1:-1]}
        candidates |= set(_SPLIT.split(value))
        forms |= {c for c in candidates if len(c) >= MIN_PIECE}
    return sorted(forms, key=len, reverse=True)


def scrub(text: Any) -> Any:
    """``text`` with every secret value masked (see the module docstring); non-strings unchanged."""
    if not isinstance(text, str) or not text:
        return text
    for value in secret_values():
        if value in text:
            text = text.replace(value, MASK)
    return text


def scrub_all(obj: Any) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string scrubbed."""
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {k: scrub_all(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub_all(v) for v in obj]
    return obj


class ScrubFilter(logging.Filter):
    """A logging filter that masks secrets in every record it passes (installed on the CLI's log
    handler): the message is formatted once, scrubbed, and its arguments dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report, not ours
            return True
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_text is None and record.exc_info[1] is not None:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return True
