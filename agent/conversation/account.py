"""What a call knows of the consumer and the debt, and the terms they may agree to.

``Account`` is filled from the portfolio (``agent.campaigns.portfolio.account_for``) or,
for the demo line and the caller scripts, from ``Account.demo()``. The spoken forms of
amounts, dates and times are here because every text the agent says is built from them.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from agent.conversation.intents import Understanding


@dataclass(frozen=True)
class Account:
    """What the call knows of the consumer and the debt (from the portfolio).

    ``timezone`` is the consumer's IANA zone: "tonight" and "Friday" are theirs."""

    consumer_name: str
    date_of_birth: dt.date | None
    account_last4: str | None
    creditor: str
    balance_cents: int
    time_barred: bool
    state: str
    max_discount_pct: float
    min_installment_cents: int
    max_term_months: int
    fees_allowed: bool = False
    callback_number: str = "1-800-555-0100"
    debt_id: int | None = None
    timezone: str | None = None

    @classmethod
    def demo(cls) -> Account:
        """The demo consumer: the account a call that is about no portfolio debt is held
        about (the demo line, the caller scripts' default). Jordan Smith owes Acme Bank
        $1,200, may settle for 30 % off or pay from $50 a month over up to 12 months."""
        return cls(
            consumer_name="Jordan Smith",
            date_of_birth=dt.date(1980, 3, 5),
            account_last4="4821",
            creditor="Acme Bank",
            balance_cents=120_000,
            time_barred=False,
            state="TX",
            max_discount_pct=30.0,
            min_installment_cents=5_000,
            max_term_months=12,
            timezone="America/Chicago",
        )

    @property
    def first_name(self) -> str:
        return self.consumer_name.split()[0]

    @property
    def settlement_floor_cents(self) -> int:
        """The least one payment may settle the balance for (the maximum discount)."""
        return math.ceil(self.balance_cents * (1 - self.max_discount_pct / 100))

    @property
    def lowest_installment_cents(self) -> int:
        """The least monthly payment that pays the balance within the maximum term."""
        return max(self.min_installment_cents, math.ceil(self.balance_cents / self.max_term_months))

    def settlement_at(self, discount_pct: float) -> Terms:
        """One payment of the balance less ``discount_pct`` (a settlement if anything is off)."""
        amount = math.ceil(self.balance_cents * (1 - discount_pct / 100))
        return Terms(amount, settlement=amount < self.balance_cents)

    def lowest_plan(self) -> Terms:
        """The envelope's lowest monthly plan: the counter-offer to a plan outside it."""
        amount = self.lowest_installment_cents
        return Terms(amount, months=math.ceil(self.balance_cents / amount), monthly=True)

    def allows_plan(self, amount_cents: int, months: int) -> bool:
        """Whether ``months`` payments of ``amount_cents`` are inside the envelope."""
        return amount_cents >= self.min_installment_cents and months <= self.max_term_months


@dataclass(frozen=True)
class Terms:
    """What the consumer offered or accepted: one payment (``months`` 1) or a plan."""

    amount_cents: int
    months: int = 1
    monthly: bool = False
    settlement: bool = False

    def restated_by(self, heard: Understanding) -> bool:
        """The caller names these terms' own amount back: "okay, $840" accepts them."""
        if heard.amount_cents != self.amount_cents or heard.amounts_ambiguous:
            return False
        if heard.installments is not None and heard.installments != self.months:
            return False
        monthly = heard.monthly or heard.per is not None
        return monthly == self.monthly or (not monthly and not heard.once and self.monthly)


@dataclass(frozen=True)
class Promise:
    amount_cents: int
    due: dt.date
    method: str
    installments: int = 1


def local_zone(account: Account) -> dt.tzinfo:
    """The consumer's zone; UTC when unknown (every date is then read back in full)."""
    if account.timezone:
        try:
            return ZoneInfo(account.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return dt.UTC


def dollars(cents: int) -> str:
    """An amount as a person says it: "$1,234.50", "$200"."""
    whole, rest = divmod(cents, 100)
    return f"${whole:,}" if rest == 0 else f"${whole:,}.{rest:02d}"


def spoken_date(day: dt.date) -> str:
    return f"{day:%A, %B} {day.day}"


def spoken_time(time: dt.time) -> str:
    hour = time.hour % 12 or 12
    minutes = f":{time.minute:02d}" if time.minute else ""
    return f"{hour}{minutes} {'p.m.' if time.hour >= 12 else 'a.m.'}"
