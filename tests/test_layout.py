"""The layout holds: packages import only downward, tools stay out of the product, and no
module or function grows past its limit (issue 20).

The import contracts are import-linter's, declared in pyproject.toml; this runs them. The
size limits are 800 lines a module and 80 a function. What exceeds them today is listed
below with its size: a listed one may shrink (and then leaves the list) but never grow, and
nothing new may join. The lists are the work left, not an allowance.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "telephony", "infra", "tools")
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80

#: Modules over the limit today, with their length: to be split.
OVERSIZED: dict[str, int] = {}
#: Functions over the limit today (path:qualified name), with their length.
LONG_FUNCTIONS: dict[str, int] = {}


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def function_lengths(path: Path) -> dict[str, int]:
    """``path:Class.method`` -> its length in lines, for every function in ``path``."""
    lengths: dict[str, int] = {}
    name = path.relative_to(ROOT).as_posix()

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                lengths[f"{name}:{prefix}{child.name}"] = child.end_lineno - child.lineno + 1
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return lengths


def over_the_limit(found: dict[str, int], limit: int, known: dict[str, int]) -> list[str]:
    """What breaks the ratchet: new ones over ``limit``, known ones grown, known ones fixed."""
    problems = []
    for name, size in sorted(found.items()):
        if size > limit and name not in known:
            problems.append(f"{name}: {size} lines (the limit is {limit})")
        elif name in known and size > known[name]:
            problems.append(f"{name}: grew from {known[name]} to {size} lines")
    for name in sorted(known):
        if found.get(name, 0) <= limit:
            problems.append(f"{name}: now within {limit} lines: take it off the list")
    return problems


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_module_grows_past_800_lines() -> None:
    found = {
        p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in sources()
    }
    assert not over_the_limit(found, MAX_MODULE_LINES, OVERSIZED)


def test_no_function_grows_past_80_lines() -> None:
    found = {k: v for p in sources() for k, v in function_lengths(p).items()}
    assert not over_the_limit(found, MAX_FUNCTION_LINES, LONG_FUNCTIONS)


def test_the_ratchet_names_what_breaks_it() -> None:
    known = {"a.py": 900, "b.py": 850}
    found = {"a.py": 910, "b.py": 700, "c.py": 801, "d.py": 10}
    assert over_the_limit(found, 800, known) == [
        "a.py: grew from 900 to 910 lines",
        "c.py: 801 lines (the limit is 800)",
        "b.py: now within 800 lines: take it off the list",
    ]


def test_an_installed_agent_without_the_tools_runs_and_says_where_they_are(
    tmp_path: Path,
) -> None:
    """The image holds agent/, telephony/, infra/ and prompts/, not tools/: the server's
    command line still works, and the tools' commands say where they run."""
    for name in ("agent", "telephony", "infra", "prompts", "migrations"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("vendor"))
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}"}

    def agent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agent", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert agent("serve", "--help").returncode == 0
    for command in (["simulate", "--scenario", "callback"], ["bench", "sip"], ["demo-data"]):
        done = agent(*command)
        assert done.returncode == 2, done.stderr
        assert "run from a checkout of the repository" in done.stderr
