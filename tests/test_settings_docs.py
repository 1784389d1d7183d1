"""A setting is described once, by the docstring under its dataclass field (``app.settings_docs``): the
config section's field description and every command flag that sets it say exactly that."""

from __future__ import annotations

import dataclasses
import re

import click
import pytest
import typer

from agents.direct import DirectArgs
from agents.ppo import PPOArgs
from agents.sac import SACArgs
from agents.tournament.settings import TournamentArgs
from app import settings_docs
from app.cli import cli
from app.config import Config
from envs.params import EnvParams

DATACLASSES = {
    "PPOArgs": PPOArgs,
    "SACArgs": SACArgs,
    "DirectArgs": DirectArgs,
    "TournamentArgs": TournamentArgs,
    "EnvParams": EnvParams,
}
#: Every flag that sets a setting, and the setting: its help is that setting's one description.
FLAGS = {
    ("train", "--steps"): "agent.total_steps",
    ("train", "--pods"): "tournament.pods",
    ("train", "--budget-steps"): "tournament.budget_steps",
    ("train", "--budget-minutes"): "tournament.budget_minutes",
    ("train", "--backend"): "tournament.backend",
    ("train", "--workers"): "tournament.workers",
    ("train", "--address"): "tournament.address",
    ("train", "--envs-per-pod"): "tournament.envs_per_pod",
    ("walkforward", "--window"): "walkforward.window",
    ("walkforward", "--step-sessions"): "walkforward.step_sessions",
    ("walkforward", "--folds"): "walkforward.num_folds",
    ("walkforward", "--budget-steps"): "walkforward.budget_steps",
    ("walkforward", "--budget-minutes"): "walkforward.budget_minutes",
    ("walkforward", "--gate"): "gate.rule",
    ("walkforward", "--before-champion"): "gate.before_champion",
}


@pytest.mark.parametrize("name", sorted(DATACLASSES))
def test_every_dataclass_field_has_its_docstring(name):
    """The parser finds a docstring under each field (and no more: it reads the source, it does not
    guess)."""
    fields = [f.name for f in dataclasses.fields(DATACLASSES[name])]
    docs = settings_docs.field_docs(name)
    assert list(docs) == fields
    assert all(doc and "\n" not in doc for doc in docs.values())


def test_the_docstring_is_the_string_under_the_field():
    assert settings_docs.field_doc("TournamentArgs", "leaderboard_size") == "K: entries kept on the board"
    assert settings_docs.field_doc("PPOArgs", "gamma") == "discount factor"


def _sections():
    config = Config()
    for section in settings_docs.SECTION_DATACLASSES:
        model = type(getattr(config, section))
        for name, field in model.model_fields.items():
            owner = settings_docs.owner(section, name)
            if owner is not None:
                yield pytest.param(section, name, field.description, owner, id=f"{section}.{name}")


@pytest.mark.parametrize(("section", "name", "description", "owner"), list(_sections()))
def test_a_config_field_says_what_its_dataclass_field_says(section, name, description, owner):
    doc = settings_docs.field_doc(owner, name)
    classes = [DATACLASSES[c] for c in settings_docs.SECTION_DATACLASSES[section]]
    readers = [c for c in classes if name in {f.name for f in dataclasses.fields(c)}]
    # An [agent] field not every learner reads says which do.
    labels = {"PPOArgs": "PPO", "SACArgs": "SAC", "DirectArgs": "direct"}
    scope = "" if len(readers) == len(classes) else ", ".join(labels[c.__name__] for c in readers) + ": "
    assert description == scope + doc


def _commands() -> dict[str, click.Command]:
    return typer.main.get_command(cli).commands


@pytest.mark.parametrize(("command", "flag"), sorted(FLAGS), ids=lambda x: x)
def test_a_flag_says_what_its_setting_says(command, flag):
    key = FLAGS[(command, flag)]
    (option,) = [p for p in _commands()[command].params if flag in p.opts]
    shown = option.help.replace("\\[", "[")
    doc = settings_docs.setting_doc(key)
    assert shown.endswith(f"{doc} [{key}].") and len(shown) - len(doc) <= len(f"Tournament:  [{key}].")


def test_the_sections_are_the_configs():
    sections = {name: field.annotation.__name__ for name, field in Config.model_fields.items()}
    assert sections == settings_docs.SECTION_CLASSES


def test_a_setting_without_a_dataclass_is_described_by_its_section_field():
    field = Config.model_fields["gate"].annotation.model_fields["rule"]
    assert settings_docs.setting_doc("gate.rule") == field.description


def test_every_flag_that_names_a_setting_is_listed():
    """A flag whose help ends with a setting's key ("[tournament.pods].") is in FLAGS, so its wording is
    checked above."""
    named = {}
    for name, command in _commands().items():
        for param in command.params:
            found = re.search(
                r"\[(\w+)\.(\w+)\]\.$", (getattr(param, "help", None) or "").replace("\\[", "[")
            )
            if found and found[1] in settings_docs.SECTION_CLASSES:
                named[(name, param.opts[0])] = f"{found[1]}.{found[2]}"
    assert named == FLAGS
