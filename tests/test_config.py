"""Typed config: defaults, TOML round trip, and errors that name the key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agents.args import DirectArgs
from app.config import Config, GateConfig, config_to_toml, load_config, parse_config, write_config
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
    assert config.backtest.significance_level == 0.05 and config.gate.level == 0.1
    assert "first_promotion" not in type(config.nightly).model_fields
    warned = [r.getMessage() for r in caplog.records]
    # backtest's and nightly's dsr_threshold, first_promotion, and nightly's level moved to [gate].
    assert len(warned) == 4 and all(str(old) in w and "deprecated" in w for w in warned)
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
    old.write_text(f'[nightly]\nfirst_promotion = "{value}"\nwarm_start_pods = 2\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="app.config"):
        config = load_config(old)
    assert config.nightly == Config().nightly.model_copy(update={"warm_start_pods": 2})
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
    assert config.backtest.significance_level == 0.01 and config.gate.level == 0.2
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3 and all("significance is deprecated" in w for w in warned[:2])
    assert "[nightly] significance_level -> level" in warned[2]
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


OLD_GATE_FILE = """\
[nightly]
fitness = "return"
margin = 0.3
significance_level = 0.02
shadow_book = false
warm_start_pods = 2

[walkforward]
gate = "nightly"
before_champion = "cash"
step_sessions = 5

[paper]
before_champion = "cash"
"""


def test_an_old_file_s_promotion_keys_move_to_gate_with_one_warning(tmp_path, caplog):
    """The promotion rule's keys that lived in [nightly], [walkforward] and [paper] are read under
    [gate] (shadow_book false and gate "nightly" as rule "window"), with one warning line naming them;
    the written config holds them under [gate] only, and reads back the same."""
    old = tmp_path / "config.toml"
    old.write_text(OLD_GATE_FILE, encoding="utf-8")
    with caplog.at_level("WARNING", logger="app.config"):
        config = load_config(old)
    assert config.gate == GateConfig(
        rule="window", level=0.02, margin=0.3, fitness="return", before_champion="cash"
    )
    assert (config.nightly.warm_start_pods, config.walkforward.step_sessions) == (2, 5)
    (warned,) = [r.getMessage() for r in caplog.records]
    assert warned.startswith(f"{old}: deprecated keys read under [gate]: ") and "\n" not in warned
    for moved in (
        "[nightly] shadow_book -> rule",
        "[walkforward] gate -> rule",
        "[nightly] margin -> margin",
        "[nightly] significance_level -> level",
        "[paper] before_champion -> before_champion",
    ):
        assert moved in warned
    written = config_to_toml(config)
    assert "shadow_book" not in written and "[gate]" in written
    again = tmp_path / "again.toml"
    again.write_text(written, encoding="utf-8")
    assert load_config(again) == config


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ({"nightly": {"shadow_book": True}}, "book"),
        ({"walkforward": {"gate": "always"}}, "always"),
        # A written config.toml holds every key: one at its old default yields to the other.
        ({"nightly": {"shadow_book": True}, "walkforward": {"gate": "always"}}, "always"),
        ({"nightly": {"shadow_book": False}, "walkforward": {"gate": "book"}}, "window"),
        ({"nightly": {"shadow_book": False}, "gate": {"rule": "window"}}, "window"),
    ],
)
def test_the_old_rule_keys_read_as_one_rule(raw, rule):
    assert parse_config(raw).gate.rule == rule


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"nightly": {"shadow_book": False}, "gate": {"rule": "book"}},
            'config: [nightly] shadow_book = false conflicts with [gate] rule = "book"; set only [gate] rule',
        ),
        (
            {"nightly": {"margin": 0.2}, "gate": {"margin": 0.3}},
            "config: [nightly] margin = 0.2 conflicts with [gate] margin = 0.3; set only [gate] margin",
        ),
        (
            {"nightly": {"shadow_book": False}, "walkforward": {"gate": "always"}},
            'config: [nightly] shadow_book = false and [walkforward] gate = "always" both move to [gate] '
            "rule and disagree; set only [gate] rule",
        ),
        (
            {
                "walkforward": {"before_champion": "cash"},
                "paper": {"before_champion": "cash"},
                "gate": {"before_champion": "benchmark"},
            },
            'config: [walkforward] before_champion = "cash" conflicts with [gate] before_champion = '
            '"benchmark"; set only [gate] before_champion',
        ),
    ],
)
def test_an_old_key_that_disagrees_with_gate_is_a_one_line_error(raw, message):
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert str(info.value) == message


def test_with_updates_reads_the_old_keys_as_a_file_does():
    """Overrides in the old keys (``nightly={"shadow_book": False}``) land in [gate] as a file's do;
    an old key and the [gate] key it moved to, set differently in one call, are refused."""
    config = Config().with_updates(nightly={"shadow_book": False, "margin": 0.2, "export": False})
    assert (config.gate.rule, config.gate.margin, config.nightly.export) == ("window", 0.2, False)
    assert config.with_updates(gate={"rule": "book"}).gate.rule == "book"
    assert config.with_updates(walkforward={"gate": "always"}).gate.rule == "always"
    with pytest.raises(ConfigError, match="overrides: \\[nightly\\] shadow_book = true conflicts"):
        config.with_updates(nightly={"shadow_book": True}, gate={"rule": "window"})
    with pytest.raises(ConfigError, match="overrides: gate: .*max_sessions must be >= min_sessions"):
        Config().with_updates(gate={"min_sessions": 30, "max_sessions": 20})


def test_a_runs_own_config_keeps_what_it_ran_with_for_keys_it_predates(tmp_path):
    """A run's config.toml holds every key of its day: one written before ``[agent] start_blend``
    existed ran without the blend and resumes without it; a user's config file gets the default."""
    from app.config import ADDED_KEYS, config_to_toml, load_config, load_run_config

    assert ADDED_KEYS[("agent", "start_blend")] is False
    full = config_to_toml(Config())
    old = tmp_path / "old.toml"
    old.write_text("\n".join(line for line in full.splitlines() if not line.startswith("start_blend")))
    assert load_run_config(old).agent.start_blend is False
    assert load_config(old).agent.start_blend is True
    new = tmp_path / "new.toml"
    new.write_text(full)
    assert load_run_config(new).agent.start_blend is True
    # the blend's bagged screen, added later: a run written before it resumes with the plain screen
    assert ADDED_KEYS[("agent", "start_screen_draws")] == 0
    older = tmp_path / "older.toml"
    older.write_text(
        "\n".join(line for line in full.splitlines() if not line.startswith("start_screen_draws"))
    )
    assert load_run_config(older).agent.start_screen_draws == 0
    assert load_run_config(older).agent.start_blend is True
    assert load_config(older).agent.start_screen_draws == 64
    assert load_run_config(new).agent.start_screen_draws == 64
    # the blend's single-feature share, whose default moved from the half to the screened model alone
    assert ADDED_KEYS[("agent", "start_single_share")] == 0.5
    halved = tmp_path / "halved.toml"
    halved.write_text(
        "\n".join(line for line in full.splitlines() if not line.startswith("start_single_share"))
    )
    assert load_run_config(halved).agent.start_single_share == 0.5
    assert load_config(halved).agent.start_single_share == 1.0
    assert load_run_config(new).agent.start_single_share == 1.0
    # the nonlinear start's pair candidate and cross-fitted judgement, and the refit's alpha judge, off
    # in the runs written before them
    for key in ("start_products", "start_crossfit", "refit_alpha"):
        assert ADDED_KEYS[("agent", key)] is False
        before = tmp_path / f"before_{key}.toml"
        before.write_text("\n".join(line for line in full.splitlines() if not line.startswith(key)))
        assert getattr(load_run_config(before).agent, key) is False
        assert getattr(load_config(before).agent, key) is getattr(DirectArgs(), key)
        assert getattr(load_run_config(new).agent, key) is getattr(DirectArgs(), key)
