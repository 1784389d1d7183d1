"""Typed config: defaults, TOML round trip, and errors that name the key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import Config, config_to_toml, load_config, parse_config, write_config
from data.errors import ConfigError


def test_defaults_are_valid_and_frozen():
    cfg = Config()
    assert cfg.env.cost_rate == 0.002
    assert cfg.env.initial_cash == 1e6
    with pytest.raises(ValidationError):
        cfg.env.cost_rate = 0.0  # type: ignore[misc]


def test_round_trip_through_toml(tmp_path):
    cfg = Config().with_updates(agent={"seed": 7}, data={"signal": 0.5})
    path = write_config(cfg, tmp_path / "run" / "config.toml")
    again = load_config(path)
    assert again == cfg
    assert again.agent.seed == 7 and again.data.signal == 0.5
    assert "seed = 7" in path.read_text()


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[env]\ncost_rat = 0.001\n", "env.cost_rat: unknown key"),
        ("[env]\ncost_rate = 'cheap'\n", "env.cost_rate"),
        ("[agent]\nalgo = 'dqn'\n", "agent.algo"),
        ("[bogus]\nx = 1\n", "bogus: unknown key"),
        ("[data]\ntrain_frac = 0.9\nvalid_frac = 0.2\n", "train_frac + valid_frac"),
        ("[env\n", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path, toml, needle):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_parse_partial_sections_take_defaults():
    cfg = parse_config({"env": {"decision_interval": 5}})
    assert cfg.env.decision_interval == 5
    assert cfg.agent == Config().agent
    assert "decision_interval = 5" in config_to_toml(cfg)


def test_round_trip_keeps_a_budget_turned_off(tmp_path):
    # TOML has no null: a minutes-only budget must not come back with the default step budget
    # (a --resume reads the run's config.toml).
    cfg = Config().with_updates(tournament={"budget_minutes": 5.0, "budget_steps": None})
    again = load_config(write_config(cfg, tmp_path / "config.toml"))
    assert again == cfg
    assert again.tournament.budget_steps is None and again.tournament.budget_minutes == 5.0
    assert (
        parse_config({"tournament": {"budget_steps": "none", "budget_minutes": 1.0}}).tournament.budget_steps
        is None
    )
    with pytest.raises(ConfigError, match="tournament.budget_minutes"):
        parse_config({"tournament": {"budget_minutes": "none"}})  # only where the default is not None


def test_old_env_compile_key_loads_as_fast_step_with_one_warning(tmp_path, caplog):
    # Run folders written before the rename hold [env] compile: --resume and backtests still load them.
    path = tmp_path / "config.toml"
    path.write_text('[env]\ncompile = "off"\nnum_envs = 8\n[agent]\ncompile = "on"\n')
    with caplog.at_level("WARNING", logger="app.config"):
        cfg = load_config(path)
    assert cfg.env.fast_step == "off" and cfg.env.num_envs == 8
    assert cfg.agent.compile == "on"  # [agent] compile is another setting, not renamed
    warnings = [r.getMessage() for r in caplog.records if r.name == "app.config"]
    assert len(warnings) == 1 and "[env] compile is deprecated" in warnings[0] and "fast_step" in warnings[0]
    written = config_to_toml(cfg)
    assert 'fast_step = "off"' in written and load_config(write_config(cfg, tmp_path / "again.toml")) == cfg
    with pytest.raises(ConfigError, match="env.compile: deprecated name of env.fast_step"):
        parse_config({"env": {"compile": "off", "fast_step": "on"}})


def test_old_significance_keys_still_load_with_a_warning(tmp_path, caplog):
    """Every run's config.toml records the config it ran with: the DSR thresholds it used to hold are
    read as the out-of-sample test's level, and the removed first_promotion as the one promotion rule."""
    old = tmp_path / "config.toml"
    old.write_text(
        '[backtest]\ndsr_threshold = 0.95\n[nightly]\ndsr_threshold = 0.9\nfirst_promotion = "dsr"\n',
        encoding="utf-8",
    )
    with caplog.at_level("WARNING", logger="app.config"):
        config = load_config(old)
    assert config.backtest.significance_level == 0.05 and config.nightly.significance_level == 0.1
    assert "first_promotion" not in type(config.nightly).model_fields
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3 and all(str(old) in w and "deprecated" in w for w in warned)
    # Both keys set is an error (as for a renamed key); the written config has only the new keys.
    with pytest.raises(ConfigError, match="backtest.dsr_threshold: deprecated, replaced by"):
        parse_config({"backtest": {"dsr_threshold": 0.5, "significance_level": 0.01}})
    written = config_to_toml(config)
    assert "dsr_threshold" not in written and "significance_level = 0.05" in written


@pytest.mark.parametrize("value", ["always", "significant"])
def test_first_promotion_is_gone_and_an_old_file_that_sets_it_still_loads(tmp_path, caplog, value):
    """``first_promotion = "always"`` (any first challenger took charge) loads with one line saying the
    first challenger now passes the promotion test like any other; "significant", which was that rule,
    loads without a word; neither is written back."""
    old = tmp_path / "config.toml"
    old.write_text(f'[nightly]\nfirst_promotion = "{value}"\nmargin = 0.2\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="app.config"):
        config = load_config(old)
    assert config.nightly.margin == 0.2 and config.nightly == Config().nightly.model_copy(
        update={"margin": 0.2}
    )
    warned = [r.getMessage() for r in caplog.records]
    if value == "always":
        assert len(warned) == 1 and "\n" not in warned[0]
        assert f"{old}: [nightly] first_promotion = 'always' is deprecated and removed" in warned[0]
        assert "passes the promotion test" in warned[0]
    else:
        assert warned == []
    assert "first_promotion" not in config_to_toml(config)
    with pytest.raises(ConfigError, match="backtest.significance_level"):
        parse_config({"backtest": {"significance_level": 1.5}})


def test_the_level_under_its_old_name_still_loads(tmp_path, caplog):
    """``significance`` was the level's key before it was ``significance_level`` (the name that says it
    is the level, not the test): a config.toml of that time loads, with a warning per key."""
    old = tmp_path / "config.toml"
    old.write_text("[backtest]\nsignificance = 0.01\n[nightly]\nsignificance = 0.2\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="app.config"):
        config = load_config(old)
    assert config.backtest.significance_level == 0.01 and config.nightly.significance_level == 0.2
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("significance is deprecated" in w for w in warned)
    assert "significance_level = 0.01" in config_to_toml(config)
    with pytest.raises(
        ConfigError, match="backtest.significance: deprecated name of backtest.significance_level"
    ):
        parse_config({"backtest": {"significance": 0.01, "significance_level": 0.02}})


def test_the_config_and_its_settings_load_without_torch(tmp_path):
    """Reading a config (and so every setting's declaration and description) loads no torch."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "c.toml").write_text("[tournament]\npods = 3\n[agent]\nalgo = 'sac'\n")
    code = (
        "import sys; from app.config import load_config, to_learner_args, to_tournament_args; "
        "c = load_config(sys.argv[1]); print(to_tournament_args(c).pods, type(to_learner_args(c)).__name__, "
        "[m for m in ('torch', 'agents.ppo', 'agents.sac') if m in sys.modules])"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "c.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip().splitlines()[-1] == "3 SACArgs []", out.stdout + out.stderr
