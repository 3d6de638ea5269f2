"""The command line as a user meets it: help, clear errors, exit codes."""

import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


def test_help_names_every_command():
    done = agent("--help")
    assert done.returncode == 0
    for command in ("serve", "simulate", "portfolio", "users", "dial", "bench"):
        assert command in done.stdout
    simulate = agent("simulate", "--help")
    assert "wrong_number" in simulate.stdout and "--script FILE" in simulate.stdout


def test_portfolio_import_reports_rows(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}"}
    done = agent("portfolio", "import", str(DATA / "portfolio.csv"), env=env)
    assert done.returncode == 0, done.stderr
    assert "0 rejected" in done.stdout
    again = agent("portfolio", "import", str(DATA / "portfolio.csv"), env=env)
    assert " 0 imported" in again.stdout and "0 rejected" in again.stdout


def test_portfolio_import_of_a_bad_file_says_why(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("consumer_ref,name\nx,y\n")
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}"}
    done = agent("portfolio", "import", str(bad), env=env)
    assert done.returncode == 2
    assert "lacks the required column(s)" in done.stderr
    missing = agent("portfolio", "import", str(tmp_path / "nope.csv"), env=env)
    assert missing.returncode == 2 and "cannot import" in missing.stderr


def test_simulate_with_a_bad_script_says_why(tmp_path):
    script = tmp_path / "case.yaml"
    script.write_text("caller: hello\n")
    done = agent("simulate", "--script", str(script))
    assert done.returncode == 2
    assert "'caller' must be a list" in done.stderr


def test_a_bad_setting_is_named(tmp_path):
    done = agent("simulate", env={"VAD": "loud"})
    assert done.returncode == 2
    assert "VAD must be one of" in done.stderr
