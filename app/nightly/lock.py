"""The retrain's and the paper loop's process lock: :class:`data.lock.ProcessLock` (``flock``), named
here for the app's modules."""

from data.lock import LockBusyError, LockInfo, ProcessLock, process_lock, read_lock_info

# <home>/retrain.lock: held by a retrain, and by a prune (app.nightly.retention), which never runs beside one.
RETRAIN_LOCK_NAME = "retrain.lock"

__all__ = ["RETRAIN_LOCK_NAME", "LockBusyError", "LockInfo", "ProcessLock", "process_lock", "read_lock_info"]
