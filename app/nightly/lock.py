"""The retrain's and the paper loop's process lock: :class:`data.lock.ProcessLock` (``flock``), named
here for the app's modules."""

from data.lock import LockBusyError, LockInfo, ProcessLock, process_lock, read_lock_info

#: ``<home>/retrain.lock``: the retrain's lock (``podracer status`` reads its holder).
LOCK_NAME = "retrain.lock"

__all__ = ["LOCK_NAME", "LockBusyError", "LockInfo", "ProcessLock", "process_lock", "read_lock_info"]
