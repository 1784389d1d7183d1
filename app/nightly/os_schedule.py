"""The nightly schedule as text for the OS schedulers: a crontab block or a systemd timer.

Both are generated from the parsed expression (``app.nightly.cron``):

- :func:`crontab_text`: a crontab block (``CRON_TZ=`` line + the job line);
- :func:`systemd_units`: a ``.service`` + ``.timer`` pair whose ``OnCalendar=`` carries the time zone
  (:func:`on_calendar`); :func:`systemd_text` prints units with install instructions.

Beside the retrain, the paper loop (``podracer paper --champion``), a long-running service:
:func:`paper_unit` (systemd: ``Restart=on-failure``) and :func:`paper_crontab_text` (cron has no
supervisor: a watchdog line every minute that starts the loop unless it runs, under ``flock -n``).
Both read the Alpaca paper keys from :data:`KEYS_FILE`, never from the unit or the crontab.

Problems reach a person (``app.alerts``): a watchdog runs ``podracer status --notify`` every
:data:`WATCH_MINUTES` minutes (:func:`watch_units`, :func:`watch_crontab_text`), which sends each new
problem and each clear to the ``[alerts]`` hook; the systemd units add ``OnFailure=`` to
``podracer-alert@.service``, which runs ``podracer status --unit-failed <unit>`` (the same hook, at
once). The retrain's service stops a run at ``TimeoutStartSec=``: the config's ``[nightly]
max_minutes`` (which the run enforces itself first) plus :data:`TIMEOUT_SLACK_MINUTES`.

Commands use absolute paths only (:func:`retrain_command`): OS schedulers start in another directory.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from app.nightly.cron import DEFAULT_TZ, parse_cron, zone

UNIT_NAME = "podracer-retrain"
PAPER_UNIT_NAME = "podracer-paper"
WATCH_UNIT_NAME = "podracer-watch"
ALERT_UNIT_NAME = "podracer-alert"  # a template: podracer-alert@<failed unit>.service
WATCH_MINUTES = 5  # how often the watchdog runs `podracer status --notify`
# The run stops itself at max_minutes; systemd kills it only if that clean stop hangs.
TIMEOUT_SLACK_MINUTES = 10
# APCA_API_KEY_ID=... and APCA_API_SECRET_KEY=..., one per line (chmod 600): systemd's EnvironmentFile
# and a shell's `.` both read this form, so the service and the crontab share it.
KEYS_FILE = ".config/podracer/alpaca.env"  # under the user's home directory
_SYSTEMD_DAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")


def _systemd_numbers(values: Sequence[int], low: int, high: int) -> str:
    """A systemd calendar component: ``*``, ``a/step`` for a progression up to the max, else a list."""
    if len(values) == high - low + 1:
        return "*"
    if len(values) >= 3:
        step = values[1] - values[0]
        regular = all(b - a == step for a, b in zip(values, values[1:], strict=False))
        if regular and values[-1] + step > high:
            return f"{values[0]:02d}/{step}"
    return ",".join(f"{v:02d}" for v in values)


def _systemd_weekdays(days: Sequence[int]) -> str:
    # Monday-first runs, so Mon..Fri stays one range; Sunday (0) sorts last.
    order = sorted(days, key=lambda d: (d - 1) % 7)
    runs: list[list[int]] = []
    for d in order:
        if runs and (runs[-1][-1] % 7) + 1 == d:
            runs[-1].append(d)
        else:
            runs.append([d])
    parts = [
        f"{_SYSTEMD_DAYS[r[0]]}..{_SYSTEMD_DAYS[r[-1]]}"
        if len(r) >= 3
        else ",".join(_SYSTEMD_DAYS[x] for x in r)
        for r in runs
    ]
    return ",".join(parts)


def on_calendar(expr: str, tz: str = DEFAULT_TZ) -> str:
    """The systemd ``OnCalendar=`` value equivalent to the cron expression, time zone included."""
    spec = parse_cron(expr)
    zone(tz)
    weekday = "" if spec.any_weekday else _systemd_weekdays(spec.weekdays) + " "
    month = _systemd_numbers(spec.months, 1, 12)
    day = _systemd_numbers(spec.days, 1, 31)
    hour = _systemd_numbers(spec.hours, 0, 23)
    minute = _systemd_numbers(spec.minutes, 0, 59)
    return f"{weekday}*-{month}-{day} {hour}:{minute}:00 {tz}"


def podracer_executable() -> list[str]:
    """An absolute command that runs this podracer's CLI (the console script next to the interpreter)."""
    script = Path(sys.executable).parent / "podracer"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("podracer")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "app.cli"]


def retrain_command(home: str | os.PathLike[str], config: str | os.PathLike[str] | None) -> list[str]:
    """The argv of one retrain run, absolute paths only (OS schedulers start in another directory)."""
    argv = [*podracer_executable(), "--home", str(Path(home).resolve()), "retrain"]
    if config is not None:
        argv += ["--config", str(Path(config).resolve())]
    return argv


def status_command(
    home: str | os.PathLike[str], config: str | os.PathLike[str] | None, *extra: str
) -> list[str]:
    """The argv of the watchdog's ``podracer status --notify`` (``extra``: more options)."""
    argv = [*podracer_executable(), "--home", str(Path(home).resolve()), "status", "--notify"]
    if config is not None:
        argv += ["--config", str(Path(config).resolve())]
    return [*argv, *extra]


def paper_command(home: str | os.PathLike[str]) -> list[str]:
    """The argv of the paper loop on the registry's champion, absolute paths only."""
    return [*podracer_executable(), "--home", str(Path(home).resolve()), "paper", "--champion"]


def crontab_text(
    expr: str, *, tz: str = DEFAULT_TZ, home: str | os.PathLike[str], config: str | os.PathLike[str] | None
) -> str:
    """A crontab block (paste into ``crontab -e``): a comment, ``CRON_TZ=``, and the job line."""
    spec = parse_cron(expr)
    zone(tz)
    home_abs = Path(home).resolve()
    log_file = home_abs / "logs" / "retrain.log"
    command = " ".join(shlex.quote(a) for a in retrain_command(home, config))
    # cron starts jobs in $HOME: run from today's directory, as the user's own retrain would; the
    # Alpaca keys (nightly.update = "alpaca") from the keys file when there is one.
    keys = f'"$HOME/{KEYS_FILE}"'
    command = f"if [ -f {keys} ]; then set -a && . {keys} && set +a; fi; cd {shlex.quote(str(Path.cwd()))} && mkdir -p {shlex.quote(str(log_file.parent))} && {command} >> {shlex.quote(str(log_file))} 2>&1"
    # In a crontab line an unescaped % ends the command and feeds the rest to stdin.
    command = command.replace("%", r"\%")
    return (
        "# podracer nightly retrain (minute hour day-of-month month day-of-week)\n"
        f"# times are {tz} wall-clock times. CRON_TZ applies to every later line of the crontab; cronie\n"
        "# honours it, other crons may not: if `man 5 crontab` does not list CRON_TZ, write the times in\n"
        "# the system time zone instead.\n"
        f"CRON_TZ={tz}\n"
        f"{spec.expr} {command}\n"
    )


def watch_crontab_text(home: str | os.PathLike[str], config: str | os.PathLike[str] | None) -> str:
    """The crontab block of the watchdog: ``podracer status --notify`` every few minutes."""
    home_abs = Path(home).resolve()
    log_file = home_abs / "logs" / "alerts.log"
    command = " ".join(shlex.quote(a) for a in status_command(home, config, "--silent"))
    command = (
        f"mkdir -p {shlex.quote(str(log_file.parent))} && {command} >> {shlex.quote(str(log_file))} 2>&1"
    )
    return (
        "# podracer watchdog: every problem `podracer status` finds (a failed or overdue retrain, a stale\n"
        "# or halted paper loop, ...) goes once to the [alerts] hook of the config, and once when it clears.\n"
        f"*/{WATCH_MINUTES} * * * * {command.replace('%', chr(92) + '%')}\n"
    )


def paper_crontab_text(home: str | os.PathLike[str]) -> str:
    """The crontab block of the paper loop: a watchdog line that starts it unless it is running."""
    home_abs = Path(home).resolve()
    log_file = home_abs / "logs" / "paper.log"
    lock = home_abs / "paper" / "cron.lock"
    loop = " ".join(shlex.quote(a) for a in paper_command(home))
    inner = (
        f'set -a && . "$HOME/{KEYS_FILE}" && set +a && cd {shlex.quote(str(Path.cwd()))} && '
        f"exec {loop} >> {shlex.quote(str(log_file))} 2>&1"
    )
    command = (
        f"mkdir -p {shlex.quote(str(log_file.parent))} {shlex.quote(str(lock.parent))} && "
        f"flock -n {shlex.quote(str(lock))} sh -c {shlex.quote(inner)}"
    ).replace("%", r"\%")
    return (
        "# podracer paper loop (podracer paper --champion): a long-running process, and cron has no\n"
        "# supervisor. This watchdog line runs every minute: flock -n starts the loop only when no loop\n"
        "# holds the lock, so a loop that died is back within a minute and a running one is left alone.\n"
        "# What cron cannot do: restart at once, back off from a loop that fails at every start (it is\n"
        "# retried each minute; see the log), or stop it (comment the line out, then kill the loop).\n"
        "# Use the systemd unit (--format systemd) where you can. Cron does not see your shell's\n"
        f"# exports: APCA_API_KEY_ID=... and APCA_API_SECRET_KEY=... go in ~/{KEYS_FILE} (chmod 600).\n"
        f"* * * * * {command}\n"
    )


def _systemd_quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-+=:@," for c in arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_units(
    expr: str,
    *,
    tz: str = DEFAULT_TZ,
    home: str | os.PathLike[str],
    config: str | os.PathLike[str] | None,
    name: str = UNIT_NAME,
    max_minutes: float | None = None,
) -> dict[str, str]:
    """``{"<name>.service": text, "<name>.timer": text}`` for a user or system systemd instance;
    ``max_minutes``: the config's retrain budget (``TimeoutStartSec`` = it plus the slack)."""
    calendar_spec = on_calendar(expr, tz)
    timeout = "infinity" if max_minutes is None else f"{math.ceil(max_minutes + TIMEOUT_SLACK_MINUTES)}min"
    home_abs = Path(home).resolve()
    exec_start = " ".join(_systemd_quote(a) for a in retrain_command(home, config))
    service = (
        "[Unit]\n"
        "Description=podracer nightly retrain (champion vs challenger)\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        f"OnFailure={ALERT_UNIT_NAME}@%n.service\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        # A oneshot's start is the whole run: past its budget plus slack it is stopped (and fails).
        f"TimeoutStartSec={timeout}\n"
        # Relative paths inside the config resolve as they do for the user who printed these units.
        f"WorkingDirectory={_systemd_quote(str(Path.cwd()))}\n"
        f"Environment=PODRACER_HOME={_systemd_quote(str(home_abs))}\n"
        # The Alpaca keys, for nightly.update = "alpaca" ("-": the file is optional here).
        f"EnvironmentFile=-%h/{KEYS_FILE}\n"
        f"ExecStart={exec_start}\n"
        # Exit 75: another retrain holds the lock; not a failure worth an alert.
        "SuccessExitStatus=75\n"
        "Nice=10\n"
    )
    timer = (
        "[Unit]\n"
        f"Description=podracer nightly retrain at {spec_comment(expr, tz)}\n"
        "\n"
        "[Timer]\n"
        f"OnCalendar={calendar_spec}\n"
        # Persistent: a run missed while the machine was off happens at the next boot.
        "Persistent=true\n"
        f"Unit={name}.service\n"
        "\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )
    return {f"{name}.service": service, f"{name}.timer": timer}


def paper_unit(home: str | os.PathLike[str], name: str = PAPER_UNIT_NAME) -> dict[str, str]:
    """``{"<name>.service": text}``: the paper loop as a long-running service restarted on failure."""
    home_abs = Path(home).resolve()
    exec_start = " ".join(_systemd_quote(a) for a in paper_command(home))
    service = (
        "[Unit]\n"
        "Description=podracer paper trading on the registry's champion (Alpaca paper)\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        # A loop failing at every start (bad keys) stops being restarted after 5 tries in 10 minutes.
        "StartLimitIntervalSec=600\n"
        "StartLimitBurst=5\n"
        f"OnFailure={ALERT_UNIT_NAME}@%n.service\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"WorkingDirectory={_systemd_quote(str(Path.cwd()))}\n"
        f"Environment=PODRACER_HOME={_systemd_quote(str(home_abs))}\n"
        # The Alpaca paper keys, never in the unit itself.
        f"EnvironmentFile=%h/{KEYS_FILE}\n"
        f"ExecStart={exec_start}\n"
        "Restart=on-failure\n"
        "RestartSec=30\n"
        # Exit 75: another loop holds <home>/paper/paper.lock; restarting would not help.
        "RestartPreventExitStatus=75\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )
    return {f"{name}.service": service}


def watch_units(home: str | os.PathLike[str], config: str | os.PathLike[str] | None) -> dict[str, str]:
    """The watchdog (``podracer-watch.service`` + ``.timer``: ``podracer status --notify`` every
    :data:`WATCH_MINUTES` minutes) and ``podracer-alert@.service``, which ``OnFailure=`` starts with
    the failed unit's name."""
    home_abs = Path(home).resolve()
    common = (
        "[Service]\n"
        "Type=oneshot\n"
        f"WorkingDirectory={_systemd_quote(str(Path.cwd()))}\n"
        f"Environment=PODRACER_HOME={_systemd_quote(str(home_abs))}\n"
        # status exits 1 while there are problems: that is its answer, not the watchdog failing.
        "SuccessExitStatus=1\n"
    )
    watch = " ".join(_systemd_quote(a) for a in status_command(home, config, "--silent"))
    alert = " ".join(_systemd_quote(a) for a in status_command(home, config, "--silent", "--unit-failed"))
    return {
        f"{WATCH_UNIT_NAME}.service": (
            "[Unit]\nDescription=podracer watchdog: problems to the [alerts] hook\n\n"
            f"{common}ExecStart={watch}\n"
        ),
        f"{WATCH_UNIT_NAME}.timer": (
            f"[Unit]\nDescription=podracer watchdog every {WATCH_MINUTES} minutes\n\n"
            f"[Timer]\nOnCalendar=*:0/{WATCH_MINUTES}\nPersistent=true\nUnit={WATCH_UNIT_NAME}.service\n\n"
            "[Install]\nWantedBy=timers.target\n"
        ),
        f"{ALERT_UNIT_NAME}@.service": (
            f"[Unit]\nDescription=podracer alert: unit %i failed\n\n{common}ExecStart={alert} %i\n"
        ),
    }


def spec_comment(expr: str, tz: str) -> str:
    """``'0 2 * * 1-5' (cron) in <tz>`` with any % doubled for systemd."""
    return f"'{parse_cron(expr).expr}' (cron) in {tz}".replace("%", "%%")


def systemd_text(units: dict[str, str]) -> str:
    """The units as one printable text with install instructions."""
    out = []
    for filename, body in units.items():
        out.append(f"# ---- {filename} ----\n{body}")
    timers = [f for f in units if f.endswith(".timer")]
    # Services a timer starts, and templates (started by OnFailure=), are not enabled themselves.
    services = [
        f
        for f in units
        if f.endswith(".service") and "@" not in f and f.removesuffix(".service") + ".timer" not in units
    ]
    enable = " ".join([*timers, *services])
    lines = [
        "# install (per user): copy the files to ~/.config/systemd/user/, then",
        f"#   systemctl --user daemon-reload && systemctl --user enable --now {enable}",
        "#   loginctl enable-linger $USER   # keep user units running while logged out",
        f"# check: systemctl --user list-timers {' '.join(timers)}",
    ]
    for service in services:
        lines += [
            f"#        systemctl --user status {service}; journalctl --user -u {service} -f",
            f"# keys: APCA_API_KEY_ID=... and APCA_API_SECRET_KEY=... in ~/{KEYS_FILE} (chmod 600)",
        ]
    out.append("\n".join(lines) + "\n")
    return "\n".join(out)
