"""The pre-dial gate: may this number be called about this debt, at this time?

Every outbound attempt asks here first (rules D1-D10 of docs/compliance.md).
The rules are code, not prompts: each is a function of what the database knows
about the debt, the consumer, the number and the attempts already made, and of
the time. ``check`` evaluates all of them in a fixed order (suppressions and
consent before counts and hours) and returns the first denial; anything the
gate cannot establish (an unknown number, an unreadable time zone, an error)
is a denial too: the gate fails closed, and every decision is logged.

``reserve_attempt`` is what a dialer calls: it checks and records the attempt
in one transaction that holds the debt, so two dialers cannot both take the
last slot. ``record_outcome``, ``record_conversation``, ``apply_signal`` and
``record_callback_consent`` feed back what happened on the line (D2, D3, D5,
the consumer's requests, rule C8/C12), so the next check sees it;
``record_call`` does all of that for a finished call from its policy events.
A callback the consumer asked for is a consented call (1006.14(b)(3)): inside
its window it neither counts towards D1 nor is barred by D2, and every other
rule still holds.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import phonenumbers
from phonenumbers import timezone as phone_timezone
from sqlalchemy import Engine, and_, case, false, func, literal, or_, select, update
from sqlalchemy.orm import Session

from agent.store.tables import (
    AttemptOutcome,
    ConsentSource,
    Consumer,
    ContactAttempt,
    Debt,
    Phone,
    PhoneKind,
    TenantType,
)

logger = logging.getLogger(__name__)

DAY = dt.timedelta(days=1)

#: Calling hours in the consumer's local time (D4): from 08:00, and a call
#: placed at 21:00:00 would already ring after 21:00, so the window is
#: half-open.
CALLING_HOURS = (dt.time(8, 0), dt.time(21, 0))

#: Consent sources that are prior express consent for an AI-voice call (D10).
CONSENTING_SOURCES = frozenset({ConsentSource.CREDITOR_PROVIDED, ConsentSource.CONSUMER_PROVIDED})

#: Outcomes that do not count towards the caps (D3, 1006.14(b)(3)).
NOT_COUNTED = frozenset(
    {
        AttemptOutcome.BUSY,
        AttemptOutcome.NOT_IN_SERVICE,
        AttemptOutcome.ATTORNEY,
        AttemptOutcome.CONSENTED_CALLBACK,
    }
)

#: The attorney's name when the consumer did not give it (D6 needs only that one exists).
ATTORNEY_NAME_UNKNOWN = "(name not given)"

#: How far ahead ``next_allowed_at`` looks before calling the time unknowable.
HORIZON = dt.timedelta(days=60)

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


# -- the rule pack: contact caps ---------------------------------------------


@dataclass(frozen=True)
class ContactCap:
    """At most ``limit`` counted attempts per debt in any ``window``: one row of the rule pack.

    A cap applies to debts of consumers in ``states`` (None: everywhere)
    collected by ``tenant_types``, and to calls to numbers of ``phone_kinds``
    (None: every number); it counts the attempts made to numbers of those
    kinds (an attempt whose number is unknown counts everywhere).
    """

    rule: str
    source: str
    limit: int
    window: dt.timedelta
    states: frozenset[str] | None = None
    phone_kinds: frozenset[str] | None = None
    tenant_types: frozenset[str] = frozenset(TenantType)
    #: Calls inside a consented callback window neither count nor are capped (Reg F
    #: 1006.14(b)(3)). The state caps carry no such exception: they keep counting them.
    consent_exempt: bool = False

    def applies_to(self, state: str, tenant_type: str, phone_kind: str | None) -> bool:
        """Whether this cap governs a call to a ``phone_kind`` number about such a debt."""
        return (
            (self.states is None or state in self.states)
            and tenant_type in self.tenant_types
            and (self.phone_kinds is None or phone_kind is None or phone_kind in self.phone_kinds)
        )

    def counts(self, phone_kind: str | None) -> bool:
        """Whether an earlier attempt to a ``phone_kind`` number counts against this cap."""
        return self.phone_kinds is None or phone_kind is None or phone_kind in self.phone_kinds

    @property
    def scope(self) -> str:
        if self.phone_kinds is None:
            return "on this debt"
        return f"to {' and '.join(sorted(self.phone_kinds))} numbers on this debt"


#: The federal cap and the stricter state caps (D1, D8). Reg F binds collectors
#: and debt buyers; the pack applies it to first-party creditors too, as the
#: safe default a tenant's counsel may narrow. Massachusetts binds creditors
#: (940 CMR 7.00) and collectors (209 CMR 18.00) alike; Washington's RCW 19.16
#: binds collection agencies.
CONTACT_CAPS: tuple[ContactCap, ...] = (
    ContactCap("D1", "Reg F 1006.14(b)(2)(i)(A)", 7, 7 * DAY, consent_exempt=True),
    ContactCap(
        "D8",
        "940 CMR 7.04, 209 CMR 18.16",
        2,
        7 * DAY,
        states=frozenset({"MA"}),
        phone_kinds=frozenset({PhoneKind.PERSONAL}),
    ),
    ContactCap(
        "D8",
        "940 CMR 7.04, 209 CMR 18.16",
        2,
        30 * DAY,
        states=frozenset({"MA"}),
        phone_kinds=frozenset({PhoneKind.WORK, PhoneKind.OTHER}),
    ),
    ContactCap(
        "D8",
        "RCW 19.16.250",
        3,
        7 * DAY,
        states=frozenset({"WA"}),
        tenant_types=frozenset({TenantType.THIRD_PARTY_COLLECTOR, TenantType.DEBT_BUYER}),
    ),
)


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


@dataclass(frozen=True)
class InconvenientWindow:
    """A time the consumer said is inconvenient, in their local time (D5).

    ``weekday`` is Monday 0 .. Sunday 6, or None for every day. A window whose
    end is before its start runs past midnight into the next day; one whose
    start equals its end is the whole day.
    """

    weekday: int | None
    start: dt.time
    end: dt.time

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> InconvenientWindow:
        """Parse ``{"weekday": None | 0-6, "start": "HH:MM", "end": "HH:MM"}``."""
        weekday = raw.get("weekday")
        if weekday is not None and (
            isinstance(weekday, bool) or not isinstance(weekday, int) or not 0 <= weekday <= 6
        ):
            raise ValueError(f"weekday must be null or 0-6 (Monday 0), got {weekday!r}")
        return cls(weekday, _clock(raw.get("start"), "start"), _clock(raw.get("end"), "end"))

    def to_json(self) -> dict[str, Any]:
        return {
            "weekday": self.weekday,
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
        }

    def covers(self, local: dt.datetime) -> bool:
        """Whether the local time ``local`` falls inside the window."""
        time, weekday = local.time(), local.weekday()
        on_day = self.weekday is None or self.weekday == weekday
        if self.start == self.end:
            return on_day
        if self.start < self.end:
            return on_day and self.start <= time < self.end
        on_day_before = self.weekday is None or self.weekday == (weekday - 1) % 7
        return (on_day and time >= self.start) or (on_day_before and time < self.end)

    def __str__(self) -> str:
        day = "every day" if self.weekday is None else _WEEKDAYS[self.weekday]
        return f"{day} {self.start:%H:%M}-{self.end:%H:%M}"


_WEEKDAYS = ("Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays", "Sundays")


def _clock(value: object, name: str) -> dt.time:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be 'HH:MM', got {value!r}")
    try:
        return dt.datetime.strptime(value, "%H:%M").time()
    except ValueError:
        raise ValueError(f"{name} must be 'HH:MM', got {value!r}") from None


# -- what the rules read -----------------------------------------------------


@dataclass(frozen=True)
class _Zone:
    """A time zone the consumer may be in, and why we think so."""

    name: str
    info: ZoneInfo
    source: str


@dataclass(frozen=True)
class _PastAttempt:
    at: dt.datetime
    #: The kind of number it went to; None when the phone row is gone.
    kind: str | None
    #: Placed as a consented callback: counted only by caps without the exception (D8).
    consented: bool = False


@dataclass(frozen=True)
class _Facts:
    """Everything the rules read, loaded once per decision."""

    debt: Debt
    consumer: Consumer
    #: The number asked about, E.164 when it parses.
    number: str
    #: The consumer's phone row for it; None: not a number of this consumer.
    phone: Phone | None
    number_problem: str | None
    zones: tuple[_Zone, ...]
    zone_problem: str | None
    windows: tuple[InconvenientWindow, ...]
    window_problem: str | None
    caps: tuple[ContactCap, ...]
    #: Counted attempts on the debt recent enough for the longest cap window.
    attempts: tuple[_PastAttempt, ...]


@dataclass(frozen=True)
class _Denial:
    rule: str
    reason: str
    #: When this rule alone stops denying, if it lifts with time (caps, D2, hours).
    until: dt.datetime | None = None


_Rule = Callable[[_Facts, dt.datetime], "_Denial | None"]


def _load(session: Session, request: DialRequest, caps: Iterable[ContactCap]) -> _Facts | None:
    debt = session.get(Debt, request.debt_id)
    if debt is None:
        return None
    consumer = debt.consumer

    number, parsed, number_problem = _parse_number(request.number)
    phone = next((p for p in consumer.phones if p.number == number), None)
    if phone is None and number_problem is None:
        number_problem = f"{masked(number)} is not a number of this consumer on file"

    zones, zone_problem = _zones(consumer, parsed)

    windows: list[InconvenientWindow] = []
    window_problem = None
    try:
        windows = [InconvenientWindow.from_json(raw) for raw in consumer.inconvenient or []]
    except (ValueError, AttributeError, TypeError) as exc:
        window_problem = f"an inconvenient-time entry cannot be read ({exc})"

    kind = phone.kind if phone is not None else None
    applicable = tuple(c for c in caps if c.applies_to(consumer.state, debt.tenant_type, kind))
    longest = max((c.window for c in applicable), default=DAY)
    consented_and_counting = and_(
        ContactAttempt.consented.is_(True),
        ContactAttempt.outcome.not_in([outcome.value for outcome in NOT_COUNTED]),
    )
    rows = session.execute(
        select(ContactAttempt.at, Phone.kind, ContactAttempt.consented)
        .outerjoin(Phone, ContactAttempt.phone_id == Phone.id)
        .where(
            ContactAttempt.debt_id == debt.id,
            ContactAttempt.consumer_id == consumer.id,
            or_(ContactAttempt.counts.is_(True), consented_and_counting),
            ContactAttempt.at > request.at - longest,
        )
        .order_by(ContactAttempt.at)
    ).all()
    return _Facts(
        debt=debt,
        consumer=consumer,
        number=number,
        phone=phone,
        number_problem=number_problem,
        zones=zones,
        zone_problem=zone_problem,
        windows=tuple(windows),
        window_problem=window_problem,
        caps=applicable,
        attempts=tuple(_PastAttempt(at, kind, bool(consented)) for at, kind, consented in rows),
    )


def _parse_number(number: str) -> tuple[str, phonenumbers.PhoneNumber | None, str | None]:
    """The number in E.164, parsed, or why it is not a number we can call."""
    try:
        parsed = phonenumbers.parse(number, None)
    except phonenumbers.NumberParseException:
        return number, None, f"{masked(number)} is not an E.164 phone number"
    if not phonenumbers.is_valid_number(parsed):
        return number, None, f"{masked(number)} is not a valid phone number"
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164), parsed, None


def consumer_time_zone(consumer: Consumer, number: str | None = None) -> str | None:
    """The zone the consumer's "tonight" and "Monday" mean: the address's (as D4 reads it).

    When the address's zone is unreadable, the zone of ``number``'s area code if it
    has exactly one; None when neither tells (the policy then resolves no relative
    date, and the gate stores no callback window).
    """
    parsed = _parse_number(number)[1] if number else None
    zones, problem = _zones(consumer, parsed)
    if problem is None:
        return zones[0].name
    return zones[0].name if len(zones) == 1 else None


def _zones(
    consumer: Consumer, parsed: phonenumbers.PhoneNumber | None
) -> tuple[tuple[_Zone, ...], str | None]:
    """Every zone the consumer may be in: the address's, and the number's area code's (D4).

    A non-geographic number (toll-free, say) says nothing about where its
    owner is and adds no zone.
    """
    zones: list[_Zone] = []
    problem = None
    try:
        zones.append(_Zone(consumer.time_zone, ZoneInfo(consumer.time_zone), "the address"))
    except (ZoneInfoNotFoundError, ValueError, OSError):
        problem = f"the address's time zone {consumer.time_zone!r} is unknown"
    if parsed is not None and phonenumbers.is_number_geographical(parsed):
        if parsed.country_code == 1:  # NANP: the first three digits are the area code
            source = f"area code {phonenumbers.national_significant_number(parsed)[:3]}"
        else:
            source = "the number's region"
        for name in phone_timezone.time_zones_for_number(parsed):
            if name == phone_timezone.UNKNOWN_TIMEZONE or any(z.name == name for z in zones):
                continue
            zones.append(_Zone(name, ZoneInfo(name), source))
    return tuple(zones), problem


# -- the rules ---------------------------------------------------------------


def _d9_suppressed(facts: _Facts, at: dt.datetime) -> _Denial | None:
    """D9: wrong numbers, bankrupt, deceased and disputed accounts are not called."""
    if facts.phone is not None and facts.phone.wrong_number:
        return _Denial("D9", f"{masked(facts.number)} was reported as a wrong number")
    debt = facts.debt
    for flag, reason in (
        (debt.bankrupt, "the consumer is in bankruptcy"),
        (debt.deceased, "the consumer is deceased"),
        (debt.disputed, "the debt is disputed and verification is pending"),
    ):
        if flag:
            return _Denial("D9", f"{reason}: the account is suppressed")
    return None


def _d7_cease_or_stop(facts: _Facts, at: dt.datetime) -> _Denial | None:
    """D7: a cease request stops everything on the debt; "stop calling" stops every number."""
    if facts.debt.cease_requested:
        return _Denial("D7", "the consumer asked to cease all communication on this debt")
    opted_out = [p.opted_out_at for p in facts.consumer.phones if p.opted_out_at is not None]
    if opted_out:
        when = min(opted_out)
        return _Denial(
            "D7",
            f"the consumer said to stop calling on {when:%Y-%m-%d}: "
            "no phone calls to any of their numbers",
        )
    return None


def _d6_attorney(facts: _Facts, at: dt.datetime) -> _Denial | None:
    """D6: a consumer known to have an attorney is not contacted."""
    name = facts.consumer.attorney_name
    if name:
        who = "" if name == ATTORNEY_NAME_UNKNOWN else f" ({name})"
        return _Denial("D6", f"the consumer is represented by an attorney{who}")
    return None


def _d10_consent(facts: _Facts, at: dt.datetime) -> _Denial | None:
    """D10: an AI-voice call needs prior express consent for the number; skip tracing is none."""
    phone = facts.phone
    if facts.number_problem is not None or phone is None:
        return _Denial("D10", f"no prior express consent on file: {facts.number_problem}")
    source = phone.consent_source
    if source is None:
        return _Denial("D10", f"no prior express consent on file for {masked(facts.number)}")
    if source == ConsentSource.SKIP_TRACED:
        return _Denial(
            "D10", f"{masked(facts.number)} was skip-traced: no consent for an AI-voice call"
        )
    if source not in CONSENTING_SOURCES:
        return _Denial("D10", f"consent source {source!r} is not prior express consent")
    if phone.consent_date is None:
        return _Denial("D10", f"the consent for {masked(facts.number)} has no date on file")
    # A day's slack: the consent date is local to somewhere, the call time is UTC.
    if phone.consent_date > at.astimezone(dt.UTC).date() + DAY:
        return _Denial("D10", f"the consent on file is dated {phone.consent_date}, after the call")
    return None


def _consented_callback(facts: _Facts, at: dt.datetime) -> bool:
    """Whether a call at ``at`` is the callback the consumer asked for (1006.14(b)(3)).

    It is while ``at`` is inside the window they named and within 7 days of their
    consent, and no conversation has taken place since the one they gave it in
    (the callback, once held, is used up).
    """
    debt = facts.debt
    start, end, given = debt.callback_from, debt.callback_until, debt.callback_consented_at
    if start is None or end is None or given is None or not start <= at < end:
        return False
    last = debt.last_conversation_at
    return last is None or last <= given


def _callback_opens(facts: _Facts, at: dt.datetime) -> dt.datetime | None:
    """When a consented callback window still to come opens, if one does."""
    start = facts.debt.callback_from
    if start is None or start <= at or not _consented_callback(facts, start):
        return None
    return start


def _sooner(until: dt.datetime | None, opens: dt.datetime | None) -> dt.datetime | None:
    """The earlier of a rule's own lift and a consented callback's opening."""
    if until is None or opens is None:
        return until or opens
    return min(until, opens)


def _d2_after_conversation(facts: _Facts, at: dt.datetime) -> _Denial | None:
    """D2: after a conversation on day D (day 1), no call before day D+7, local time.

    With more than one plausible zone the latest reading of "day D+7" wins. The
    callback the consumer asked for is not barred (1006.14(b)(3)).
    """
    last = facts.debt.last_conversation_at
    if last is None or _consented_callback(facts, at):
        return None
    if facts.zone_problem is not None:
        return _Denial("D2", f"cannot count days since the last conversation: {facts.zone_problem}")
    lifts = [
        (
            dt.datetime.combine(
                last.astimezone(z.info).date() + 7 * DAY, dt.time(0), tzinfo=z.info
            ).astimezone(dt.UTC),
            z,
        )
        for z in facts.zones
    ]
    until, zone = max(lifts, key=lambda lift: lift[0])
    if at < until:
        day = last.astimezone(zone.info).date()
        opens = _callback_opens(facts, at)
        callback = f"; the callback asked for opens {_utc(opens)}" if opens else ""
        return _Denial(
            "D2",
            f"a conversation about this debt on {day} ({zone.name}) bars calls before "
            f"{day + 7 * DAY} 00:00 local (day D is day 1){callback}",
            _sooner(until, opens),
        )
    return None


def _capped(rule: str) -> _Rule:
    """The count rule ``rule`` (D1, or D8 for the state caps) over the rule pack's caps."""

    def denial(facts: _Facts, at: dt.datetime) -> _Denial | None:
        consented = _consented_callback(facts, at)
        for cap in facts.caps:
            if cap.rule != rule or (cap.consent_exempt and consented):
                continue
            times = _counted(facts, cap)
            used = _in_window(times, at, cap.window)
            if used < cap.limit:
                continue
            later = sum(1 for t in times if at < t < at + cap.window)
            span = f"{_days(cap.window)} before" if not later else f"{_days(cap.window)} around"
            opens = _callback_opens(facts, at) if cap.consent_exempt else None
            return _Denial(
                rule,
                f"{used} counted attempts {cap.scope} in the {span} {_utc(at)} "
                f"(limit {cap.limit}, {cap.source})",
                _sooner(_cap_lifts(times, at, cap), opens),
            )
        return None

    denial.__name__ = f"_{rule.lower()}_caps"
    denial.__doc__ = f"{rule}: the contact caps of the rule pack marked {rule}."
    return denial


def _counted(facts: _Facts, cap: ContactCap) -> list[dt.datetime]:
    """The times of the earlier attempts ``cap`` counts."""
    return [
        a.at
        for a in facts.attempts
        if cap.counts(a.kind) and not (a.consented and cap.consent_exempt)
    ]


def _in_window(times: Iterable[dt.datetime], at: dt.datetime, window: dt.timedelta) -> int:
    """Attempts closer to ``at`` than ``window``: any window holding ``at`` holds no more.

    Attempts after ``at`` (a dialer whose clock runs ahead) count too, so
    clock skew between dialers can only make the gate stricter.
    """
    return sum(1 for t in times if at - window < t < at + window)


def _cap_lifts(times: list[dt.datetime], at: dt.datetime, cap: ContactCap) -> dt.datetime | None:
    """When enough attempts have left the window for one more, if none are added."""
    for candidate in sorted({t + cap.window for t in times if t + cap.window > at}):
        if _in_window(times, candidate, cap.window) < cap.limit:
            return candidate
    return None


def _d4_calling_hours(facts: _Facts, at: dt.datetime) -> _Denial | None:
    """D4: 08:00-21:00 local, in every zone the consumer may be in."""
    if facts.zone_problem is not None:
        return _Denial("D4", f"cannot tell the consumer's local time: {facts.zone_problem}")
    outside = _outside_hours(facts.zones, at)
    if outside is None:
        return None
    candidates = (
        dt.datetime.combine(day, CALLING_HOURS[0], tzinfo=z.info).astimezone(dt.UTC)
        for z in facts.zones
        for day in _local_days(at, z)
    )
    until = _earliest(candidates, at, lambda t: _outside_hours(facts.zones, t) is None)
    local = at.astimezone(outside.info)
    checked = ", ".join(f"{z.name} ({z.source})" for z in facts.zones)
    return _Denial(
        "D4",
        f"it is {local:%H:%M} in {outside.name} ({outside.source}), outside "
        f"{CALLING_HOURS[0]:%H:%M}-{CALLING_HOURS[1]:%H:%M}; zones checked: {checked}",
        until,
    )


def _outside_hours(zones: Iterable[_Zone], at: dt.datetime) -> _Zone | None:
    start, end = CALLING_HOURS
    for zone in zones:
        if not start <= at.astimezone(zone.info).time() < end:
            return zone
    return None


def _d5_inconvenient(facts: _Facts, at: dt.datetime) -> _Denial | None:
    """D5: not at a time the consumer said is inconvenient, not at a workplace that forbids it."""
    if (
        facts.phone is not None
        and facts.phone.kind == PhoneKind.WORK
        and facts.consumer.workplace_forbids_calls
    ):
        return _Denial("D5", "the consumer's workplace forbids calls: work number suppressed")
    if facts.window_problem is not None:
        return _Denial("D5", facts.window_problem)
    hit = _inconvenient(facts, at)
    if hit is None:
        return None
    window, zone = hit
    candidates = (
        dt.datetime.combine(day, w.end, tzinfo=z.info).astimezone(dt.UTC)
        for z in facts.zones
        for day in _local_days(at, z)
        for w in facts.windows
    )
    until = _earliest(candidates, at, lambda t: _inconvenient(facts, t) is None)
    local = at.astimezone(zone.info)
    return _Denial(
        "D5",
        f"the consumer said {window} is inconvenient; it is {local:%a %H:%M} in {zone.name}",
        until,
    )


def _inconvenient(facts: _Facts, at: dt.datetime) -> tuple[InconvenientWindow, _Zone] | None:
    for zone in facts.zones:
        local = at.astimezone(zone.info)
        for window in facts.windows:
            if window.covers(local):
                return window, zone
    return None


def _local_days(at: dt.datetime, zone: _Zone) -> list[dt.date]:
    today = at.astimezone(zone.info).date()
    return [today + offset * DAY for offset in range(-1, 9)]


def _earliest(
    candidates: Iterable[dt.datetime], after: dt.datetime, ok: Callable[[dt.datetime], bool]
) -> dt.datetime | None:
    for candidate in sorted(c for c in candidates if c > after):
        if ok(candidate):
            return candidate
    return None


#: The fixed order: suppressions and consent first, then counts, then hours.
RULES: tuple[_Rule, ...] = (
    _d9_suppressed,
    _d7_cease_or_stop,
    _d6_attorney,
    _d10_consent,
    _d2_after_conversation,
    _capped("D1"),
    _capped("D8"),
    _d4_calling_hours,
    _d5_inconvenient,
)


def _denials(facts: _Facts, at: dt.datetime) -> list[_Denial]:
    return [denial for rule in RULES if (denial := rule(facts, at)) is not None]


def _next_allowed(facts: _Facts, at: dt.datetime, denials: list[_Denial]) -> dt.datetime | None:
    """The earliest time every rule allows the call, if only time has to pass.

    Waiting out one rule can land in another's denial (the cap lifts at 22:00,
    outside calling hours), so it steps from one lift time to the next.
    """
    when = at
    while denials:
        lifts = [d.until for d in denials]
        if any(lift is None for lift in lifts):
            return None
        when = max(lift for lift in lifts if lift is not None)
        if when > at + HORIZON:
            return None
        denials = _denials(facts, when)
    return when


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
        _lock_debt(session, request.debt_id)
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


def _lock_debt(session: Session, debt_id: int) -> None:
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
) -> tuple[Decision, _Facts | None]:
    try:
        facts = _load(session, request, caps)
        if facts is None:
            return Decision(False, "unknown_debt", f"there is no debt {request.debt_id}"), None
        denials = _denials(facts, request.at)
        if not denials:
            consented = _consented_callback(facts, request.at)
            reason = _allowed_because(facts, request.at)
            return Decision(True, "ok", reason, consented_callback=consented), facts
        first = denials[0]
        later = "; also " + "; ".join(d.rule for d in denials[1:]) if denials[1:] else ""
        return (
            Decision(
                False,
                first.rule,
                first.reason + later,
                _next_allowed(facts, request.at, denials),
            ),
            facts,
        )
    except Exception as exc:
        logger.exception("pre-dial gate failed on debt %s; denying", request.debt_id)
        reason = f"the gate could not evaluate the rules ({type(exc).__name__}: {exc})"
        return Decision(False, "error", reason), None


def _allowed_because(facts: _Facts, at: dt.datetime) -> str:
    """The audit summary of an allowed call: cap usage, local times, consent."""
    parts = []
    consented = _consented_callback(facts, at)
    if consented:
        parts.append("the callback the consumer asked for (1006.14(b)(3)): D2 does not bar it")
    for cap in facts.caps:
        if cap.consent_exempt and consented:
            parts.append(f"{cap.rule} not counted")
            continue
        times = _counted(facts, cap)
        parts.append(
            f"{cap.rule} attempt {_in_window(times, at, cap.window) + 1} of {cap.limit} "
            f"{cap.scope} in {_days(cap.window)}"
        )
    local = ", ".join(f"{at.astimezone(z.info):%H:%M} {z.name} ({z.source})" for z in facts.zones)
    parts.append(f"local time {local}")
    if facts.phone is not None:
        parts.append(f"consent {facts.phone.consent_source} {facts.phone.consent_date}")
    return "allowed: " + "; ".join(parts)


def _log(request: DialRequest, decision: Decision, action: str) -> None:
    logger.info(
        "pre-dial %s: debt %s, %s at %s: %s %s%s",
        action,
        request.debt_id,
        masked(request.number),
        _utc(request.at),
        decision.rule,
        decision.reason,
        f" (next allowed {_utc(decision.next_allowed_at)})" if decision.next_allowed_at else "",
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
    logger.info("debt %s: conversation at %s", debt_id, _utc(at))


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
            e164, _parsed, _problem = _parse_number(number)
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
        _utc(at),
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
        _utc(start),
        _utc(end),
        _utc(at),
    )
    return start, end


class GateEvent(Protocol):
    """What ``record_call`` reads of a policy event (``agent.conversation.policy.PolicyEvent``)."""

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
    entry = {"unreadable": raw if isinstance(raw, (dict, str)) else repr(raw), "said_at": _utc(at)}
    with Session(engine) as session, session.begin():
        consumer = _locked_debt(session, debt_id).consumer
        consumer.inconvenient = [*(consumer.inconvenient or []), entry]


def _consent(engine: Engine, debt_id: int, event: GateEvent, ended_at: dt.datetime) -> None:
    detail = event.detail
    day = dt.date.fromisoformat(str(detail["date"]))
    time = detail.get("time")
    asked = None if time is None else _clock(time, "time")
    record_callback_consent(engine, debt_id, day, asked, at=event.at, conversation_at=ended_at)


def _locked_debt(session: Session, debt_id: int) -> Debt:
    """The debt, read only after this transaction holds its lock (see ``_lock_debt``):
    on SQLite a read before the first write can find its snapshot stale at the write
    and fail at once ("database is locked"), when another writer committed between."""
    _lock_debt(session, debt_id)
    debt = session.get(Debt, debt_id, with_for_update=True)
    if debt is None:
        raise LookupError(f"there is no debt {debt_id}")
    return debt


# -- formatting --------------------------------------------------------------


def _check_aware(at: dt.datetime) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"naive datetime {at!r}: give the time with its zone")


def _utc(at: dt.datetime) -> str:
    return f"{at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"


def _days(window: dt.timedelta) -> str:
    return f"{window.days} days"


def masked(number: str) -> str:
    """A number fit for logs and reasons: the last four digits only."""
    digits = "".join(ch for ch in number if ch.isdigit())
    return f"...{digits[-4:]}" if len(digits) >= 4 else "...."
