"""agent.campaigns.portfolio on SQLite and PostgreSQL: the sample file, bad rows, re-imports."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from agent.campaigns.contact_history import apply_signal
from agent.campaigns.portfolio import (
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    PortfolioError,
    RowError,
    import_portfolio,
)
from agent.store.tables import Consumer, Debt, Phone

SAMPLE = Path(__file__).parent / "data" / "portfolio.csv"
T = dt.datetime(2026, 12, 2, 15, 0, tzinfo=dt.UTC)

GOOD = {
    "consumer_ref": "C-9001",
    "name": "Sam Rivera",
    "date_of_birth": "1990-01-31",
    "account_last4": "1234",
    "address": "5 Oak Ave",
    "city": "Austin",
    "state": "TX",
    "time_zone": "America/Chicago",
    "phones": "+15125550101:personal:creditor_provided:2025-04-01",
    "account_ref": "ACC-9001",
    "creditor": "Acme Card Services",
    "balance": "99.95",
    "statute_status": "within",
    "tenant_type": "third_party_collector",
    "max_discount_pct": "20",
    "min_installment": "10",
    "max_term_months": "6",
    "attorney_name": "",
}


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(GOOD))
        writer.writeheader()
        writer.writerows(rows)
    return path


def count(engine: Engine, model: type[object]) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_sample_portfolio_imports_every_row(db_engine: Engine) -> None:
    report = import_portfolio(db_engine, SAMPLE)
    assert (report.imported, report.updated, report.rejected) == (7, 0, [])
    assert (count(db_engine, Consumer), count(db_engine, Debt), count(db_engine, Phone)) == (
        6,
        7,
        8,
    )
    with Session(db_engine) as session:
        maria = session.scalars(select(Consumer).where(Consumer.external_ref == "C-1001")).one()
        assert (maria.state, maria.time_zone, maria.address) == (
            "MA",
            "America/New_York",
            "12 Beacon St, Apt 3",
        )
        assert [(p.number, p.kind) for p in maria.phones] == [
            ("+16175550142", "personal"),
            ("+16175550199", "work"),
        ]
        debt = maria.debts[0]
        assert (debt.balance_cents, debt.min_installment_cents, debt.max_discount_pct) == (
            123456,
            5000,
            30.0,
        )
        barred = session.scalars(select(Debt).where(Debt.account_ref == "OLDCO-7781")).one()
        assert barred.statute_status == "time_barred"
        assert barred.consumer.date_of_birth is None and barred.account_last4 == "7781"
        jordan = session.scalars(select(Consumer).where(Consumer.external_ref == "C-1004")).one()
        skip = jordan.phones[1]
        assert (skip.consent_source, skip.consent_date) == ("skip_traced", None)
        aisha = session.scalars(select(Consumer).where(Consumer.external_ref == "C-1005")).one()
        assert [d.tenant_type for d in aisha.debts] == [
            "third_party_collector",
            "first_party_creditor",
        ]
        robert = session.scalars(select(Consumer).where(Consumer.external_ref == "C-1006")).one()
        assert robert.attorney_name == "Pat Lawyer, Esq."


def test_reimport_updates_rather_than_duplicates(db_engine: Engine, tmp_path: Path) -> None:
    import_portfolio(db_engine, SAMPLE)
    again = import_portfolio(db_engine, SAMPLE)
    assert (again.imported, again.updated, again.rejected) == (0, 7, [])
    assert (count(db_engine, Consumer), count(db_engine, Debt), count(db_engine, Phone)) == (
        6,
        7,
        8,
    )

    # What calls learned since the first import survives the next one.
    with Session(db_engine) as session:
        debt_id = session.scalars(select(Debt.id).where(Debt.account_ref == "ACME-0001")).one()
    apply_signal(db_engine, debt_id, "wrong_number", number="+16175550199", at=T)
    apply_signal(db_engine, debt_id, "dispute", at=T)
    apply_signal(db_engine, debt_id, "attorney", attorney_name="Lee Counsel", at=T)

    rows = list(csv.DictReader(SAMPLE.open(newline="")))
    rows[0]["balance"] = "1000.00"
    rows[0]["phones"] += ";+16175550123:other:consumer_provided:2026-11-30"
    changed = tmp_path / "changed.csv"
    with changed.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report = import_portfolio(db_engine, changed)
    assert (report.imported, report.updated) == (0, 7)
    with Session(db_engine) as session:
        debt = session.get_one(Debt, debt_id)
        assert (debt.balance_cents, debt.disputed) == (100000, True)
        assert debt.consumer.attorney_name == "Lee Counsel"
        assert [(p.number, p.wrong_number) for p in debt.consumer.phones] == [
            ("+16175550142", False),
            ("+16175550199", True),
            ("+16175550123", False),
        ]


def test_bad_rows_are_reported_with_line_numbers_and_every_reason(
    db_engine: Engine, tmp_path: Path
) -> None:
    bad = {
        **GOOD,
        "consumer_ref": "C-9002",
        "account_ref": "ACC-9002",
        "date_of_birth": "31/01/1990",
        "account_last4": "12a4",
        "state": "Texas",
        "time_zone": "Central",
        "phones": "+15125550102:mobile:bought_list;5125550103:personal",
        "balance": "$1,000",
        "statute_status": "expired",
        "max_discount_pct": "120",
        "max_term_months": "0",
    }
    two_lines = {**GOOD, "consumer_ref": "C-9003", "account_ref": "ACC-9003"}
    two_lines["address"] = "5 Oak Ave\nUnit 2"
    no_verification = {
        **GOOD,
        "consumer_ref": "C-9004",
        "account_ref": "ACC-9004",
        "date_of_birth": "",
        "account_last4": "",
    }
    path = write_csv(tmp_path / "bad.csv", [GOOD, bad, two_lines, no_verification, GOOD])
    report = import_portfolio(db_engine, path)

    assert (report.imported, report.updated) == (2, 0)
    assert [error.line for error in report.rejected] == [3, 6, 7]
    reasons = report.rejected[0].reasons
    for expected in (
        "date_of_birth must be a date YYYY-MM-DD, got '31/01/1990'",
        "account_last4 must be 4 digits",
        "state must be a USPS two-letter code, got 'Texas'",
        "time_zone 'Central' is not an IANA time zone",
        "phone '+15125550102': kind must be one of personal, work, other",
        "phone '+15125550102': consent_source must be one of",
        "phone '5125550103' is not a valid number in E.164",
        "balance must be dollars like 1234.56, got '$1,000'",
        "statute_status must be one of within, time_barred, got 'expired'",
        "max_discount_pct must be 0-100, got 120",
        "max_term_months must be at least 1, got 0",
    ):
        assert any(reason.startswith(expected) for reason in reasons), expected
    assert len(reasons) == 11
    assert report.rejected[1] == RowError(
        6, ("needs date_of_birth or account_last4 to verify the consumer",)
    )
    assert report.rejected[2] == RowError(7, ("account_ref 'ACC-9001' is already on line 2",))
    with Session(db_engine) as session:
        refs = session.scalars(select(Consumer.external_ref).order_by(Consumer.external_ref))
        assert list(refs) == ["C-9001", "C-9003"]


def test_a_row_failing_midway_leaves_nothing_of_itself(db_engine: Engine, tmp_path: Path) -> None:
    """The new consumer and phone are written before the debt shows the row is wrong."""
    import_portfolio(db_engine, SAMPLE)
    thief = {
        **GOOD,
        "consumer_ref": "C-9100",
        "phones": "+15125550199:personal:creditor_provided:2025-04-01",
        "account_ref": "ACME-0001",  # Maria Alvarez's account
    }
    report = import_portfolio(db_engine, write_csv(tmp_path / "midway.csv", [thief]))
    assert report.imported == report.updated == 0
    assert report.rejected == [
        RowError(2, ("account_ref 'ACME-0001' belongs to another consumer, not 'C-9100'",))
    ]
    with Session(db_engine) as session:
        assert (
            session.scalars(select(Consumer).where(Consumer.external_ref == "C-9100")).all() == []
        )
        assert session.scalars(select(Phone).where(Phone.number == "+15125550199")).all() == []
        debt = session.scalars(select(Debt).where(Debt.account_ref == "ACME-0001")).one()
        assert debt.consumer.external_ref == "C-1001"


def test_a_file_without_the_required_header_is_one_clear_error(
    db_engine: Engine, tmp_path: Path
) -> None:
    columns = [c for c in GOOD if c not in ("phones", "balance")]
    path = tmp_path / "partial.csv"
    path.write_text(",".join(columns) + "\n")
    with pytest.raises(PortfolioError, match=r"lacks the required column\(s\) phones, balance$"):
        import_portfolio(db_engine, path)

    notes = tmp_path / "notes.csv"
    notes.write_text("Dear team,\nplease find the accounts attached.\n")
    with pytest.raises(PortfolioError, match="consumer_ref, name, address"):
        import_portfolio(db_engine, notes)

    binary = tmp_path / "portfolio.xlsx"
    binary.write_bytes(b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xff\xfe")
    with pytest.raises(PortfolioError, match="not a UTF-8 text file"):
        import_portfolio(db_engine, binary)

    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(PortfolioError, match="empty file"):
        import_portfolio(db_engine, empty)
    assert count(db_engine, Consumer) == 0


def test_optional_columns_may_be_left_out_and_short_rows_are_rejected(
    db_engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "lean.csv"
    header = [*REQUIRED_COLUMNS, "account_last4"]
    good = [GOOD[c] for c in header]
    path.write_text(
        ",".join(header) + "\n" + ",".join(good) + "\n\n" + ",".join(good[:5]) + "\n",
    )
    report = import_portfolio(db_engine, path)
    assert report.imported == 1
    assert report.rejected == [RowError(4, ("the row has 5 fields, the header 16",))]
    assert set(OPTIONAL_COLUMNS) == {"date_of_birth", "account_last4", "attorney_name"}
