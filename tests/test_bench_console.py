"""``bench calls``: a small run on SQLite and PostgreSQL prints the table and writes the report.

No timing is asserted (a shared machine's figures are whatever they are): the test
checks that every case was measured before and after, and that the run kept to its
own data: it refuses a database that holds calls, and leaves nothing behind.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.pool import NullPool

from agent.__main__ import _parser
from agent.store.database import create_engine_for
from agent.store.tables import Call
from tests.conftest import BACKENDS, postgres_test_url
from tools.bench_console import run_calls_command

CASES = [
    "newest page",
    "number: last 4 digits",
    "number: all digits",
    "consumer name",
    "disposition: common",
    "disposition: rare",
    "campaign",
    "compliance flag",
    "date range: 7 days",
    "deep page (cursor at 80%)",
    "rare disposition, deep page",
    "flag and 7 days",
]
HEADER = [
    "case",
    "query",
    "calls shown",
    "before p50",
    "before p95",
    "before max",
    "after p50",
    "after p95",
    "after max",
]


def _rows(shown: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in shown.splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[1:]


def _bench(url: str, schema: str, output: Path, *extra: str) -> tuple[int, str]:
    args = _parser().parse_args(
        [
            "bench",
            "calls",
            "--calls",
            "500",
            "--repetitions",
            "2",
            "--database-url",
            url,
            "--schema",
            schema,
            "--output",
            str(output),
            *extra,
        ]
    )
    return run_calls_command(args)


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    """(backend, database URL, schema) for a run of the benchmark."""
    if request.param == "sqlite":
        return "sqlite", f"sqlite:///{tmp_path / 'bench.db'}", "bench_calls"
    base = postgres_test_url()
    if base is None:
        pytest.skip("TEST_POSTGRES_URL is empty: PostgreSQL tests turned off")
    return "postgresql", base, f"bench_t{uuid.uuid4().hex[:12]}"


def test_a_small_run_reports_every_case_and_keeps_to_its_own_data(target, tmp_path):
    backend, url, schema = target
    output = tmp_path / "calls.md"
    status, shown = _bench(url, schema, output, "--keep")
    assert status == 0, shown

    header, rows = _rows(shown)
    assert header == HEADER
    assert [row[0] for row in rows] == CASES
    for row in rows:
        assert int(row[2].split()[0]) >= 0
        assert all(float(cell) > 0 for cell in row[3:]), row
    newest = rows[0]
    assert newest[2] == "50"
    report = output.read_text()
    assert report.startswith("# The console's call list at scale")
    assert "`python -m agent bench calls --calls 500 --repetitions 2`" in report
    assert ("PostgreSQL" if backend == "postgresql" else "SQLite") in report
    assert "cores" in report and "200 ms target" in report
    assert "| newest page | `(none)` | 50 |" in report

    # What the run left (--keep) is calls: a second run refuses it, unless told to reuse.
    status, refused = _bench(url, schema, tmp_path / "again.md")
    assert status == 2 and "already holds 500 calls" in refused
    assert not (tmp_path / "again.md").exists()
    status, shown = _bench(url, schema, tmp_path / "reused.md", "--reuse")
    assert status == 0, shown
    assert [row[0] for row in _rows(shown)[1]] == CASES

    # And without --keep, nothing is left behind.
    if backend == "postgresql":
        admin = create_engine_for(url, poolclass=NullPool)
        try:
            with admin.connect() as connection:
                found = connection.execute(
                    text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": schema}
                ).first()
            assert found is None
        finally:
            admin.dispose()
    else:
        engine = create_engine_for(url, poolclass=NullPool)
        try:
            with engine.connect() as connection:
                assert connection.scalar(select(func.count()).select_from(Call)) == 0
        finally:
            engine.dispose()


def test_a_schema_not_its_own_is_refused(tmp_path):
    if postgres_test_url() is None:
        pytest.skip("TEST_POSTGRES_URL is empty: PostgreSQL tests turned off")
    status, shown = _bench(postgres_test_url() or "", "public", tmp_path / "calls.md")
    assert status == 2 and "starting with 'bench'" in shown
