"""The retrain's and the paper loop's process lock: :class:`data.lock.ProcessLock` (``flock``), named
here for the app's modules."""

from data.lock import LockBusyError, LockInfo, ProcessLock, process_lock, read_lock_info

__all__ = ["LockBusyError", "LockInfo", "ProcessLock", "process_lock", "read_lock_info"]
