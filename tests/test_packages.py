"""Each package's public names: what ``__all__`` re-exports is its own modules' and is there,
and reading one small module does not load the package's heavy parts (issue 20)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The packages whose ``__init__`` re-exports their public names.
REEXPORTING = ("agent.campaigns", "agent.conversation", "agent.ledger", "agent.store")


@pytest.mark.parametrize("name", REEXPORTING)
def test_all_names_what_the_package_holds(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    assert len(set(exported)) == len(exported), "a name is listed twice"
    for attribute in exported:
        value = getattr(package, attribute)
        home = getattr(value, "__module__", None)
        if isinstance(value, type | types.FunctionType):
            assert home is not None and home.startswith(f"{name}."), (attribute, home)


def test_a_module_named_like_its_function_stays_a_module() -> None:
    from agent.ledger import plan

    assert isinstance(plan, types.ModuleType)


@pytest.mark.parametrize(
    ("module", "not_loaded"),
    [
        # The tables: not the engine's Alembic, the settings, nor the recordings' aiohttp.
        ("agent.store.tables", ("alembic", "aiohttp", "agent.config", "agent.store.database")),
        # A turn's latency definitions: the standard library only, not the planner.
        ("agent.ledger.latency", ("sqlalchemy", "agent.ledger.plan", "agent.store")),
    ],
)
def test_one_small_module_loads_no_heavy_part(module: str, not_loaded: tuple[str, ...]) -> None:
    check = f"import sys, {module}; print(' '.join(m for m in {not_loaded!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"importing {module} loaded {done.stdout.strip()}"
