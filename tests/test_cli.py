"""The CLI shell: every command has --help, errors are one line with a non-zero exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.cli import main

COMMANDS = ["demo", "data", "train", "backtest", "dashboard", "export", "paper", "retrain", "schedule"]


def test_top_level_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name, capsys):
    assert main([name, "--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert "No such command" in err
    assert "Traceback" not in err


def test_console_script_exit_code_and_one_line_error(tmp_path):
    # A config error from a real subprocess: one line on stderr, exit 2, no traceback.
    bad = tmp_path / "bad.toml"
    bad.write_text("[env]\nnot_a_key = 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "--home", str(tmp_path), "train", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "env.not_a_key" in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "podracer" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["train", "--help"], ["demo", "--help"], ["status", "--help"], ["schedule", "print", "--help"]]
)
def test_help_texts_keep_their_bracketed_defaults(argv, capsys):
    """Rich markup would swallow ``[default: ...]`` in an option's help (typer's rich mode): the
    command modules escape it, so the user reads the default."""
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0
    assert "[default:" in out
    assert " ." not in out.replace("...", "")


def _all_commands(group, path=()):
    import click

    for name, cmd in getattr(group, "commands", {}).items():
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _all_commands(cmd, (*path, name))


def test_no_help_text_is_eaten_by_rich_markup():
    """Every option's help of every command reads whole in typer's rich mode: a bare ``[word...]``
    is rich markup and vanishes from ``--help``, so bracketed notes are escaped as ``\\[``."""
    import typer.main
    from rich.text import Text

    from app.cli import cli

    root = typer.main.get_command(cli)
    eaten = []
    for path, cmd in [((), root), *_all_commands(root)]:
        for param in cmd.params:
            text = getattr(param, "help", None) or ""
            if Text.from_markup(text).plain != text.replace("\\[", "["):
                eaten.append(f"{' '.join(path) or 'podracer'} {param.opts[0]}: {text}")
    assert not eaten, "\n".join(eaten)
