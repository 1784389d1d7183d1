"""Cron parsing, fire times across DST, crontab / systemd text, and the in-process scheduler."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.nightly.cron import parse_cron
from app.nightly.os_schedule import crontab_text, on_calendar, systemd_units
from app.nightly.schedule import cron_trigger, next_fire_times, run_schedule
from data.errors import ConfigError, PodracerError

NY = ZoneInfo("America/New_York")


def _local(*args: int) -> datetime:
    """A New York wall-clock time as an aware datetime (fold=0: the first occurrence)."""
    return datetime(*args, tzinfo=NY)


# --- parsing ------------------------------------------------------------------------------------------


def test_parse_fields_names_ranges_steps():
    spec = parse_cron("*/15 9-16 * * mon-fri")
    assert spec.minutes == (0, 15, 30, 45)
    assert spec.hours == tuple(range(9, 17))
    assert spec.weekdays == (1, 2, 3, 4, 5) and spec.any_day and not spec.any_weekday
    assert parse_cron("0 2 * * 1-5").weekdays == (1, 2, 3, 4, 5)
    assert parse_cron("0 2 * * 7").weekdays == (0,)  # 7 is Sunday, like 0
    assert parse_cron("0 2 * * sun,SAT").weekdays == (0, 6)
    assert parse_cron("5/20 0 1 jan-mar *").minutes == (5, 25, 45)
    assert parse_cron("5/20 0 1 jan-mar *").months == (1, 2, 3)
    assert parse_cron("@daily") == parse_cron("0 0 * * *").__class__(
        expr="@daily",
        **{
            k: getattr(parse_cron("0 0 * * *"), k) for k in ("minutes", "hours", "days", "months", "weekdays")
        },
    )


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("0 2 * *", "expected 5 fields"),
        ("60 2 * * *", "minute field: 60 is outside 0..59"),
        ("0 24 * * *", "hour field: 24"),
        ("0 2 0 * *", "day-of-month field: 0"),
        ("0 2 * 13 *", "month field: 13"),
        ("0 2 * * 8", "day-of-week field: 8"),
        ("0 2 * * 5-1", "runs backwards"),
        ("*/0 2 * * *", "bad step"),
        ("0 2 * * funday", "not a number or name"),
        ("0 2 1 * 1", "not both"),
        ("0 2 30 2 *", "never run"),
        ("@reboot", "unsupported macro"),
        ("0 2 ,1 * *", "empty list item"),
    ],
)
def test_bad_expressions_are_one_line_config_errors(expr, words):
    with pytest.raises(ConfigError, match=re.escape(words)) as info:
        parse_cron(expr)
    assert "\n" not in str(info.value)


def test_leap_day_is_valid():
    assert parse_cron("0 2 29 2 *").days == (29,)


def test_unknown_time_zone():
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
        cron_trigger("0 2 * * *", "Mars/Olympus")


# --- fire times across DST ----------------------------------------------------------------------------


def test_weekday_range_means_monday_to_friday():
    # APScheduler 3's own from_crontab would read 1-5 as Tuesday..Saturday.
    fires = next_fire_times(cron_trigger("0 2 * * 1-5"), _local(2026, 1, 4), 10)
    assert {f.astimezone(NY).strftime("%a") for f in fires} == {"Mon", "Tue", "Wed", "Thu", "Fri"}
    assert len({f.date() for f in fires}) == 10


@pytest.mark.parametrize(
    ("start", "days", "utc_before", "utc_after"),
    [
        # Spring forward: Sunday 2026-03-08 (EST -5 -> EDT -4).
        ((2026, 3, 4), [(2026, 3, 4), (2026, 3, 5), (2026, 3, 6), (2026, 3, 9), (2026, 3, 10)], 7, 6),
        # Fall back: Sunday 2026-11-01 (EDT -4 -> EST -5).
        (
            (2026, 10, 28),
            [(2026, 10, 28), (2026, 10, 29), (2026, 10, 30), (2026, 11, 2), (2026, 11, 3)],
            6,
            7,
        ),
    ],
)
def test_weekday_2am_stays_2am_local_across_dst(start, days, utc_before, utc_after):
    trigger = cron_trigger("0 2 * * 1-5", "America/New_York")
    fires = next_fire_times(trigger, _local(*start) - timedelta(hours=1), len(days))
    expected = [_local(*d, 2, 0) for d in days]
    assert fires == expected  # the same instants (aware comparison is in UTC)
    assert all(f.astimezone(NY).hour == 2 for f in fires)
    utc_hours = [f.astimezone(UTC).hour for f in fires]
    assert utc_hours[:3] == [utc_before] * 3 and utc_hours[3:] == [utc_after] * 2


def test_repeated_fall_back_time_fires_once():
    fires = next_fire_times(cron_trigger("30 1 * * *"), _local(2026, 10, 31, 0, 0), 3)
    assert [f.astimezone(NY).date().isoformat() for f in fires] == ["2026-10-31", "2026-11-01", "2026-11-02"]
    on_the_day = fires[1].astimezone(UTC)
    assert on_the_day == datetime(2026, 11, 1, 1, 30, tzinfo=NY).astimezone(UTC)  # first occurrence (EDT)
    assert on_the_day.hour == 5


def test_every_half_hour_skips_only_the_repeated_wall_times():
    fires = next_fire_times(cron_trigger("*/30 * * * *"), datetime(2026, 11, 1, 4, 0, tzinfo=UTC), 6)
    walls = [f.astimezone(NY).strftime("%H:%M") for f in fires]
    assert walls == ["00:30", "01:00", "01:30", "02:00", "02:30", "03:00"]
    assert len(set(walls)) == len(walls)


def test_nonexistent_spring_time_runs_at_the_shifted_time():
    fires = next_fire_times(cron_trigger("30 2 * * *"), _local(2026, 3, 7, 3, 0), 2)
    # 02:30 does not exist on 2026-03-08 in New York: it runs at 03:30 EDT that day (as cron does).
    assert fires[0].astimezone(UTC) == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    assert fires[0].astimezone(NY).strftime("%Y-%m-%d %H:%M") == "2026-03-08 03:30"
    assert fires[1].astimezone(NY).strftime("%Y-%m-%d %H:%M") == "2026-03-09 02:30"


# --- systemd ------------------------------------------------------------------------------------------


def test_on_calendar_text():
    assert on_calendar("0 2 * * 1-5") == "Mon..Fri *-*-* 02:00:00 America/New_York"
    assert on_calendar("*/15 9-10 1 * *", "UTC") == "*-*-01 09,10:00/15:00 UTC"
    assert on_calendar("5 4 * * sun,sat", "Europe/Paris") == "Sat,Sun *-*-* 04:05:00 Europe/Paris"
    assert on_calendar("0 2 * * 0-6") == "*-*-* 02:00:00 America/New_York"


_SYSTEMD_CASES = [
    ("0 2 * * 1-5", "2026-03-05 00:00:00 UTC", 6),
    ("0 2 * * 1-5", "2026-10-29 00:00:00 UTC", 6),
    ("30 1 * * *", "2026-10-30 00:00:00 UTC", 4),
    ("15,45 22 * * 0,6", "2026-03-06 00:00:00 UTC", 6),
    ("0 3 1,15 * *", "2026-02-20 00:00:00 UTC", 4),
    ("*/20 9-10 * * mon-fri", "2026-03-06 13:00:00 UTC", 8),
]


def _parse_elapses(text: str) -> list[datetime]:
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d+): \w{3} (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", text)
    return [datetime.strptime(s, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) for s in stamps]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize(("expr", "base", "count"), _SYSTEMD_CASES)
def test_systemd_agrees_with_the_in_process_trigger(expr, base, count):
    """systemd's own calendar parser computes the same fire times as our APScheduler trigger."""
    spec = on_calendar(expr)
    out = subprocess.run(
        ["systemd-analyze", "calendar", f"--iterations={count}", f"--base-time={base}", spec],
        capture_output=True,
        text=True,
        timeout=30,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin", "SYSTEMD_COLORS": "0"},
    )
    assert out.returncode == 0, out.stderr
    assert f"Normalized form: {spec}" in out.stdout
    start = datetime.strptime(base, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
    ours = [f.astimezone(UTC) for f in next_fire_times(cron_trigger(expr), start, count)]
    assert _parse_elapses(out.stdout) == ours


_ON_CALENDAR = re.compile(
    r"^(?:(?P<dow>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)(?:\.\.(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun))?"
    r"(?:,(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)(?:\.\.(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun))?)*) )?"
    r"\*-(?P<month>\*|[\d,/]+)-(?P<day>\*|[\d,/]+) (?P<hour>\*|[\d,/]+):(?P<minute>\*|[\d,/]+):00 (?P<tz>\S+)$"
)


def _expand(component: str, low: int, high: int) -> set[int]:
    if component == "*":
        return set(range(low, high + 1))
    values: set[int] = set()
    for item in component.split(","):
        if "/" in item:
            first, step = item.split("/")
            values.update(range(int(first), high + 1, int(step)))
        else:
            values.add(int(item))
    return values


@pytest.mark.parametrize("expr", [case[0] for case in _SYSTEMD_CASES] + ["0 0 1 1 *", "@hourly"])
def test_on_calendar_parses_back_to_the_same_schedule(expr):
    """Without systemd: an independent parse of the OnCalendar grammar gives back the cron sets."""
    match = _ON_CALENDAR.match(on_calendar(expr))
    assert match, on_calendar(expr)
    spec = parse_cron(expr)
    assert _expand(match["minute"], 0, 59) == set(spec.minutes)
    assert _expand(match["hour"], 0, 23) == set(spec.hours)
    assert _expand(match["day"], 1, 31) == set(spec.days)
    assert _expand(match["month"], 1, 12) == set(spec.months)
    names = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    days: set[int] = set(range(7))
    if match["dow"]:
        days = set()
        for part in match["dow"].split(","):
            first, _, last = part.partition("..")
            a, b = names.index(first), names.index(last or first)
            days.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
    assert days == set(spec.weekdays)
    ZoneInfo(match["tz"])


def test_systemd_units_are_valid(tmp_path):
    config = tmp_path / "nightly.toml"
    config.write_text("[gate]\nmargin = 0.2\n")
    units = systemd_units("0 2 * * 1-5", home=tmp_path / "my home", config=config)
    assert set(units) == {"podracer-retrain.service", "podracer-retrain.timer"}
    timer, service = units["podracer-retrain.timer"], units["podracer-retrain.service"]
    assert "OnCalendar=Mon..Fri *-*-* 02:00:00 America/New_York\n" in timer
    assert "Unit=podracer-retrain.service" in timer and "WantedBy=timers.target" in timer
    exec_line = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_line.removeprefix("ExecStart="))  # systemd's quoting is a shell subset here
    assert argv[0].startswith("/") and argv[1:] == [
        "--home",
        str((tmp_path / "my home").resolve()),
        "retrain",
        "--config",
        str(config.resolve()),
    ]
    for name, body in units.items():
        (tmp_path / name).write_text(body)
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed (the OnCalendar grammar is checked above)")
    out = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            str(tmp_path / "podracer-retrain.timer"),
            str(tmp_path / "podracer-retrain.service"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "podracer-retrain" not in out.stderr, out.stderr  # no warnings about our units


# --- crontab ------------------------------------------------------------------------------------------


def test_crontab_text_is_valid(tmp_path):
    config = tmp_path / "100% nightly.toml"  # a % would end a crontab command if not escaped
    config.write_text("")
    text = crontab_text("0 2 * * 1-5", tz="America/New_York", home=tmp_path / "home", config=config)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "CRON_TZ=America/New_York"
    job = lines[1]
    fields = job.split(" ", 5)
    assert parse_cron(" ".join(fields[:5])) == parse_cron("0 2 * * 1-5")
    command = fields[5]
    assert re.search(r"(?<!\\)%", command) is None  # every % escaped
    unescaped = command.replace(r"\%", "%")
    assert str(config.resolve()) in shlex.split(unescaped.split(" >> ")[0].split(" && ")[-1])
    # The command is valid POSIX shell (what cron hands to /bin/sh).
    check = subprocess.run(["sh", "-n", "-c", unescaped], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr


def test_print_commands(home, tmp_path, capsys):
    from app import cli

    assert (
        cli.main(["--home", str(home), "schedule", "print", "--cron", "0 2 * * 1-5", "--format", "systemd"])
        == 0
    )
    out = capsys.readouterr().out
    assert "OnCalendar=Mon..Fri *-*-* 02:00:00 America/New_York" in out and "[Install]" in out
    assert cli.main(["schedule", "print", "--format", "crontab", "--tz", "Europe/London"]) == 0
    assert "CRON_TZ=Europe/London\n0 2 * * 1-5 " in capsys.readouterr().out
    assert cli.main(["schedule", "print", "--cron", "0 2 1 * 1"]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli.main(["schedule", "print", "--format", "launchd"]) == 2
    assert cli.main(["schedule", "print", "--config", str(tmp_path / "missing.toml")]) == 2


# --- the in-process scheduler -------------------------------------------------------------------------


def test_run_schedule_runs_logs_and_survives_a_failure(caplog):
    from apscheduler.triggers.interval import IntervalTrigger

    calls: list[float] = []

    def job():
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise PodracerError("night 2 failed")
        return f"night {len(calls)}"

    caplog.set_level("INFO", logger="app.nightly.schedule")
    started = time.monotonic()
    report = run_schedule(job, IntervalTrigger(seconds=0.2, timezone=UTC), max_runs=3, run_now=True)
    assert report.runs == 3 and report.failures == 1 and len(calls) == 3
    assert report.results[0] == "night 1" and report.results[2] == "night 3"
    assert isinstance(report.results[1], PodracerError)
    assert time.monotonic() - started < 20
    text = caplog.text
    assert "scheduled retrain #1 starting" in text and "#2 failed" in text and "night 2 failed" in text
    assert "#3 done" in text


def test_schedule_run_cli_runs_retrain(home, monkeypatch, capsys):
    from app import cli
    from app.nightly import pipeline as nightly

    seen = []

    def fake_retrain(config, home_dir):
        seen.append((config.gate.margin, home_dir))
        return "ok"

    monkeypatch.setattr(nightly, "run_retrain", fake_retrain)
    config = home / "c.toml"
    config.write_text("[gate]\nmargin = 0.3\n")
    rc = cli.main(
        [
            "schedule",
            "run",
            "--cron",
            "0 2 * * 1-5",
            "--now",
            "--max-runs",
            "1",
            "--config",
            str(config),
            "--home",
            str(home),
        ]
    )
    assert rc == 0
    assert seen == [(0.3, home)]
    err = capsys.readouterr().err
    assert "next:" in err and "after 1 run(s), 0 failed" in err
    assert cli.main(["schedule", "run", "--cron", "bad"]) == 2


def test_an_instant_job_stops_cleanly_every_time():
    # Regression: a job that finishes before APScheduler attaches its callback used to shut the
    # scheduler down from inside its own job-store update (JobLookupError).
    trigger = cron_trigger("0 2 * * 1-5")
    for _ in range(25):
        report = run_schedule(lambda: "ok", trigger, max_runs=1, run_now=True)
        assert (report.runs, report.failures, report.results) == (1, 0, ("ok",))


def test_the_schedule_commands_cron_default_is_the_nightly_default():
    """`podracer schedule` spells its --cron default itself (its module must not load pandas for
    `--help`); it is the one app.nightly.cron defines."""
    from app.commands import schedule as command
    from app.nightly.cron import DEFAULT_CRON

    assert command._DEFAULT_CRON == DEFAULT_CRON


# --- the paper loop beside the retrain ------------------------------------------------------------------


def test_paper_service_unit_restarts_on_failure(tmp_path):
    from app.nightly.os_schedule import KEYS_FILE, paper_unit

    units = paper_unit(tmp_path / "my home")
    service = units["podracer-paper.service"]
    assert "Type=simple" in service and "Restart=on-failure" in service
    assert "RestartPreventExitStatus=75" in service  # another loop holds the home's lock
    assert f"EnvironmentFile=%h/{KEYS_FILE}" in service and "APCA_API_SECRET_KEY=" not in service
    exec_line = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert argv[0].startswith("/") and argv[1:] == [
        "--home",
        str((tmp_path / "my home").resolve()),
        "paper",
        "--champion",
    ]
    (tmp_path / "podracer-paper.service").write_text(service)
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    out = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "podracer-paper.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "podracer-paper" not in out.stderr, out.stderr


def test_paper_crontab_watchdog_line(tmp_path):
    from app.nightly.os_schedule import paper_crontab_text

    text = paper_crontab_text(tmp_path / "100% home")
    (job,) = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert job.startswith("* * * * * ")  # every minute: back within a minute after a crash
    command = job.split(" ", 5)[5]
    assert re.search(r"(?<!\\)%", command) is None  # every % escaped for cron
    unescaped = command.replace(r"\%", "%")
    assert "flock -n " in unescaped and "paper --champion" in unescaped
    check = subprocess.run(["sh", "-n", "-c", unescaped], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    assert "cron has no" in text and "supervisor" in text  # the honest limitation, said where it is pasted


def test_print_shows_the_paper_loop_beside_the_retrain(home, capsys):
    from app import cli

    assert cli.main(["--home", str(home), "schedule", "print", "--format", "systemd"]) == 0
    out = capsys.readouterr().out
    assert "# ---- podracer-retrain.timer ----" in out and "# ---- podracer-paper.service ----" in out
    assert "enable --now podracer-retrain.timer podracer-watch.timer podracer-paper.service" in out
    assert cli.main(["--home", str(home), "schedule", "print", "--format", "crontab"]) == 0
    out = capsys.readouterr().out
    assert " retrain >> " in out and "paper --champion" in out


# --- the schedule record (<home>/schedule.json, read by `podracer status`) ----------------------------


def test_schedule_print_records_what_it_printed(home, tmp_path, capsys):
    from app import cli
    from app.nightly.schedule import read_schedule, schedule_path

    config = tmp_path / "nightly.toml"
    config.write_text("[gate]\nmargin = 0.3\n")
    argv = ["schedule", "print", "--format", "systemd", "--cron", "15 1 * * 2-6", "--tz", "Europe/London"]
    before = datetime.now(UTC).replace(microsecond=0)
    assert cli.main([*argv, "--config", str(config)]) == 0
    assert "OnCalendar=Tue..Sat *-*-* 01:15:00 Europe/London" in capsys.readouterr().out
    record = read_schedule(home)
    assert (record.cron, record.tz, record.format) == ("15 1 * * 2-6", "Europe/London", "systemd")
    assert record.config == str(config.resolve()) and record.source == "schedule print --format systemd"
    assert before <= datetime.fromisoformat(record.written_at) <= datetime.now(UTC)
    assert sorted(p.name for p in home.iterdir()) == [schedule_path(home).name]  # no temp file left
    # what failed to print is not recorded
    assert cli.main(["schedule", "print", "--cron", "0 2 1 * 1"]) == 2
    assert cli.main(["schedule", "print", "--format", "launchd"]) == 2
    assert read_schedule(home) == record


def test_schedule_run_records_the_in_process_schedule(home, monkeypatch, capsys):
    from app import cli
    from app.nightly import pipeline as nightly
    from app.nightly.schedule import read_schedule

    monkeypatch.setattr(nightly, "run_retrain", lambda config, home_dir: "ok")
    rc = cli.main(["schedule", "run", "--cron", "45 23 * * *", "--tz", "UTC", "--now", "--max-runs", "1"])
    assert rc == 0
    record = read_schedule(home)
    assert (record.cron, record.tz, record.format, record.config) == (
        "45 23 * * *",
        "UTC",
        "in-process",
        None,
    )
    assert record.source == "schedule run"
    assert cli.main(["schedule", "run", "--cron", "bad"]) == 2
    assert read_schedule(home) == record  # a schedule that never started is not recorded


def test_a_failed_record_write_leaves_the_old_record_whole(home, monkeypatch, capsys):
    from app import cli
    from app.nightly.schedule import read_schedule, record_schedule, schedule_path
    from data import atomic

    old = record_schedule(home, cron="0 2 * * 1-5", tz="America/New_York", config=None, fmt="crontab")
    text = schedule_path(home).read_text()

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        record_schedule(home, cron="30 3 * * *", tz="UTC", config=None, fmt="systemd")
    assert schedule_path(home).read_text() == text and read_schedule(home) == old
    assert sorted(p.name for p in home.iterdir()) == [schedule_path(home).name]  # the temp file is gone
    # `schedule print` still prints; the record it could not write is a warning
    assert cli.main(["schedule", "print", "--format", "crontab", "--cron", "30 3 * * *"]) == 0
    captured = capsys.readouterr()
    assert "CRON_TZ=America/New_York\n30 3 * * * " in captured.out
    assert "not recorded" in captured.err and "disk full" in captured.err
    assert read_schedule(home) == old
