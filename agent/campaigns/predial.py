"""The pre-dial gate: may this number be called about this debt, at this time?

Every outbound attempt asks here first (rules D1-D10 of docs/compliance.md, in
``agent.campaigns.contact_rules``). The rules are code, not prompts: ``check``
evaluates all of them in a fixed order (suppressions and consent before counts and
hours) and returns the first denial; anything the gate cannot establish (an unknown
number, an unreadable time zone, an error) is a denial too: the gate fails closed,
and every decision is logged.

``reserve_attempt`` is what a dialer calls: it checks and records the attempt in one
transaction that holds the debt, so two dialers cannot both take the last slot.
What happened on the line comes back through ``agent.campaigns.contact_history``, so
the next check sees it. ``contact_ledger`` is what the operator sees of a debt.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace

from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from agent.campaigns.contact_rules import (
    CONTACT_CAPS,
    DAY,
    ContactCap,
    Facts,
    allowed_because,
    consented_callback,
    find_denials,
    in_utc,
    load_facts,
    masked,
    next_allowed,
)
from agent.store.tables import AttemptOutcome, ContactAttempt, Debt

logger = logging.getLogger(__name__)


# -- requests and decisions --------------------------------------------------


@dataclass(frozen=True)
class DialRequest:
    """A dialer's question: may ``number`` be called about debt ``debt_id`` at ``at``?"""

    debt_id: int
    number: str
    at: dt.datetime

    def __post_init__(self) -> None:
        if self.at.tzinfo is None or self.at.utcoffset() is None:
            raise ValueError(f"naive datetime {self.at!r}: give the dial time with its zone")


@dataclass(frozen=True)
class Decision:
    """The gate's answer, with the rule that decided and a reason an operator can read.

    ``rule`` is ``"ok"`` when allowed, else the first denying rule (``"D1"`` ..
    ``"D10"``, ``"unknown_debt"``, ``"error"``). ``next_allowed_at`` is set
    when every rule that denies lifts with time alone (caps, D2, hours): the
    earliest time the call would be allowed if nothing else happens.
    ``attempt_id`` is the reserved attempt's id (``reserve_attempt`` only).
    ``consented_callback``: allowed as the callback the consumer asked for
    (1006.14(b)(3)), so the attempt does not count towards D1.
    """

    allowed: bool
    rule: str
    reason: str
    next_allowed_at: dt.datetime | None = None
    attempt_id: int | None = None
    consented_callback: bool = False


@dataclass(frozen=True)
class Ledger:
    """The per-debt contact ledger the operator sees."""

    #: Counted attempts on the debt in the 7 days before the time asked about.
    attempts_used_7d: int
    #: The strictest 7-day cap that applies to the debt (7 federally, 2 in MA, 3 in WA).
    limit: int
    #: The earliest time any of the consumer's numbers may be called; None if none may.
    next_allowed_at: dt.datetime | None
    last_conversation_at: dt.datetime | None


# -- the gate ----------------------------------------------------------------


def check(
    session: Session, request: DialRequest, *, caps: Iterable[ContactCap] = CONTACT_CAPS
) -> Decision:
    """Whether ``request`` may be dialled now; the first denying rule, in the fixed order.

    Reads through ``session`` and writes nothing. Any error is a denial.
    """
    decision, _facts = _decide(session, request, caps)
    _log(request, decision, "checked")
    return decision


def reserve_attempt(
    engine: Engine, request: DialRequest, *, caps: Iterable[ContactCap] = CONTACT_CAPS
) -> Decision:
    """Check ``request`` and, if allowed, record the attempt (``dialing``, counted), atomically.

    An attempt allowed as a consented callback is recorded ``consented`` and not
    counted towards D1 (1006.14(b)(3)).

    The transaction first locks the debt (PostgreSQL: ``SELECT ... FOR
    UPDATE`` on its row; SQLite: the database's writer lock), so concurrent
    reservations for the same debt run one after the other and each sees the
    attempts the others made. Dial only on an allowed decision; a database
    error raises and reserves nothing.
    """
    with Session(engine) as session, session.begin():
        lock_debt(session, request.debt_id)
        decision, facts = _decide(session, request, caps)
        if decision.allowed and facts is not None and facts.phone is not None:
            attempt = ContactAttempt(
                debt_id=facts.debt.id,
                consumer_id=facts.consumer.id,
                phone_id=facts.phone.id,
                number=facts.number,
                at=request.at,
                outcome=AttemptOutcome.DIALING.value,
                counts=not decision.consented_callback,
                consented=decision.consented_callback,
                decided_by=decision.reason,
            )
            session.add(attempt)
            session.flush()
            decision = replace(decision, attempt_id=attempt.id)
    _log(request, decision, "reserved" if decision.allowed else "refused")
    return decision


def lock_debt(session: Session, debt_id: int) -> None:
    """Serialise this transaction against others reserving for the same debt.

    SQLite has no row locks. ``create_engine_for`` begins transactions with a
    plain BEGIN, so instead of BEGIN IMMEDIATE the first statement is a write
    that changes nothing: it takes the writer lock (waiting for it) before the
    transaction reads anything, which is what BEGIN IMMEDIATE would do.
    """
    if session.get_bind().dialect.name == "sqlite":
        session.execute(
            update(Debt)
            .where(Debt.id == debt_id)
            .values(id=Debt.id)
            .execution_options(synchronize_session=False)
        )
    else:
        session.execute(select(Debt.id).where(Debt.id == debt_id).with_for_update())


def _decide(
    session: Session, request: DialRequest, caps: Iterable[ContactCap]
) -> tuple[Decision, Facts | None]:
    try:
        facts = load_facts(session, request.debt_id, request.number, request.at, caps)
        if facts is None:
            return Decision(False, "unknown_debt", f"there is no debt {request.debt_id}"), None
        denials = find_denials(facts, request.at)
        if not denials:
            consented = consented_callback(facts, request.at)
            reason = allowed_because(facts, request.at)
            return Decision(True, "ok", reason, consented_callback=consented), facts
        first = denials[0]
        later = "; also " + "; ".join(d.rule for d in denials[1:]) if denials[1:] else ""
        return (
            Decision(
                False,
                first.rule,
                first.reason + later,
                next_allowed(facts, request.at, denials),
            ),
            facts,
        )
    except Exception as exc:
        logger.exception("pre-dial gate failed on debt %s; denying", request.debt_id)
        reason = f"the gate could not evaluate the rules ({type(exc).__name__}: {exc})"
        return Decision(False, "error", reason), None


def _log(request: DialRequest, decision: Decision, action: str) -> None:
    logger.info(
        "pre-dial %s: debt %s, %s at %s: %s %s%s",
        action,
        request.debt_id,
        masked(request.number),
        in_utc(request.at),
        decision.rule,
        decision.reason,
        f" (next allowed {in_utc(decision.next_allowed_at)})" if decision.next_allowed_at else "",
    )


# -- the operator's ledger ---------------------------------------------------


def contact_ledger(
    session: Session,
    debt_id: int,
    at: dt.datetime,
    *,
    caps: Iterable[ContactCap] = CONTACT_CAPS,
) -> Ledger:
    """Attempts used, the cap, and when the debt may next be called (any of its numbers)."""
    debt = session.get(Debt, debt_id)
    if debt is None:
        raise LookupError(f"there is no debt {debt_id}")
    caps = tuple(caps)
    consumer = debt.consumer
    week = 7 * DAY
    limit = min(
        c.limit
        for c in caps
        if c.window == week and c.applies_to(consumer.state, debt.tenant_type, None)
    )
    used = session.scalar(
        select(func.count())
        .select_from(ContactAttempt)
        .where(
            ContactAttempt.debt_id == debt.id,
            ContactAttempt.counts.is_(True),
            ContactAttempt.at > at - week,
            ContactAttempt.at <= at,
        )
    )
    times = []
    for phone in consumer.phones:
        decision, _facts = _decide(session, DialRequest(debt.id, phone.number, at), caps)
        if decision.allowed:
            times.append(at)
        elif decision.next_allowed_at is not None:
            times.append(decision.next_allowed_at)
    return Ledger(
        attempts_used_7d=int(used or 0),
        limit=limit,
        next_allowed_at=min(times, default=None),
        last_conversation_at=debt.last_conversation_at,
    )
