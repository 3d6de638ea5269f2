"""The command line as a user meets it: help, clear errors, exit codes."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

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
    for command in ("serve", "simulate", "portfolio", "users", "tokens", "dial", "bench"):
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


def test_tokens_help_explains_the_scopes():
    done = agent("tokens", "create", "--help")
    assert done.returncode == 0
    for scope in ("campaigns:write", "campaigns:read", "livekit:dispatch", "metrics:read"):
        assert scope in done.stdout
    assert "POST /api/campaigns" in done.stdout and "cannot be shown again" in done.stdout


def test_a_token_created_at_the_command_line_is_printed_once(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}"}
    created = agent("tokens", "create", "--name", "ci", "--scope", "metrics:read", env=env)
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("agt_") and len(created.stdout.split()) == 1
    assert "will not be shown again" in created.stderr
    listed = agent("tokens", "list", env=env)
    assert "\tci\tmetrics:read\tactive\t" in listed.stdout
    assert created.stdout.strip() not in listed.stdout
    refused = agent("tokens", "create", "--name", "ci", "--scope", "metrics:write", env=env)
    assert refused.returncode == 1 and "unknown scope 'metrics:write'" in refused.stderr


# -- configuration errors: one line naming the variable, exit status 2 --------------------


def closed_port() -> int:
    """A TCP port on loopback where nothing listens (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (
            ("portfolio", "import", str(DATA / "portfolio.csv")),
            {"DATABASE_URL": "postgresql://agent:hunter2@127.0.0.1:{port}/agent"},
            "DATABASE_URL: cannot connect to postgresql+psycopg://agent:***@127.0.0.1:",
        ),
        (
            ("serve",),
            {"DATABASE_URL": "postgresql://agent:hunter2@127.0.0.1:{port}/agent"},
            "DATABASE_URL: cannot connect to",
        ),
        (
            ("serve", "--workers", "2"),
            {"DATABASE_URL": "postgresql://agent:hunter2@127.0.0.1:{port}/agent"},
            "DATABASE_URL: cannot connect to",
        ),
        (
            ("dial", "--campaign", str(DATA / "campaign.csv"), "--trunk", "sip:127.0.0.1:5060"),
            {"DATABASE_URL": "postgresql://agent:hunter2@127.0.0.1:{port}/agent"},
            "DATABASE_URL: cannot connect to",
        ),
        (
            ("users", "list"),
            {"DATABASE_URL": "postgresql://agent:hunter2@db:port/agent"},
            "DATABASE_URL is not a database URL",
        ),
        (("serve",), {"DATABASE_URL": "nope"}, "DATABASE_URL is not a database URL"),
        (("serve",), {"PRICE_PROFILE": "nope"}, "PRICE_PROFILE: price book"),
        (("serve", "--workers", "2"), {"PRICE_PROFILE": "nope"}, "PRICE_PROFILE: price book"),
        (("simulate",), {"PRICE_BOOK": "/nonexistent/prices.toml"}, "PRICE_BOOK: "),
        (("serve",), {"PROMPT_VERSION": "v0"}, "PROMPT_VERSION: unknown prompt version 'v0'"),
        (("users", "list"), {"MAX_CALLS": "0"}, "MAX_CALLS must be a positive integer"),
    ],
)
def test_a_configuration_error_is_one_line_naming_the_variable(tmp_path, args, env, said):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}"} | {
        name: value.format(port=closed_port()) for name, value in env.items()
    }
    done = agent(*args, env=env)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"configuration error: {said}"), line
    assert "hunter2" not in done.stdout + done.stderr


def test_simulate_shows_the_database_without_its_password():
    url = f"postgresql://agent:hunter2@127.0.0.1:{closed_port()}/agent"
    done = agent("simulate", env={"DATABASE_URL": url})
    assert done.returncode == 2
    assert "database postgresql://agent:***@127.0.0.1:" in done.stdout
    assert "hunter2" not in done.stdout + done.stderr
