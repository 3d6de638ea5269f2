"""The portfolio importer: a creditor's CSV of consumers, phones and debts into the store.

A portfolio arrives as a spreadsheet export; what it says decides whom the
agent may call and what it may offer, so nothing half-right gets in. Every
row is validated first and a bad row is reported with its line number and
every reason at once, so the sender can fix the file in one pass. A good row
lands whole or not at all: its consumer, phones and debt go in one
transaction. Importing the same file again updates (``consumer_ref`` and
``account_ref`` are the keys) and never clears what calls have learned since:
suppressions, opt-outs, wrong numbers, a known attorney. The format is in
docs/portfolio.md.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import phonenumbers
from sqlalchemy import Engine, select
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session

from agent.campaigns import csvfile
from agent.campaigns.contact_rules import consumer_time_zone
from agent.conversation.account import Account
from agent.store.tables import (
    ConsentSource,
    Consumer,
    Debt,
    Phone,
    PhoneKind,
    StatuteStatus,
    TenantType,
)

logger = logging.getLogger(__name__)

#: Columns every portfolio has.
REQUIRED_COLUMNS = (
    "consumer_ref",
    "name",
    "address",
    "city",
    "state",
    "time_zone",
    "phones",
    "account_ref",
    "creditor",
    "balance",
    "statute_status",
    "tenant_type",
    "max_discount_pct",
    "min_installment",
    "max_term_months",
)
#: Columns a portfolio may leave out (a row needs a date of birth or the last four).
OPTIONAL_COLUMNS = ("date_of_birth", "account_last4", "attorney_name")

#: USPS codes of the states, DC and the territories.
STATES = frozenset(
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH "
    "NJ NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY AS GU MP PR VI".split()
)

_MONEY = re.compile(r"\d+(\.\d{1,2})?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: Column widths of the tables, so a long value is a row error, not a database error.
_WIDTHS = {
    "consumer_ref": 64,
    "name": 200,
    "city": 100,
    "account_ref": 64,
    "creditor": 200,
    "attorney_name": 200,
}


class PortfolioError(ValueError):
    """The file as a whole cannot be read as a portfolio (no rows were looked at)."""


@dataclass(frozen=True)
class RowError:
    """A rejected row: its line in the file (the header is line 1) and every reason."""

    line: int
    reasons: tuple[str, ...]


@dataclass
class ImportReport:
    """What an import did: rows that created a debt, rows that updated one, rows rejected."""

    imported: int = 0
    updated: int = 0
    rejected: list[RowError] = field(default_factory=list)


@dataclass(frozen=True)
class _PhoneRow:
    number: str
    kind: str
    consent_source: str | None
    consent_date: dt.date | None


@dataclass(frozen=True)
class _Row:
    """One validated row, in the store's units (cents, dates, E.164)."""

    line: int
    consumer_ref: str
    name: str
    date_of_birth: dt.date | None
    account_last4: str | None
    address: str
    city: str
    state: str
    time_zone: str
    phones: tuple[_PhoneRow, ...]
    account_ref: str
    creditor: str
    balance_cents: int
    statute_status: str
    tenant_type: str
    max_discount_pct: float
    min_installment_cents: int
    max_term_months: int
    attorney_name: str | None


class _RowRejected(Exception):
    """A row the database showed to be wrong while it was being written."""


def import_portfolio(engine: Engine, path: str | Path) -> ImportReport:
    """Validate and import the portfolio CSV at ``path``; see docs/portfolio.md.

    Raises ``PortfolioError`` when the file is not a portfolio at all (not
    text, no header, required columns missing). Otherwise every row is either
    imported (or updated) whole or listed in ``rejected``.
    """
    path = Path(path)
    report = ImportReport()
    seen_accounts: dict[str, int] = {}
    text = csvfile.read_text(path, "portfolio", PortfolioError)
    records = csvfile.rows(
        text, path.name, "portfolio", PortfolioError, REQUIRED_COLUMNS, OPTIONAL_COLUMNS
    )
    for line, raw, problem in records:
        reasons = [problem] if problem else []
        row = _validate(line, raw, reasons) if not problem else None
        if row is not None and row.account_ref in seen_accounts:
            first = seen_accounts[row.account_ref]
            reasons.append(f"account_ref {row.account_ref!r} is already on line {first}")
        if row is None or reasons:
            report.rejected.append(RowError(line, tuple(reasons)))
            continue
        seen_accounts[row.account_ref] = line
        try:
            created = _write(engine, row)
        except _RowRejected as exc:
            report.rejected.append(RowError(line, (str(exc),)))
            continue
        except (IntegrityError, DataError) as exc:
            reason = str(exc.orig) if exc.orig is not None else str(exc)
            report.rejected.append(RowError(line, (f"the database refused the row: {reason}",)))
            continue
        if created:
            report.imported += 1
        else:
            report.updated += 1
    logger.info(
        "portfolio %s: %d imported, %d updated, %d rejected",
        path.name,
        report.imported,
        report.updated,
        len(report.rejected),
    )
    if report.rejected:
        # The reasons quote the rows (names, numbers): they go to the report, not the log.
        lines = ", ".join(str(error.line) for error in report.rejected)
        logger.warning("portfolio %s: rejected line(s) %s", path.name, lines)
    return report


# -- validating --------------------------------------------------------------


def _validate(line: int, raw: Mapping[str, str], reasons: list[str]) -> _Row | None:
    """The row in the store's units, or None with every reason in ``reasons``."""

    def text(name: str, required: bool = True) -> str:
        value = raw.get(name, "")
        if required and not value:
            reasons.append(f"{name} is empty")
        width = _WIDTHS.get(name)
        if width is not None and len(value) > width:
            reasons.append(f"{name} is longer than {width} characters")
        return value

    consumer_ref = text("consumer_ref")
    name = text("name")
    address = text("address")
    city = text("city")
    account_ref = text("account_ref")
    creditor = text("creditor")
    attorney_name = text("attorney_name", required=False) or None

    date_of_birth, last4 = _verification(raw, reasons)
    state, time_zone = _place(raw, reasons)
    phones = _phones(raw.get("phones", ""), reasons)
    balance = _cents(raw.get("balance", ""), "balance", reasons)
    min_installment = _cents(raw.get("min_installment", ""), "min_installment", reasons)
    statute_status = _one_of(
        raw.get("statute_status", ""), "statute_status", StatuteStatus, reasons
    )
    tenant_type = _one_of(raw.get("tenant_type", ""), "tenant_type", TenantType, reasons)
    max_discount_pct = _discount(raw.get("max_discount_pct", ""), reasons)
    max_term_months = _term(raw.get("max_term_months", ""), reasons)

    if (
        reasons
        or balance is None
        or min_installment is None
        or max_discount_pct is None
        or max_term_months is None
    ):
        return None
    return _Row(
        line=line,
        consumer_ref=consumer_ref,
        name=name,
        date_of_birth=date_of_birth,
        account_last4=last4,
        address=address,
        city=city,
        state=state,
        time_zone=time_zone,
        phones=phones,
        account_ref=account_ref,
        creditor=creditor,
        balance_cents=balance,
        statute_status=statute_status,
        tenant_type=tenant_type,
        max_discount_pct=max_discount_pct,
        min_installment_cents=min_installment,
        max_term_months=max_term_months,
        attorney_name=attorney_name,
    )


def _verification(raw: Mapping[str, str], reasons: list[str]) -> tuple[dt.date | None, str | None]:
    """The date of birth and last four the policy verifies the consumer with: one is needed."""
    date_of_birth = _date(raw.get("date_of_birth", ""), "date_of_birth", reasons)
    if date_of_birth is not None and date_of_birth >= dt.date.today():
        reasons.append(f"date_of_birth {date_of_birth} is not in the past")
    last4 = raw.get("account_last4", "") or None
    if last4 is not None and not (len(last4) == 4 and last4.isdigit()):
        reasons.append(f"account_last4 must be 4 digits, got {last4!r}")
    if not raw.get("date_of_birth") and last4 is None:
        reasons.append("needs date_of_birth or account_last4 to verify the consumer")
    return date_of_birth, last4


def _place(raw: Mapping[str, str], reasons: list[str]) -> tuple[str, str]:
    """The state (its rules) and the time zone (its calling hours) the consumer lives in."""
    state = raw.get("state", "").upper()
    if state not in STATES:
        reasons.append(f"state must be a USPS two-letter code, got {raw.get('state', '')!r}")
    time_zone = raw.get("time_zone", "")
    if not _is_zone(time_zone):
        reasons.append(f"time_zone {time_zone!r} is not an IANA time zone")
    return state, time_zone


def _discount(value: str, reasons: list[str]) -> float | None:
    """The largest discount the creditor allows, a percentage 0-100."""
    try:
        pct = float(value)
    except ValueError:
        reasons.append(f"max_discount_pct must be a number, got {value!r}")
        return None
    if not 0 <= pct <= 100:
        reasons.append(f"max_discount_pct must be 0-100, got {pct:g}")
    return pct


def _term(value: str, reasons: list[str]) -> int | None:
    """The longest payment plan the creditor allows, in whole months."""
    try:
        months = int(value)
    except ValueError:
        reasons.append(f"max_term_months must be a whole number, got {value!r}")
        return None
    if months < 1:
        reasons.append(f"max_term_months must be at least 1, got {months}")
    return months


def _phones(value: str, reasons: list[str]) -> tuple[_PhoneRow, ...]:
    """``+15551234567:kind[:consent_source[:consent_date]]``, ``;``-separated."""
    phones: list[_PhoneRow] = []
    entries = [entry.strip() for entry in value.split(";") if entry.strip()]
    if not entries:
        reasons.append("phones is empty: at least one number is needed")
    for entry in entries:
        parts = [part.strip() for part in entry.split(":")]
        if not 2 <= len(parts) <= 4:
            reasons.append(f"phone {entry!r} is not number:kind[:consent_source[:consent_date]]")
            continue
        parts += [""] * (4 - len(parts))
        number, kind, source, when = parts
        e164 = to_e164(number)
        if e164 is None:
            reasons.append(f"phone {number!r} is not a valid number in E.164 (+1...)")
        if kind not in set(PhoneKind):
            reasons.append(f"phone {number!r}: kind must be one of {_choices(PhoneKind)}")
        if source and source not in set(ConsentSource):
            reasons.append(
                f"phone {number!r}: consent_source must be one of {_choices(ConsentSource)}"
            )
        consent_date = _date(when, f"phone {number!r} consent_date", reasons)
        if consent_date is not None and not source:
            reasons.append(f"phone {number!r}: a consent_date without a consent_source")
        if e164 is not None and any(p.number == e164 for p in phones):
            reasons.append(f"phone {number!r} is listed twice")
        if e164 is not None:
            phones.append(_PhoneRow(e164, kind, source or None, consent_date))
    return tuple(phones)


def to_e164(number: str) -> str | None:
    """``number`` in E.164 (+15551234567), if it is valid and written with its country code."""
    try:
        parsed = phonenumbers.parse(number, None)
    except phonenumbers.NumberParseException:
        return None
    if not number.startswith("+") or not phonenumbers.is_valid_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def _date(value: str, name: str, reasons: list[str]) -> dt.date | None:
    if not value:
        return None
    try:
        if _DATE.fullmatch(value):
            return dt.date.fromisoformat(value)
    except ValueError:
        pass
    reasons.append(f"{name} must be a date YYYY-MM-DD, got {value!r}")
    return None


def _cents(value: str, name: str, reasons: list[str]) -> int | None:
    """Dollars (``1234.56``) as cents; no currency signs, no thousands separators."""
    if not _MONEY.fullmatch(value):
        reasons.append(f"{name} must be dollars like 1234.56, got {value!r}")
        return None
    try:
        return int(Decimal(value) * 100)
    except InvalidOperation:  # pragma: no cover - the pattern already checked it
        reasons.append(f"{name} must be dollars like 1234.56, got {value!r}")
        return None


def _one_of(value: str, name: str, choices: type[enum.StrEnum], reasons: list[str]) -> str:
    if value not in {str(choice) for choice in choices}:
        reasons.append(f"{name} must be one of {_choices(choices)}, got {value!r}")
    return value


def _choices(choices: type[enum.StrEnum]) -> str:
    return ", ".join(str(choice) for choice in choices)


def _is_zone(name: str) -> bool:
    if not name or "/" not in name:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


# -- writing -----------------------------------------------------------------


def _write(engine: Engine, row: _Row) -> bool:
    """Upsert the row's consumer, phones and debt in one transaction; True if the debt is new."""
    with Session(engine) as session, session.begin():
        consumer = session.scalars(
            select(Consumer).where(Consumer.external_ref == row.consumer_ref)
        ).one_or_none()
        if consumer is None:
            consumer = Consumer(external_ref=row.consumer_ref, inconvenient=[])
            session.add(consumer)
        consumer.name = row.name
        consumer.date_of_birth = row.date_of_birth
        consumer.address = row.address
        consumer.city = row.city
        consumer.state = row.state
        consumer.time_zone = row.time_zone
        if row.attorney_name is not None:
            # A blank never clears a known attorney: that came from a call (D6).
            consumer.attorney_name = row.attorney_name

        by_number = {phone.number: phone for phone in consumer.phones}
        for entry in row.phones:
            phone = by_number.get(entry.number)
            if phone is None:
                phone = Phone(number=entry.number)
                consumer.phones.append(phone)
            phone.kind = entry.kind
            phone.consent_source = entry.consent_source
            phone.consent_date = entry.consent_date
        session.flush()

        debt = session.scalars(
            select(Debt).where(Debt.account_ref == row.account_ref)
        ).one_or_none()
        created = debt is None
        if debt is None:
            debt = Debt(account_ref=row.account_ref)
            consumer.debts.append(debt)
        elif debt.consumer_id != consumer.id:
            # Rolls back the consumer and phones written above with it.
            raise _RowRejected(
                f"account_ref {row.account_ref!r} belongs to another consumer, "
                f"not {row.consumer_ref!r}"
            )
        debt.account_last4 = row.account_last4
        debt.creditor = row.creditor
        debt.balance_cents = row.balance_cents
        debt.statute_status = row.statute_status
        debt.tenant_type = row.tenant_type
        debt.max_discount_pct = row.max_discount_pct
        debt.min_installment_cents = row.min_installment_cents
        debt.max_term_months = row.max_term_months
    return created


def account_for(session: Session, debt_id: int, number: str | None = None) -> Account:
    """What a call about ``debt_id`` knows of the consumer and the debt.

    The consumer's zone is the one the gate reads their local time in (the
    address's; ``number``'s area code when the address's is unreadable), so that
    the policy's "tonight" is the gate's.
    """
    debt = session.get(Debt, debt_id)
    if debt is None:
        raise LookupError(f"no debt {debt_id} in the portfolio")
    consumer = debt.consumer
    return Account(
        consumer_name=consumer.name,
        date_of_birth=consumer.date_of_birth,
        account_last4=debt.account_last4,
        creditor=debt.creditor,
        balance_cents=debt.balance_cents,
        time_barred=debt.statute_status == StatuteStatus.TIME_BARRED.value,
        state=consumer.state,
        max_discount_pct=debt.max_discount_pct,
        min_installment_cents=debt.min_installment_cents,
        max_term_months=debt.max_term_months,
        debt_id=debt.id,
        timezone=consumer_time_zone(consumer, number),
    )


# -- inbound callers ---------------------------------------------------------

#: Whom an inbound call not matched to one debt is held as: nobody the agent can
#: verify (no date of birth, no last four), so nothing about any debt is disclosed.
UNMATCHED_CALLER = Account(
    consumer_name="the account holder",
    date_of_birth=None,
    account_last4=None,
    creditor="",
    balance_cents=0,
    time_barred=False,
    state="",
    max_discount_pct=0.0,
    min_installment_cents=0,
    max_term_months=1,
)

#: What a carrier or trunk sends when the caller withholds the number.
_WITHHELD = frozenset({"", "anonymous", "unknown", "restricted", "private", "unavailable"})


@dataclass(frozen=True)
class CallerMatch:
    """An inbound caller looked up in the portfolio by their number.

    ``account`` is set when the number is on file for exactly one consumer with
    exactly one open debt; ``reason`` says how the lookup went, for the log.
    """

    account: Account | None
    reason: str
    #: The caller's number in E.164, when it could be read.
    number: str | None = None


def caller_e164(number: str | None, region: str = "US") -> str | None:
    """The caller id in E.164: carriers send ``+16175550142``, SIP trunks often a
    national ``6175550142`` or ``16175550142`` (read in ``region``); None when
    withheld or not a valid number."""
    if number is None or number.strip().lower() in _WITHHELD:
        return None
    try:
        parsed = phonenumbers.parse(number.strip(), region)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def is_open(debt: Debt) -> bool:
    """Whether a debt is still being collected: a balance, and nothing that stops it
    (bankruptcy, death, a dispute pending verification, a cease request)."""
    return debt.balance_cents > 0 and not (
        debt.bankrupt or debt.deceased or debt.disputed or debt.cease_requested
    )


def match_caller(session: Session, number: str | None) -> CallerMatch:
    """The debt an inbound call is about, found by the caller's number.

    Only an unambiguous match is used: the number on file (not marked wrong) for
    one consumer, who has one open debt. The policy still verifies the person
    (date of birth or last four) before it says anything about that debt; a
    number shared by several consumers, or a consumer with several open debts,
    matches nothing, since the agent cannot tell which debt to speak of.
    """
    e164 = caller_e164(number)
    if e164 is None:
        return CallerMatch(None, "no caller number")
    consumer_ids = session.scalars(
        select(Phone.consumer_id)
        .where(Phone.number == e164, Phone.wrong_number.is_(False))
        .distinct()
    ).all()
    if not consumer_ids:
        return CallerMatch(None, "the number is not in the portfolio", e164)
    if len(consumer_ids) > 1:
        return CallerMatch(None, f"the number is on file for {len(consumer_ids)} consumers", e164)
    consumer = session.get_one(Consumer, consumer_ids[0])
    debts = [debt for debt in consumer.debts if is_open(debt)]
    if len(debts) != 1:
        return CallerMatch(None, f"the consumer has {len(debts)} open debts", e164)
    account = account_for(session, debts[0].id, e164)
    return CallerMatch(account, f"debt {debts[0].account_ref}", e164)
