"""The paper loop's state files on a full disk: a failed write is one problem, never a dead loop.

The heartbeat (``heartbeat.json``) and the books' record (``reconcile.json``) are rewritten every
cycle, atomically (``data.atomic``), so when the disk is full (``ENOSPC``, or a quota: ``EDQUOT``)
the write fails and the last good file stays. :func:`write_state` turns that failure into a log line
and one problem raised through ``app.alerts`` (key :data:`PROBLEM_KEY`, check ``disk_full``, naming
the file), and the cycle goes on: trading needs neither file, the journal keeps the cycle. The next
state file written clears it. Any other ``OSError`` is raised as before.

A disk so full that the alert store (``<home>/alerts/raised.json``) cannot be written either still
shows: the heartbeat stops moving and ``podracer status`` reports the loop stale after two decision
intervals (``paper_stale``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from app.alerts import clear_problem, raise_problem, raised_problems
from data.errors import PodracerError, one_line

log = logging.getLogger(__name__)

#: The errors of a write that found no room: the disk is full, or the user's quota is.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
#: The key of the problem raised while a state file cannot be written (one for both files).
PROBLEM_KEY = "disk_full"


def write_state(path: str | os.PathLike[str], write: Callable[[], object]) -> bool:
    """Run ``write`` (the atomic write of ``<home>/paper/<file>``); on a full disk, log and raise the
    :data:`PROBLEM_KEY` problem and return False (the last good file stays); on success clear that
    problem if it was raised and return True."""
    path = Path(path)
    home = path.parent.parent
    try:
        write()
    except OSError as err:
        if err.errno not in NO_SPACE:
            raise
        message = (
            f"the paper loop cannot write {path.name} ({one_line(err)}): the last good copy stays; "
            "the loop goes on trading"
        )
        log.error("%s", message)
        with contextlib.suppress(OSError, PodracerError):  # the alert store may be on the full disk too
            raise_problem(home, PROBLEM_KEY, message, check="disk_full")
        return False
    with contextlib.suppress(OSError, PodracerError):
        if any(problem.key == PROBLEM_KEY for problem, _ in raised_problems(home)):
            clear_problem(home, PROBLEM_KEY)
    return True
