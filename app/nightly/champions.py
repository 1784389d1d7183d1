"""What nightly lets the other stages read: the champion in charge, read-only.

The paper loop (``app.paper.champion``) follows the champion through this module, not through the
registry's own (``app.nightly.registry``), whose tables, schema and writers are nightly's business.
The pointer is an ``app.champion.Champion`` (with the ``decision_id`` that promoted it).
"""

from __future__ import annotations

from app.nightly.registry import RegistryBusy, RegistryError, current_champion

__all__ = ["RegistryBusy", "RegistryError", "current_champion"]
