"""What happened on the line, recorded so that the pre-dial gate's next check sees it.

``record_outcome``, ``record_conversation``, ``apply_signal`` and
``record_callback_consent`` feed back what happened on a call (D2, D3, D5, the
consumer's requests, rule C8/C12 of docs/compliance.md); ``record_call`` does all of
that for a finished call from its policy events. A callback the consumer asked for is
a consented call (1006.14(b)(3)): inside its window it neither counts towards D1 nor
is barred by D2, and every other rule still holds. Each write holds the debt's lock
(``agent.campaigns.predial.lock_debt``), as a reservation does.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from sqlalchemy import Engine, case, false, literal, update
from sqlalchemy.orm import Session

from agent.campaigns.contact_rules import (
    ATTORNEY_NAME_UNKNOWN,
    DAY,
    NOT_COUNTED,
    InconvenientWindow,
    consumer_time_zone,
    in_utc,
    masked,
    parse_clock,
    parse_number,
)
from agent.campaigns.predial import lock_debt
from agent.store.tables import AttemptOutcome, ContactAttempt, Debt

logger = logging.getLogger(__name__)

#: How long a consent to a callback lasts (1006.14(b)(3): "within the past 7 days").
CONSENT_LASTS = 7 * DAY

#: A callback asked for at a time ("after six tonight") may ring from that time until
#: this much later; one asked for on a day ("call me Monday") on that whole day (D4
#: still keeps it inside the calling hours).
CALLBACK_WINDOW = dt.timedelta(hours=2)

#: The parties whose conversation about the debt starts D2's seven days: the
#: consumer and those who stand in their place (1006.6(a)); anyone else hears nothing
#: about the debt.
CONVERSATION_PARTIES = frozenset({"right_party", "consumer_equivalent"})

#: The party who may consent to a callback: only the consumer, directly.
CONSENTING_PARTY = "right_party"
#: The party the policy names someone who is not the consumer (C3): contacted once.
THIRD_PARTY = "third_party"


class Signal(enum.StrEnum):
    """What the consumer said on a call that the gate must honour before the next attempt."""

    #: "Stop calling me": the telephone medium is opted out, every number (D7).
    STOP_CALLING = "stop_calling"
    #: A (written) request to cease all communication on the debt (D7).
    CEASE = "cease"
    #: "Talk to my lawyer" (D6).
    ATTORNEY = "attorney"
    #: The person answering is not the consumer, and the number is not theirs (D9).
    WRONG_NUMBER = "wrong_number"
    BANKRUPTCY = "bankruptcy"
    DECEASED = "deceased"
    #: The consumer disputes the debt: suppressed until verified (D9).
    DISPUTE = "dispute"
    #: "Don't call me between ... and ..." (D5).
    INCONVENIENT_TIME = "inconvenient_time"
    #: "My employer doesn't allow calls at work" (D5).
    WORKPLACE_FORBIDS_CALLS = "workplace_forbids_calls"


#: The signals' values, as the policy's ``signal`` events name them.
GATE_SIGNALS = frozenset(s.value for s in Signal)


# -- what happened on the line -----------------------------------------------


def counts_towards_caps(outcome: AttemptOutcome | str) -> bool:
    """Whether an attempt with this outcome counts (D3); an unknown outcome is refused."""
    return AttemptOutcome(outcome) not in NOT_COUNTED


def record_outcome(
    engine: Engine,
    attempt_id: int,
    outcome: AttemptOutcome | str,
    call_id: str | None = None,
    *,
    reached: bool = True,
) -> bool:
    """Set a reserved attempt's outcome, and whether it counts (D3); return that.

    A consented callback's attempt never counts towards D1, whatever its outcome; nor
    does a call that never ``reached`` the trunk (it answered nothing, not even 100
    Trying): no phone rang.
    """
    outcome = AttemptOutcome(outcome)
    values: dict[str, object] = {
        "outcome": outcome.value,
        "counts": case(
            (ContactAttempt.consented.is_(True), false()),
            else_=literal(reached and counts_towards_caps(outcome)),
        ),
    }
    if call_id is not None:
        values["call_id"] = call_id
    # One UPDATE, not a read then a write: SQLite refuses a write at once (no wait)
    # when another transaction committed between a read and it.
    with engine.begin() as connection:
        rows = connection.execute(
            update(ContactAttempt)
            .where(ContactAttempt.id == attempt_id)
            .values(**values)
            .returning(ContactAttempt.counts)
        ).all()
    if len(rows) != 1:
        raise LookupError(f"there is no contact attempt {attempt_id}")
    counts = bool(rows[0][0])
    logger.info(
        "attempt %s: %s (%s)", attempt_id, outcome.value, "counts" if counts else "not counted"
    )
    return counts


def record_conversation(engine: Engine, debt_id: int, at: dt.datetime) -> None:
    """A telephone conversation about the debt took place at ``at`` (D2's day D).

    Inbound conversations count as much as outbound ones. One held after the
    conversation in which the consumer asked for a callback uses that callback up.
    """
    _check_aware(at)
    with Session(engine) as session, session.begin():
        debt = _locked_debt(session, debt_id)
        if debt.last_conversation_at is None or debt.last_conversation_at < at:
            debt.last_conversation_at = at
    logger.info("debt %s: conversation at %s", debt_id, in_utc(at))


def record_third_party(engine: Engine, debt_id: int, number: str, at: dt.datetime) -> None:
    """Someone other than the consumer answered ``number`` at ``at``: a third party is
    contacted once (C3), so the gate dials it no more (``contact_rules``). The first time
    is kept."""
    _check_aware(at)
    e164, _parsed, _problem = parse_number(number)
    with Session(engine) as session, session.begin():
        debt = _locked_debt(session, debt_id)
        phone = next((p for p in debt.consumer.phones if p.number == e164), None)
        if phone is None:
            raise LookupError(f"{masked(number)} is not a number of debt {debt_id}'s consumer")
        if phone.third_party_reached_at is None:
            phone.third_party_reached_at = at
    logger.info("debt %s: a third party answered %s at %s", debt_id, masked(number), in_utc(at))


def record_dispute_verified(engine: Engine, debt_id: int, at: dt.datetime) -> bool:
    """Verification of the disputed debt went to the consumer (1006.38(d)(2)): collection
    may resume, so D9 no longer suppresses it. Returns whether it was disputed. A later
    dispute on a call suppresses it again."""
    _check_aware(at)
    with Session(engine) as session, session.begin():
        debt = _locked_debt(session, debt_id)
        disputed = debt.disputed
        debt.disputed = False
    logger.info("debt %s: verification of the dispute sent at %s", debt_id, in_utc(at))
    return disputed


def apply_signal(
    engine: Engine,
    debt_id: int,
    signal: Signal | str,
    *,
    at: dt.datetime,
    number: str | None = None,
    attorney_name: str | None = None,
    attorney_number: str | None = None,
    window: InconvenientWindow | Mapping[str, Any] | None = None,
    partial: bool = False,
    party: str | None = None,
) -> None:
    """Record what the consumer said on a call so that the next check honours it.

    ``number`` is needed for ``wrong_number``; ``attorney_name`` and
    ``attorney_number`` go with ``attorney`` (optional; kept together in the
    consumer's attorney text, a name or number already known is not lost);
    ``window`` with ``inconvenient_time``; ``partial`` with ``dispute`` (a
    dispute of part of the debt suppresses all of it until verified: the gate
    cannot call about half a debt). ``party`` is who said it, for the log: a
    signal is honoured whoever gave it (rule C8), since each only stops calls.
    Bankruptcy and death concern the person, so they suppress every debt of
    the consumer; a dispute and a cease request concern this debt.
    """
    signal = Signal(signal)
    _check_aware(at)
    if signal is Signal.INCONVENIENT_TIME:
        if window is None:
            raise ValueError("inconvenient_time needs the window the consumer named")
        if not isinstance(window, InconvenientWindow):
            window = InconvenientWindow.from_json(window)
    if signal is Signal.WRONG_NUMBER and number is None:
        raise ValueError("wrong_number needs the number that was wrong")

    with Session(engine) as session, session.begin():
        debt = _locked_debt(session, debt_id)
        consumer = debt.consumer
        if signal is Signal.STOP_CALLING:
            for phone in consumer.phones:
                if phone.opted_out_at is None:
                    phone.opted_out_at = at
        elif signal is Signal.CEASE:
            debt.cease_requested = True
        elif signal is Signal.ATTORNEY:
            consumer.attorney_name = _attorney(
                consumer.attorney_name, attorney_name, attorney_number
            )
        elif signal is Signal.WRONG_NUMBER:
            assert number is not None
            e164, _parsed, _problem = parse_number(number)
            wrong = next((p for p in consumer.phones if p.number == e164), None)
            if wrong is None:
                raise LookupError(f"{masked(number)} is not a number of debt {debt_id}'s consumer")
            wrong.wrong_number = True
        elif signal in (Signal.BANKRUPTCY, Signal.DECEASED):
            for each in consumer.debts:
                if signal is Signal.BANKRUPTCY:
                    each.bankrupt = True
                else:
                    each.deceased = True
        elif signal is Signal.DISPUTE:
            debt.disputed = True
        elif signal is Signal.INCONVENIENT_TIME:
            assert isinstance(window, InconvenientWindow)
            entry = window.to_json()
            if entry not in (consumer.inconvenient or []):
                # A new list, so the JSON column sees the change.
                consumer.inconvenient = [*(consumer.inconvenient or []), entry]
        elif signal is Signal.WORKPLACE_FORBIDS_CALLS:
            consumer.workplace_forbids_calls = True
    logger.info(
        "debt %s: signal %s%s at %s%s%s",
        debt_id,
        signal.value,
        " (partial)" if signal is Signal.DISPUTE and partial else "",
        in_utc(at),
        f" ({masked(number)})" if number else "",
        f", said by the {party}" if party else "",
    )


#: Width of ``Consumer.attorney_name``.
_ATTORNEY_WIDTH = 200


def _attorney(known: str | None, name: str | None, number: str | None) -> str:
    """The attorney text after a call named one: what was said, else what was known.

    The number, when given, is kept after the name (an operator writes to the
    attorney, rule C8); a call that only says "talk to my lawyer" does not
    overwrite a name already on file.
    """
    name = (name or "").strip()
    number = (number or "").strip()
    if not name and not number and known:
        return known
    text = name or ATTORNEY_NAME_UNKNOWN
    if number:
        text = f"{text}, tel. {number}"
    return text[:_ATTORNEY_WIDTH]


def record_callback_consent(
    engine: Engine,
    debt_id: int,
    day: dt.date,
    time: dt.time | None,
    *,
    at: dt.datetime,
    conversation_at: dt.datetime | None = None,
) -> tuple[dt.datetime, dt.datetime] | None:
    """The consumer asked to be called on ``day`` (at ``time``, their local time): store
    the window in which that call is consented (1006.14(b)(3)); return it (UTC).

    The window runs from ``time`` for ``CALLBACK_WINDOW`` (the whole of ``day``
    when no time was named) and ends no later than 7 days after ``at``, the
    moment of consent. ``conversation_at`` is when the conversation it was given
    in was recorded (``record_conversation``; default ``at``): a conversation
    after it uses the callback up. Where the consumer's zone is unknown, or the
    window lies wholly past the 7 days, nothing is stored and None returned: the
    call is then an ordinary one, which D1 and D2 govern (the gate fails closed).
    A new consent replaces an earlier one.
    """
    _check_aware(at)
    given = max(at, conversation_at or at)
    _check_aware(given)
    with Session(engine) as session, session.begin():
        debt = _locked_debt(session, debt_id)
        name = consumer_time_zone(debt.consumer)
        if name is None:
            logger.warning(
                "debt %s: callback asked for, but the consumer's zone is unknown", debt_id
            )
            return None
        zone = ZoneInfo(name)
        start = dt.datetime.combine(day, time or dt.time(0), tzinfo=zone)
        end = (
            start + CALLBACK_WINDOW
            if time is not None
            else dt.datetime.combine(day + DAY, dt.time(0), tzinfo=zone)
        )
        start, end = start.astimezone(dt.UTC), min(end.astimezone(dt.UTC), at + CONSENT_LASTS)
        if end <= start:
            logger.info(
                "debt %s: callback asked for %s%s, past the consent's 7 days: an ordinary call",
                debt_id,
                day,
                f" {time:%H:%M}" if time else "",
            )
            return None
        debt.callback_from, debt.callback_until = start, end
        debt.callback_consented_at = given
    logger.info(
        "debt %s: consented callback %s to %s (asked at %s)",
        debt_id,
        in_utc(start),
        in_utc(end),
        in_utc(at),
    )
    return start, end


class GateEvent(Protocol):
    """What ``record_call`` reads of a policy event (``agent.conversation.replies.PolicyEvent``)."""

    @property
    def kind(self) -> str: ...

    @property
    def detail(self) -> Mapping[str, Any]: ...

    @property
    def at(self) -> dt.datetime: ...


def record_call(
    engine: Engine,
    debt_id: int,
    events: Iterable[GateEvent],
    *,
    party: str | None,
    number: str | None,
    ended_at: dt.datetime,
) -> list[str]:
    """Feed a finished call about ``debt_id`` to the gate; return what could not be applied.

    - every ``signal`` event of a gate signal, whoever said it (rule C8: a
      signal given before verification counts; each only stops calls), with its
      details: the inconvenient window, the attorney's name and number, whether a
      dispute is partial. An inconvenient time whose window cannot be read is
      stored as it came, and the gate then denies every call until a person has
      read it (D5 fails closed), rather than lose it;
    - a conversation, when the call reached the consumer (or one who stands in
      their place, ``CONVERSATION_PARTIES``): D2 starts at ``ended_at``;
    - a third party reached on ``number``: it is not dialled again (C3);
    - a ``callback_requested`` event the consumer (the right party only) consented
      to: its window (``record_callback_consent``), after the conversation, so that
      the conversation it was asked in does not use it up.

    Each is applied on its own: one that fails is logged and listed, the rest go on.
    """
    problems: list[str] = []

    def attempt(what: str, apply: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        try:
            apply(*args, **kwargs)
        except Exception as exc:
            logger.exception("debt %s: could not record %s", debt_id, what)
            problems.append(f"{what}: {type(exc).__name__}: {exc}")

    events = list(events)
    for event in events:
        if event.kind != "signal":
            continue
        detail = event.detail
        kind = str(detail.get("kind"))
        if kind not in GATE_SIGNALS:
            continue
        if kind == Signal.WRONG_NUMBER and not number:
            problems.append("wrong_number: the call has no number to mark")
            continue
        attempt(
            kind,
            _apply_detailed,
            engine,
            debt_id,
            kind,
            detail,
            at=event.at,
            number=number,
            party=party,
        )
    if party in CONVERSATION_PARTIES:
        attempt("conversation", record_conversation, engine, debt_id, ended_at)
    if party == THIRD_PARTY and number:
        attempt("third party", record_third_party, engine, debt_id, number, ended_at)
    for event in events:
        if event.kind != "callback_requested" or event.detail.get("consented") is not True:
            continue
        if party != CONSENTING_PARTY:
            logger.info("debt %s: a callback asked for by the %s is no consent", debt_id, party)
            continue
        attempt("callback consent", _consent, engine, debt_id, event, ended_at)
    return problems


def _apply_detailed(
    engine: Engine,
    debt_id: int,
    kind: str,
    detail: Mapping[str, Any],
    *,
    at: dt.datetime,
    number: str | None,
    party: str | None,
) -> None:
    """One signal event, with the details its kind carries."""
    if kind == Signal.INCONVENIENT_TIME:
        raw = detail.get("window")
        try:
            window = InconvenientWindow.from_json(raw if isinstance(raw, Mapping) else {})
        except ValueError:
            _keep_unreadable_window(engine, debt_id, raw, at)
            raise
        apply_signal(engine, debt_id, kind, at=at, window=window, party=party)
        return
    apply_signal(
        engine,
        debt_id,
        kind,
        at=at,
        number=number,
        attorney_name=_text(detail.get("attorney_name")),
        attorney_number=_text(detail.get("attorney_number")),
        partial=detail.get("partial") is True,
        party=party,
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _keep_unreadable_window(engine: Engine, debt_id: int, raw: object, at: dt.datetime) -> None:
    """Store an inconvenient time the gate cannot read: D5 denies until a person fixes it."""
    entry = {
        "unreadable": raw if isinstance(raw, (dict, str)) else repr(raw),
        "said_at": in_utc(at),
    }
    with Session(engine) as session, session.begin():
        consumer = _locked_debt(session, debt_id).consumer
        consumer.inconvenient = [*(consumer.inconvenient or []), entry]


def _consent(engine: Engine, debt_id: int, event: GateEvent, ended_at: dt.datetime) -> None:
    detail = event.detail
    day = dt.date.fromisoformat(str(detail["date"]))
    time = detail.get("time")
    asked = None if time is None else parse_clock(time, "time")
    record_callback_consent(engine, debt_id, day, asked, at=event.at, conversation_at=ended_at)


def _locked_debt(session: Session, debt_id: int) -> Debt:
    """The debt, read only after this transaction holds its lock (see ``lock_debt``):
    on SQLite a read before the first write can find its snapshot stale at the write
    and fail at once ("database is locked"), when another writer committed between."""
    lock_debt(session, debt_id)
    debt = session.get(Debt, debt_id, with_for_update=True)
    if debt is None:
        raise LookupError(f"there is no debt {debt_id}")
    return debt


def _check_aware(at: dt.datetime) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"naive datetime {at!r}: give the time with its zone")
