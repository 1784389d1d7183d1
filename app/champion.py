"""The champion in charge as one typed value: :class:`Champion`.

Nightly's registry stores it (``app.nightly.registry``: the ``champion`` table's row, with ``info`` as
:class:`ChampionNote`; a demotion, which leaves no champion in charge, as a :class:`ChampionDemotion`), the gate reads it (``app.gate``: the incumbent), and every reader (the paper
loop, ``podracer status``, the dashboard, retention, a walk-forward's policy in charge) uses its
attributes. A walk-forward's incumbent is the same model: the fold whose challenger it was in
``fold``, its feature statistics in ``feature_spec``, no bundle. Standard library and pydantic only,
so torch-free readers (status, the dashboard) can name it.

A stage that follows the champion in charge without belonging to nightly (the paper loop) is handed
a :class:`ChampionPointer` (``app.nightly.champions.current_champion``) by the workflow that starts
it, and knows the pointer's failures as :class:`PointerError` / :class:`PointerBusy`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from data.errors import PodracerError


class ChampionNote(BaseModel):
    """Why a champion was promoted: the gate's figures on the window it decided on (selection figures),
    or, for one an operator put in charge by hand (``podracer promote``), ``source`` and ``reason``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    run_dir: str | None = Field(None, description="the challenger's run folder")
    challenger_dsr: float | None = Field(None, description="its PSR after the looks on the gate window")
    challenger_edge: str | None = Field(None, description="its out-of-sample verdict line there")
    previous_champion: str | None = Field(None, description="the champion it replaced (null: the first)")
    eval_role: str | None = Field(None, description='"selection": the figures chose it')
    source: str | None = Field(
        None, description='"manual": put in charge by hand (null: by the promotion rule)'
    )
    reason: str | None = Field(None, description="the operator's reason, for one put in charge by hand")


class Champion(BaseModel):
    """The policy in charge: the registry's champion pointer, or a walk-forward's incumbent."""

    model_config = ConfigDict(extra="allow", frozen=True)

    run_id: str = Field(description="the run whose policy it is")
    policy_dir: str = Field(description="its immutable policy folder")
    promoted_at: str | None = Field(None, description="ISO-8601 UTC time of the promotion (nightly)")
    bundle: str | None = Field(None, description="its onnxruntime bundle (null: none exported)")
    fitness: str | None = Field(None, description="the fitness the gate compared")
    fitness_value: float | None = Field(None, description="its fitness on the gate window")
    selection_end: str | None = Field(None, description="the last session its selection read")
    eval_start: str | None = Field(None, description="the gate window's first session")
    eval_end: str | None = Field(None, description="the gate window's last session")
    info: ChampionNote = Field(default_factory=ChampionNote, description="why it was promoted")
    decision_id: int | None = Field(None, description="the registry decision that promoted it")
    fold: int | None = Field(None, description="a walk-forward's fold whose challenger it was")
    feature_spec: dict[str, Any] | None = Field(
        None, description="a walk-forward incumbent's feature statistics"
    )

    @property
    def run_dir(self) -> Path | None:
        """The run folder of its tournament (its record holds its feature spec), if recorded."""
        return Path(self.info.run_dir) if self.info.run_dir else None

    @property
    def by_hand(self) -> bool:
        """Put in charge by an operator (``podracer promote``), not by the promotion rule."""
        return self.info.source == "manual"

    @property
    def verdict(self) -> str | None:
        """Its out-of-sample verdict line on the window the gate decided on."""
        return self.info.challenger_edge


class ChampionDemotion(BaseModel):
    """A champion that lost its place (the shadow book's demotion test: its edge over buy-and-hold gone,
    or its drawdown since promotion past the limit; or an operator, ``podracer demote``): the
    benchmark, or cash, is in charge after it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    run_id: str = Field(description="the champion demoted")
    reason: str = Field(description="why, in one line")
    demoted_at: str = Field(description="ISO-8601 UTC time of the decision that demoted it")
    session: str | None = Field(None, description="the last session its record read (ISO date)")
    decision_id: int | None = Field(None, description="the registry decision that demoted it")
    source: str = Field(
        "rule", description='"manual": demoted by hand (podracer demote), as its decision says'
    )


class PointerError(PodracerError):
    """The champion pointer cannot be read: its store is unreadable, corrupt or from a newer podracer."""


class PointerBusy(PointerError):
    """A writer holds the pointer's lock past the reader's timeout (a retrain recording its decision)."""


class ChampionPointer(Protocol):
    """Reads the champion in charge of ``home`` (None: none promoted yet), waiting at most ``timeout``
    seconds for a writer's lock (then :class:`PointerBusy`)."""

    def __call__(self, home: str | Path, *, timeout: float) -> Champion | None: ...
