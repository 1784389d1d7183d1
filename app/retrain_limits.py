"""A retrain's time budget in minutes, the defaults every reader shares (standard library only).

``[nightly] max_minutes`` defaults to :data:`MAX_MINUTES` (``app.config_sections``); the retrain
enforces it (``app.nightly.budget``); ``podracer status`` and the alerts (torch-free readers) call a
retrain holding its lock past the budget plus :data:`SLACK_MINUTES` stuck, and a scheduled one that
many minutes late overdue.
"""

from __future__ import annotations

#: ``[nightly] max_minutes``' default: a nightly retrain longer than this is stuck, not slow.
MAX_MINUTES = 360.0
#: Minutes past a budget before ``status`` calls a retrain stuck, or a scheduled one overdue.
SLACK_MINUTES = 30.0
