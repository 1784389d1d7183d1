"""One default per setting: every learner/env/tournament dataclass field (and every load_market setting)
is settable from TOML with the same default, or on app.config.INTERNAL_FIELDS (with its reason)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from agents.direct import DirectArgs
from agents.ppo import PPOArgs
from agents.sac import SACArgs
from agents.tournament.settings import TournamentArgs
from app.config import INTERNAL_FIELDS, AgentConfig, Config, DataConfig, EnvConfig, TournamentConfig
from data.loader import LOAD_DEFAULTS
from envs.trading import EnvParams

SECTIONS: list[tuple[type, type[BaseModel]]] = [
    (PPOArgs, AgentConfig),
    (SACArgs, AgentConfig),
    (DirectArgs, AgentConfig),
    (EnvParams, EnvConfig),
    (TournamentArgs, TournamentConfig),
]


def _cases() -> list[tuple[type, type[BaseModel], dataclasses.Field]]:
    return [(cls, section, f) for cls, section in SECTIONS for f in dataclasses.fields(cls)]


@pytest.mark.parametrize(
    ("cls", "section", "field"), _cases(), ids=lambda x: getattr(x, "name", getattr(x, "__name__", ""))
)
def test_every_dataclass_field_is_a_toml_field_with_the_same_default(cls, section, field):
    key = f"{cls.__name__}.{field.name}"
    if key in INTERNAL_FIELDS:
        assert field.name not in section.model_fields, f"{key} is internal but [{section.__name__}] has it"
        return
    assert field.name in section.model_fields, (
        f"{key} cannot be set from TOML: add it to {section.__name__} or to app.config.INTERNAL_FIELDS"
    )
    toml_default = section.model_fields[field.name].default
    assert field.default is not dataclasses.MISSING, f"{key} has no plain default"
    assert toml_default == field.default and type(toml_default) is type(field.default), (
        f"{key} = {field.default!r} but {section.__name__}.{field.name} = {toml_default!r}"
    )


@pytest.mark.parametrize("name", sorted(LOAD_DEFAULTS))
def test_every_load_market_setting_is_a_data_field_with_the_same_default(name):
    if f"LOAD_DEFAULTS.{name}" in INTERNAL_FIELDS:
        assert name not in DataConfig.model_fields
        return
    assert name in DataConfig.model_fields, f"load_market's {name!r} cannot be set from [data]"
    assert DataConfig().model_dump()[name] == LOAD_DEFAULTS[name]
    assert set(DataConfig.model_fields) <= set(LOAD_DEFAULTS), "a [data] field load_market does not read"


def test_internal_fields_exist_and_say_why():
    names = {f"{cls.__name__}.{f.name}" for cls, _ in SECTIONS for f in dataclasses.fields(cls)}
    names |= {f"LOAD_DEFAULTS.{k}" for k in LOAD_DEFAULTS}
    for key, reason in INTERNAL_FIELDS.items():
        assert key in names, f"INTERNAL_FIELDS names {key}, which is not a field"
        assert reason.strip() and "\n" not in reason


def test_the_default_config_builds_the_default_dataclasses():
    """The mapping by name gives exactly the dataclass defaults (what a notebook's ``PPOArgs()`` gets)."""
    config = Config()
    for cls, section in SECTIONS:
        names = {f.name for f in dataclasses.fields(cls)}
        values = getattr(config, _section_name(section)).model_dump()
        assert cls(**{k: v for k, v in values.items() if k in names}) == cls()


def _section_name(section: type[BaseModel]) -> str:
    (name,) = [n for n, f in Config.model_fields.items() if f.annotation is section]
    return name
