"""One typed TOML config for a podracer run: data, env, agent, tournament, backtest, gate, nightly,
walkforward, paper, alerts, retention.

Every section is a frozen pydantic model that forbids unknown keys (``app.config_sections``, re-exported
here), so a typo or a wrong type is an error naming the key (``env.cost_rate: Input should be a valid
number``). ``load_config`` reads a TOML file (missing sections take their defaults); ``write_config``
writes the resolved config, seeds included, into every run directory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tomllib
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomli_w
from pydantic import ValidationError, ValidationInfo, model_validator

from agents.args import DirectArgs, PPOArgs, SACArgs
from agents.tournament.settings import TournamentArgs
from app.config_sections import (
    INTERNAL_FIELDS,
    NONE_MARKER,
    AgentConfig,
    AlertsConfig,
    BacktestConfig,
    DataConfig,
    EnvConfig,
    GateConfig,
    NightlyConfig,
    PaperConfig,
    RetentionConfig,
    Section,
    TournamentConfig,
    WalkForwardConfig,
    none_by_marker,
)
from data.atomic import atomic_write_bytes
from data.errors import ConfigError
from envs.params import EnvParams

__all__ = [
    "INTERNAL_FIELDS",
    "NONE_MARKER",
    "RENAMED_KEYS",
    "AgentConfig",
    "AlertsConfig",
    "BacktestConfig",
    "Config",
    "DataConfig",
    "EnvConfig",
    "GateConfig",
    "MOVED_TO_GATE",
    "NightlyConfig",
    "PaperConfig",
    "RetentionConfig",
    "TournamentConfig",
    "WalkForwardConfig",
    "config_to_toml",
    "load_config",
    "migrate_deprecated",
    "move_to_gate",
    "parse_config",
    "to_env_params",
    "to_learner_args",
    "to_tournament_args",
    "write_config",
    "load_run_config",
]

log = logging.getLogger(__name__)


#: Keys read under a new name, ``(section, old) -> new``: an old run's config.toml still loads
#: (``--resume``, backtests of old runs), with one warning per key.
RENAMED_KEYS: dict[tuple[str, str], str] = {
    ("env", "compile"): "fast_step",  # it selects the fast env step, which on CPU is not a compile
    # "significance" alone also named the bootstrap test; the level has one name everywhere.
    ("backtest", "significance"): "significance_level",
    ("nightly", "significance"): "significance_level",
}


#: Keys whose one home is now ``[gate]``: ``(section, old) -> (new, how old values read)`` (None: as
#: they are). An old config file still loads (:func:`move_to_gate`).
MOVED_TO_GATE: dict[tuple[str, str], tuple[str, dict[Any, str] | None]] = {
    ("nightly", "fitness"): ("fitness", None),
    ("nightly", "margin"): ("margin", None),
    ("nightly", "significance_level"): ("level", None),
    ("nightly", "shadow_book"): ("rule", {True: "book", False: "window"}),
    ("walkforward", "gate"): ("rule", {"book": "book", "nightly": "window", "always": "always"}),
    ("walkforward", "before_champion"): ("before_champion", None),
    ("paper", "before_champion"): ("before_champion", None),
}
#: The old keys' defaults: an old key at its default yields to another old key that says otherwise (a
#: written config.toml holds every key, ``[nightly] shadow_book = true`` beside ``[walkforward] gate``).
_OLD_DEFAULTS: dict[str, Any] = {"rule": "book", "before_champion": "benchmark"}


def move_to_gate(raw: Mapping[str, Any], source: str = "config") -> dict[str, Any]:
    """``raw`` with the keys of :data:`MOVED_TO_GATE` moved into ``[gate]``, and one warning line
    naming them. A moved key that disagrees with the ``[gate]`` key it moves to, or with another old
    key moving there (neither at its default), is a one-line :class:`ConfigError`."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in raw.items()}
    found: dict[str, list[tuple[str, Any, Any]]] = {}
    for (section, old), (new, values) in MOVED_TO_GATE.items():
        keys = out.get(section)
        if not isinstance(keys, dict) or old not in keys:
            continue
        value = keys.pop(old)
        read = values.get(value, value) if values is not None and isinstance(value, Hashable) else value
        found.setdefault(new, []).append((f"[{section}] {old}", value, read))
    if not found:
        return out
    gate = dict(out["gate"]) if isinstance(out.get("gate"), Mapping) else {}
    for new, olds in found.items():
        gate[new] = _moved_value(new, olds, gate, source)
    out["gate"] = gate
    moved = ", ".join(f"{name} -> {new}" for new, olds in found.items() for name, _, _ in olds)
    log.warning("%s: deprecated keys read under [gate]: %s; set them there (docs/nightly.md)", source, moved)
    return out


def _moved_value(new: str, olds: list[tuple[str, Any, Any]], gate: dict[str, Any], source: str) -> Any:
    """The value of ``[gate] new`` given the old keys that move to it (see :func:`move_to_gate`)."""
    if new in gate:
        for name, value, read in olds:
            if read != gate[new]:
                raise ConfigError(
                    f"{source}: {name} = {_shown(value)} conflicts with [gate] {new} = {_shown(gate[new])}; "
                    f"set only [gate] {new}"
                )
        return gate[new]
    distinct: list[tuple[str, Any, Any]] = []
    for one in olds:
        if all(one[2] != kept[2] for kept in distinct):
            distinct.append(one)
    if len(distinct) > 1 and new in _OLD_DEFAULTS:
        distinct = [one for one in distinct if one[2] != _OLD_DEFAULTS[new]]
    if len(distinct) > 1:
        (a, va, _), (b, vb, _) = distinct[:2]
        raise ConfigError(
            f"{source}: {a} = {_shown(va)} and {b} = {_shown(vb)} both move to [gate] {new} and disagree; "
            f"set only [gate] {new}"
        )
    return distinct[0][2]


def _shown(value: Any) -> str:
    """A value as TOML writes it (``false``, ``"book"``, ``0.1``)."""
    return tomli_w.dumps({"v": value})[4:].strip() if value is not None else "unset"


class Config(Section):
    """The whole resolved config of a run."""

    data: DataConfig = DataConfig()
    env: EnvConfig = EnvConfig()
    agent: AgentConfig = AgentConfig()
    tournament: TournamentConfig = TournamentConfig()
    backtest: BacktestConfig = BacktestConfig()
    gate: GateConfig = GateConfig()
    nightly: NightlyConfig = NightlyConfig()
    walkforward: WalkForwardConfig = WalkForwardConfig()
    paper: PaperConfig = PaperConfig()
    alerts: AlertsConfig = AlertsConfig()
    retention: RetentionConfig = RetentionConfig()

    @model_validator(mode="before")
    @classmethod
    def _moved_to_gate(cls, data: Any, info: ValidationInfo) -> Any:
        """Keys of older files that now live in ``[gate]`` are read there (:func:`move_to_gate`)."""
        if not isinstance(data, Mapping):
            return data
        return move_to_gate(data, (info.context or {}).get("source", "config"))

    def with_updates(self, **sections: dict[str, Any]) -> Config:
        """A copy with some fields of some sections replaced (validated); keys that moved to ``[gate]``
        are read there, as in a file (:func:`move_to_gate`)."""
        raw = self.model_dump()
        for name, updates in move_to_gate(sections, "overrides").items():
            raw[name].update(updates)
        return parse_config(raw, source="overrides")


def _format_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<root>"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{source}: {loc}: {msg}{more}"


def _renamed_keys(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """``raw`` with each deprecated key of :data:`RENAMED_KEYS` moved to its new name, with one
    warning per key (so an old run's config.toml still loads); both names set is an error."""
    out = dict(raw)
    for (section, old), new in RENAMED_KEYS.items():
        values = out.get(section)
        if not isinstance(values, dict) or old not in values:
            continue
        if new in values:
            raise ConfigError(
                f"{source}: {section}.{old}: deprecated name of {section}.{new}; set only {new}"
            )
        log.warning("%s: [%s] %s is deprecated; read as [%s] %s", source, section, old, section, new)
        out[section] = {new if key == old else key: value for key, value in values.items()}
    return out


def migrate_deprecated(raw: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """``raw`` with the keys of older config files read as the keys that replaced them, one warning
    each naming ``source`` (every run's config.toml records the config it ran with, so old keys stay
    readable):

    - ``[backtest] dsr_threshold = d`` and ``[nightly] dsr_threshold = d`` (a deflated Sharpe ratio the
      selected strategy had to reach) -> ``significance_level = 1 - d`` in the same section (the level of
      the out-of-sample test that replaced that DSR); both keys set is an error, as for
      :data:`RENAMED_KEYS`;
    - ``[nightly] first_promotion`` (what a first challenger needed with no champion yet) is gone: a
      first challenger passes the same test as any other. ``"always"`` (any first challenger took
      charge) and ``"dsr"`` are read as that rule with a warning; ``"significant"``, which was that
      rule already, is dropped without one;
    - ``[env] sec_fee_rate``, ``taf_per_share``, ``taf_max`` (one fee rate for all dates) -> the
      one-row schedules ``sec_fee_schedule = [["1970-01-01", rate]]`` and ``taf_schedule =
      [["1970-01-01", per_share, max]]`` (a row holds from its date on: the same rate for every date,
      as the old keys charged; :func:`_constant_fees`).
    """
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for name in ("backtest", "nightly"):
        section = out.get(name)
        if not isinstance(section, dict) or "dsr_threshold" not in section:
            continue
        old = section.pop("dsr_threshold")
        if "significance_level" in section:
            raise ConfigError(
                f"{source}: {name}.dsr_threshold: deprecated, replaced by {name}.significance_level; set "
                "only significance_level"
            )
        if isinstance(old, int | float) and not isinstance(old, bool) and 0 < old < 1:
            section["significance_level"] = round(1.0 - float(old), 12)
            log.warning(
                "%s: [%s] dsr_threshold = %g is deprecated: read as significance_level = %g",
                source,
                name,
                old,
                section["significance_level"],
            )
        else:
            log.warning("%s: [%s] dsr_threshold = %r is deprecated and ignored", source, name, old)
    _constant_fees(out, source)
    nightly = out.get("nightly")
    if isinstance(nightly, dict) and "first_promotion" in nightly:
        old = nightly.pop("first_promotion")
        if old != "significant":
            log.warning(
                "%s: [nightly] first_promotion = %r is deprecated and removed: a first challenger is promoted only when "
                "it passes the promotion test, like any other",
                source,
                old,
            )
    return out


#: The fee keys of older config files, each one rate for all dates, and the schedule each became.
_CONSTANT_FEE_KEYS = {
    "sec_fee_rate": "sec_fee_schedule",
    "taf_per_share": "taf_schedule",
    "taf_max": "taf_schedule",
}


def _constant_fees(raw: dict[str, Any], source: str) -> None:
    """``[env] sec_fee_rate`` / ``taf_per_share`` / ``taf_max`` of ``raw`` (in place) read as one-row
    schedules from 1970-01-01, with a warning; a missing TAF figure takes its old default."""
    env = raw.get("env")
    if not isinstance(env, dict) or not any(key in env for key in _CONSTANT_FEE_KEYS):
        return
    for old, new in _CONSTANT_FEE_KEYS.items():
        if old in env and new in env:
            raise ConfigError(f"{source}: env.{old}: deprecated, replaced by env.{new}; set only {new}")
    since = "1970-01-01"
    if "sec_fee_rate" in env:
        env["sec_fee_schedule"] = [[since, env.pop("sec_fee_rate")]]
    if "taf_per_share" in env or "taf_max" in env:
        env["taf_schedule"] = [[since, env.pop("taf_per_share", 0.000166), env.pop("taf_max", 8.30)]]
    log.warning(
        "%s: [env] sec_fee_rate / taf_per_share / taf_max are deprecated: read as one-row sec_fee_schedule / "
        "taf_schedule from %s (the same rate on every date)",
        source,
        since,
    )


def parse_config(raw: dict[str, Any], *, source: str = "config") -> Config:
    """Validate a dict into a Config; errors name the key. Keys of older files are read under their
    new names (:data:`RENAMED_KEYS`) or values (:func:`migrate_deprecated`)."""
    raw = migrate_deprecated(_renamed_keys(raw, source), source)
    try:
        return Config.model_validate(raw, context={"source": source})
    except ValidationError as err:
        raise ConfigError(_format_error(err, source)) from None


#: Keys added with a default that changes what a run does, and the value a run written before them
#: ran with: a run's own config.toml that lacks one (a resume, :func:`load_run_config`) keeps its
#: behaviour; a config file a user writes gets the default.
ADDED_KEYS: dict[tuple[str, str], Any] = {
    ("agent", "start_blend"): False,  # the linear start's blend (agents.linear_start.start_path)
    ("agent", "start_screen_draws"): 0,  # its bagged screen (agents.linear_start.screen_weights)
    ("agent", "start_single_share"): 0.5,  # the blend's weight on its single-feature side
    ("agent", "start_products"): False,  # the nonlinear start's pair candidate
    ("agent", "start_crossfit"): False,  # its networks judged at the epochs the other folds choose
    ("agent", "refit_alpha"): False,  # the refit judges a fine-tuned champion by its alpha
}


def _read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Read a TOML config (None: all defaults)."""
    if path is None:
        return Config()
    return parse_config(_read_toml(path), source=str(path))


def load_run_config(path: str | os.PathLike[str]) -> Config:
    """A run's own ``config.toml`` (written with every key when the run started), a key it predates
    read at the value the run ran with (:data:`ADDED_KEYS`)."""
    raw = _read_toml(path)
    for (section, key), value in ADDED_KEYS.items():
        keys = raw.get(section)
        if isinstance(keys, dict) and key not in keys:
            raw[section] = {**keys, key: value}
    return parse_config(raw, source=str(path))


def config_to_toml(config: Config) -> str:
    """The config as TOML; None is left out, or written as ``"none"`` where the default is not None."""
    raw = config.model_dump(exclude_none=True)
    for name in Config.model_fields:
        section = getattr(config, name)
        for key in none_by_marker(type(section)):
            if getattr(section, key) is None:
                raw[name][key] = NONE_MARKER
    return tomli_w.dumps(raw)


def write_config(config: Config, path: str | os.PathLike[str]) -> Path:
    """Write the resolved config atomically (temp file + rename)."""
    path = Path(path)
    atomic_write_bytes(path, config_to_toml(config).encode("utf-8"))
    return path


# --- the one mapping from the TOML sections to the learner / env / tournament dataclasses -------------
_Args = TypeVar("_Args")


def _built(args_type: type[_Args], section: Section, **workflow: Any) -> _Args:
    """The dataclass ``args_type`` from the section that declares its fields (each field of the
    dataclass is the section's field of the same name, ``setting(args_type, name)``, except the
    ``workflow`` ones, :data:`INTERNAL_FIELDS`)."""
    names = [f.name for f in dataclasses.fields(args_type) if f.name not in workflow]  # type: ignore[arg-type]
    return args_type(
        **{name: getattr(section, name) for name in names if name in type(section).model_fields}, **workflow
    )


def to_env_params(env_config: EnvConfig) -> EnvParams:
    """``envs.params.EnvParams`` from the ``[env]`` section (``num_envs`` is not a param)."""
    return _built(EnvParams, env_config)


def to_learner_args(config: Config) -> PPOArgs | SACArgs | DirectArgs:
    """``PPOArgs``, ``SACArgs`` or ``DirectArgs`` from the ``[agent]`` section."""
    args_type = {"ppo": PPOArgs, "sac": SACArgs, "direct": DirectArgs}[config.agent.algo]
    return _built(args_type, config.agent)


def to_tournament_args(config: Config) -> TournamentArgs:
    """``TournamentArgs`` from the ``[tournament]`` section (the learner from ``agent.algo``)."""
    return _built(TournamentArgs, config.tournament, algo=config.agent.algo)
