"""The demo's generated portfolio: consumers and debts, imported through the real importer.

Names, cities and numbers (in the fictional 555-01xx range) are drawn at random; the CSV goes
through ``agent.campaigns.portfolio.import_portfolio``, so the pre-dial ledger is real.
"""

from __future__ import annotations

import csv
import datetime as dt
import logging
import math
import random
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, selectinload

from agent.campaigns.portfolio import REQUIRED_COLUMNS, account_for, import_portfolio, to_e164
from agent.conversation import Account
from agent.store.tables import Consumer, Debt
from tools.demo_measured import DemoError

logger = logging.getLogger(__name__)

#: City, state, IANA zone and two area codes of the city; numbers are 555-01xx (fictional).
CITIES = (
    ("Boston", "MA", "America/New_York", ("617", "857")),
    ("New York", "NY", "America/New_York", ("212", "718")),
    ("Philadelphia", "PA", "America/New_York", ("215", "267")),
    ("Atlanta", "GA", "America/New_York", ("404", "678")),
    ("Miami", "FL", "America/New_York", ("305", "786")),
    ("Columbus", "OH", "America/New_York", ("614", "380")),
    ("Chicago", "IL", "America/Chicago", ("312", "773")),
    ("Dallas", "TX", "America/Chicago", ("214", "469")),
    ("Houston", "TX", "America/Chicago", ("713", "832")),
    ("Minneapolis", "MN", "America/Chicago", ("612", "763")),
    ("Denver", "CO", "America/Denver", ("303", "720")),
    ("Phoenix", "AZ", "America/Phoenix", ("602", "480")),
    ("Seattle", "WA", "America/Los_Angeles", ("206", "253")),
    ("Los Angeles", "CA", "America/Los_Angeles", ("213", "310")),
    ("San Diego", "CA", "America/Los_Angeles", ("619", "858")),
)
FIRST_NAMES = (
    "Maria James Linda Robert Patricia Michael Jennifer David Elizabeth William Susan Richard "
    "Jessica Joseph Sarah Thomas Karen Charles Nancy Daniel Lisa Matthew Betty Anthony Sandra "
    "Mark Ashley Steven Emily Andrew Donna Kevin Michelle Brian Carol George Amanda Edward "
    "Melissa Ronald Deborah Jason Rebecca Ryan Laura Gary Sharon Eric"
).split()
LAST_NAMES = (
    "Alvarez Kim Johnson Smith Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Wilson "
    "Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark "
    "Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green "
    "Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts"
).split()
STREETS = (
    "Maple Ave",
    "Oak St",
    "Cedar Ln",
    "Elm St",
    "Park Blvd",
    "Lake Dr",
    "Hill Rd",
    "River Rd",
    "Washington St",
    "Main St",
    "Pine Ct",
    "Sunset Blvd",
)
#: Creditor, account prefix.
CREDITORS = (
    ("Acme Card Services", "ACME"),
    ("Oldcastle Retail Credit", "OLDCO"),
    ("Harbor Medical Group", "HMED"),
    ("Summit Auto Finance", "SAF"),
    ("Lakeside Utilities", "LKU"),
)
TENANT_TYPES = (("third_party_collector", 6), ("debt_buyer", 3), ("first_party_creditor", 1))


def weighted(rng: random.Random, choices: Iterable[tuple[Any, float]]) -> Any:
    """One of ``(value, weight)`` at random by weight (a weight of 0 is never drawn)."""
    items = [(value, weight) for value, weight in choices if weight > 0]
    return rng.choices([v for v, _ in items], weights=[w for _, w in items])[0]


@dataclass(frozen=True)
class DemoDebt:
    """A debt of the imported portfolio as the generator uses it."""

    account: Account
    consumer_id: int
    #: (E.164, kind, consent source) of the consumer's numbers.
    phones: tuple[tuple[str, str, str | None], ...]
    zone: ZoneInfo

    @property
    def debt_id(self) -> int:
        assert self.account.debt_id is not None
        return self.account.debt_id

    @property
    def caller_id(self) -> str:
        """The number the consumer calls from: their first personal number."""
        personal = [n for n, kind, _ in self.phones if kind == "personal"]
        return (personal or [self.phones[0][0]])[0]


def portfolio_rows(
    rng: random.Random, consumers: int, prefix: str, today: dt.date
) -> list[dict[str, str]]:
    """A generated portfolio in the CSV format of docs/portfolio.md, one dict per row."""
    numbers: set[str] = set()

    def number(area: str) -> str:
        for _ in range(1000):
            candidate = f"+1{area}55501{rng.randrange(100):02d}"
            if candidate not in numbers and to_e164(candidate) == candidate:
                numbers.add(candidate)
                return candidate
        raise DemoError(f"no free 555-01xx number left in area code {area}: ask for fewer")

    def consent_date() -> str:
        start = dt.date(today.year - 3, 1, 1)
        return (start + dt.timedelta(days=rng.randrange((today - start).days - 60))).isoformat()

    rows = []
    account_number = 0
    for index in range(consumers):
        city, state, zone, areas = rng.choice(CITIES)
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        born = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(52 * 365))
        home_area = rng.choice(areas)
        if rng.random() < 0.05:  # moved: a cell from another city (D4 checks both zones)
            home_area = rng.choice(rng.choice(CITIES)[3])
        source = "creditor_provided" if rng.random() < 0.85 else "consumer_provided"
        phones = [f"{number(home_area)}:personal:{source}:{consent_date()}"]
        if rng.random() < 0.2:
            phones.append(f"{number(rng.choice(areas))}:work:creditor_provided:{consent_date()}")
        if rng.random() < 0.1:
            phones.append(f"{number(rng.choice(areas))}:other:skip_traced")
        consumer = {
            "consumer_ref": f"{prefix}C{index + 1:05d}",
            "name": f"{first} {last}",
            "date_of_birth": "" if rng.random() < 0.1 else born.isoformat(),
            "address": f"{rng.randrange(10, 9999)} {rng.choice(STREETS)}",
            "city": city,
            "state": state,
            "time_zone": zone,
            "phones": ";".join(phones),
            "attorney_name": "Pat Rivera, Esq." if rng.random() < 0.02 else "",
        }
        creditors = rng.sample(CREDITORS, 2 if rng.random() < 0.2 else 1)
        for creditor, creditor_prefix in creditors:
            account_number += 1
            balance = min(9000.0, max(80.0, rng.lognormvariate(math.log(900), 0.8)))
            minimum = min(rng.choice((20, 25, 40, 50, 75, 100)), max(10, int(balance / 4)))
            rows.append(
                {
                    **consumer,
                    "account_ref": f"{prefix}{creditor_prefix}-{account_number:05d}",
                    "account_last4": f"{rng.randrange(10_000):04d}",
                    "creditor": creditor,
                    "balance": f"{balance:.2f}",
                    "statute_status": "time_barred" if rng.random() < 0.15 else "within",
                    "tenant_type": weighted(rng, TENANT_TYPES),
                    "max_discount_pct": str(rng.choice((20, 25, 30, 40, 50, 60))),
                    "min_installment": f"{minimum:.2f}",
                    "max_term_months": str(rng.choice((6, 12, 18, 24))),
                }
            )
    return rows


def import_demo_portfolio(
    engine: Engine, rng: random.Random, consumers: int, prefix: str, today: dt.date
) -> list[DemoDebt]:
    """Generate the portfolio, import it with the real importer, and read its debts back."""
    rows = portfolio_rows(rng, consumers, prefix, today)
    columns = [*REQUIRED_COLUMNS, "date_of_birth", "account_last4", "attorney_name"]
    with tempfile.TemporaryDirectory(prefix="demo-portfolio-") as folder:
        path = Path(folder) / "demo-portfolio.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        report = import_portfolio(engine, path)
    if report.rejected:
        first = report.rejected[0]
        raise DemoError(
            f"the generated portfolio was refused ({len(report.rejected)} rows; line "
            f"{first.line}: {'; '.join(first.reasons)})"
        )
    debts = []
    with Session(engine) as session:
        query = (
            select(Debt)
            .where(Debt.account_ref.startswith(prefix, autoescape=True))
            .options(selectinload(Debt.consumer).selectinload(Consumer.phones))
            .order_by(Debt.id)
        )
        for debt in session.scalars(query):
            consumer = debt.consumer
            debts.append(
                DemoDebt(
                    account=account_for(session, debt.id),
                    consumer_id=consumer.id,
                    phones=tuple((p.number, p.kind, p.consent_source) for p in consumer.phones),
                    zone=ZoneInfo(consumer.time_zone),
                )
            )
    logger.info("demo portfolio: %d consumers, %d debts (%s...)", consumers, len(debts), prefix)
    return debts
