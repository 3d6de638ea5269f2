"""The pre-dial gate's rule pack: rules D1-D10 of docs/compliance.md as functions of facts.

Each rule reads what the database knows about the debt, the consumer, the number and
the attempts already made (``Facts``, loaded once per decision by ``load_facts``) and the
time, and returns a ``Denial`` or None; ``RULES`` is their fixed order (suppressions and
consent before counts and hours). Apart from the gate (``agent.campaigns.predial``),
which decides and records, so that the rules read as data and can be read alone: the
contact caps are a table (``CONTACT_CAPS``), the time zones the consumer may be in are
worked out once, and a denial says when it lifts if time alone lifts it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import phonenumbers
from phonenumbers import timezone as phone_timezone
from sqlalchemy import and_, or_, select
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
        return cls(
            weekday, parse_clock(raw.get("start"), "start"), parse_clock(raw.get("end"), "end")
        )

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


def parse_clock(value: object, name: str) -> dt.time:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be 'HH:MM', got {value!r}")
    try:
        return dt.datetime.strptime(value, "%H:%M").time()
    except ValueError:
        raise ValueError(f"{name} must be 'HH:MM', got {value!r}") from None


# -- what the rules read -----------------------------------------------------


@dataclass(frozen=True)
class Zone:
    """A time zone the consumer may be in, and why we think so."""

    name: str
    info: ZoneInfo
    source: str


@dataclass(frozen=True)
class PastAttempt:
    at: dt.datetime
    #: The kind of number it went to; None when the phone row is gone.
    kind: str | None
    #: Placed as a consented callback: counted only by caps without the exception (D8).
    consented: bool = False


@dataclass(frozen=True)
class Facts:
    """Everything the rules read, loaded once per decision."""

    debt: Debt
    consumer: Consumer
    #: The number asked about, E.164 when it parses.
    number: str
    #: The consumer's phone row for it; None: not a number of this consumer.
    phone: Phone | None
    number_problem: str | None
    zones: tuple[Zone, ...]
    zone_problem: str | None
    windows: tuple[InconvenientWindow, ...]
    window_problem: str | None
    caps: tuple[ContactCap, ...]
    #: Counted attempts on the debt recent enough for the longest cap window.
    attempts: tuple[PastAttempt, ...]


@dataclass(frozen=True)
class Denial:
    rule: str
    reason: str
    #: When this rule alone stops denying, if it lifts with time (caps, D2, hours).
    until: dt.datetime | None = None


Rule = Callable[[Facts, dt.datetime], "Denial | None"]


def load_facts(
    session: Session, debt_id: int, number: str, at: dt.datetime, caps: Iterable[ContactCap]
) -> Facts | None:
    """What the rules read about a call to ``number`` about debt ``debt_id`` at ``at``;
    None when there is no such debt."""
    debt = session.get(Debt, debt_id)
    if debt is None:
        return None
    consumer = debt.consumer

    number, parsed, number_problem = parse_number(number)
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
            ContactAttempt.at > at - longest,
        )
        .order_by(ContactAttempt.at)
    ).all()
    return Facts(
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
        attempts=tuple(PastAttempt(at, kind, bool(consented)) for at, kind, consented in rows),
    )


def parse_number(number: str) -> tuple[str, phonenumbers.PhoneNumber | None, str | None]:
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
    parsed = parse_number(number)[1] if number else None
    zones, problem = _zones(consumer, parsed)
    if problem is None:
        return zones[0].name
    return zones[0].name if len(zones) == 1 else None


def _zones(
    consumer: Consumer, parsed: phonenumbers.PhoneNumber | None
) -> tuple[tuple[Zone, ...], str | None]:
    """Every zone the consumer may be in: the address's, and the number's area code's (D4).

    A non-geographic number (toll-free, say) says nothing about where its
    owner is and adds no zone.
    """
    zones: list[Zone] = []
    problem = None
    try:
        zones.append(Zone(consumer.time_zone, ZoneInfo(consumer.time_zone), "the address"))
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
            zones.append(Zone(name, ZoneInfo(name), source))
    return tuple(zones), problem


# -- the rules ---------------------------------------------------------------


def _d9_suppressed(facts: Facts, at: dt.datetime) -> Denial | None:
    """D9: wrong numbers, bankrupt, deceased and disputed accounts are not called."""
    if facts.phone is not None and facts.phone.wrong_number:
        return Denial("D9", f"{masked(facts.number)} was reported as a wrong number")
    debt = facts.debt
    for flag, reason in (
        (debt.bankrupt, "the consumer is in bankruptcy"),
        (debt.deceased, "the consumer is deceased"),
        (debt.disputed, "the debt is disputed and verification is pending"),
    ):
        if flag:
            return Denial("D9", f"{reason}: the account is suppressed")
    return None


def _d7_cease_or_stop(facts: Facts, at: dt.datetime) -> Denial | None:
    """D7: a cease request stops everything on the debt; "stop calling" stops every number."""
    if facts.debt.cease_requested:
        return Denial("D7", "the consumer asked to cease all communication on this debt")
    opted_out = [p.opted_out_at for p in facts.consumer.phones if p.opted_out_at is not None]
    if opted_out:
        when = min(opted_out)
        return Denial(
            "D7",
            f"the consumer said to stop calling on {when:%Y-%m-%d}: "
            "no phone calls to any of their numbers",
        )
    return None


def _d6_attorney(facts: Facts, at: dt.datetime) -> Denial | None:
    """D6: a consumer known to have an attorney is not contacted."""
    name = facts.consumer.attorney_name
    if name:
        who = "" if name == ATTORNEY_NAME_UNKNOWN else f" ({name})"
        return Denial("D6", f"the consumer is represented by an attorney{who}")
    return None


def _d10_consent(facts: Facts, at: dt.datetime) -> Denial | None:
    """D10: an AI-voice call needs prior express consent for the number; skip tracing is none."""
    phone = facts.phone
    if facts.number_problem is not None or phone is None:
        return Denial("D10", f"no prior express consent on file: {facts.number_problem}")
    source = phone.consent_source
    if source is None:
        return Denial("D10", f"no prior express consent on file for {masked(facts.number)}")
    if source == ConsentSource.SKIP_TRACED:
        return Denial(
            "D10", f"{masked(facts.number)} was skip-traced: no consent for an AI-voice call"
        )
    if source not in CONSENTING_SOURCES:
        return Denial("D10", f"consent source {source!r} is not prior express consent")
    if phone.consent_date is None:
        return Denial("D10", f"the consent for {masked(facts.number)} has no date on file")
    # A day's slack: the consent date is local to somewhere, the call time is UTC.
    if phone.consent_date > at.astimezone(dt.UTC).date() + DAY:
        return Denial("D10", f"the consent on file is dated {phone.consent_date}, after the call")
    return None


def consented_callback(facts: Facts, at: dt.datetime) -> bool:
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


def _callback_opens(facts: Facts, at: dt.datetime) -> dt.datetime | None:
    """When a consented callback window still to come opens, if one does."""
    start = facts.debt.callback_from
    if start is None or start <= at or not consented_callback(facts, start):
        return None
    return start


def _sooner(until: dt.datetime | None, opens: dt.datetime | None) -> dt.datetime | None:
    """The earlier of a rule's own lift and a consented callback's opening."""
    if until is None or opens is None:
        return until or opens
    return min(until, opens)


def _d2_after_conversation(facts: Facts, at: dt.datetime) -> Denial | None:
    """D2: after a conversation on day D (day 1), no call before day D+7, local time.

    With more than one plausible zone the latest reading of "day D+7" wins. The
    callback the consumer asked for is not barred (1006.14(b)(3)).
    """
    last = facts.debt.last_conversation_at
    if last is None or consented_callback(facts, at):
        return None
    if facts.zone_problem is not None:
        return Denial("D2", f"cannot count days since the last conversation: {facts.zone_problem}")
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
        callback = f"; the callback asked for opens {in_utc(opens)}" if opens else ""
        return Denial(
            "D2",
            f"a conversation about this debt on {day} ({zone.name}) bars calls before "
            f"{day + 7 * DAY} 00:00 local (day D is day 1){callback}",
            _sooner(until, opens),
        )
    return None


def _capped(rule: str) -> Rule:
    """The count rule ``rule`` (D1, or D8 for the state caps) over the rule pack's caps."""

    def denial(facts: Facts, at: dt.datetime) -> Denial | None:
        consented = consented_callback(facts, at)
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
            return Denial(
                rule,
                f"{used} counted attempts {cap.scope} in the {span} {in_utc(at)} "
                f"(limit {cap.limit}, {cap.source})",
                _sooner(_cap_lifts(times, at, cap), opens),
            )
        return None

    denial.__name__ = f"_{rule.lower()}_caps"
    denial.__doc__ = f"{rule}: the contact caps of the rule pack marked {rule}."
    return denial


def _counted(facts: Facts, cap: ContactCap) -> list[dt.datetime]:
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


def _d4_calling_hours(facts: Facts, at: dt.datetime) -> Denial | None:
    """D4: 08:00-21:00 local, in every zone the consumer may be in."""
    if facts.zone_problem is not None:
        return Denial("D4", f"cannot tell the consumer's local time: {facts.zone_problem}")
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
    return Denial(
        "D4",
        f"it is {local:%H:%M} in {outside.name} ({outside.source}), outside "
        f"{CALLING_HOURS[0]:%H:%M}-{CALLING_HOURS[1]:%H:%M}; zones checked: {checked}",
        until,
    )


def _outside_hours(zones: Iterable[Zone], at: dt.datetime) -> Zone | None:
    start, end = CALLING_HOURS
    for zone in zones:
        if not start <= at.astimezone(zone.info).time() < end:
            return zone
    return None


def _d5_inconvenient(facts: Facts, at: dt.datetime) -> Denial | None:
    """D5: not at a time the consumer said is inconvenient, not at a workplace that forbids it."""
    if (
        facts.phone is not None
        and facts.phone.kind == PhoneKind.WORK
        and facts.consumer.workplace_forbids_calls
    ):
        return Denial("D5", "the consumer's workplace forbids calls: work number suppressed")
    if facts.window_problem is not None:
        return Denial("D5", facts.window_problem)
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
    return Denial(
        "D5",
        f"the consumer said {window} is inconvenient; it is {local:%a %H:%M} in {zone.name}",
        until,
    )


def _inconvenient(facts: Facts, at: dt.datetime) -> tuple[InconvenientWindow, Zone] | None:
    for zone in facts.zones:
        local = at.astimezone(zone.info)
        for window in facts.windows:
            if window.covers(local):
                return window, zone
    return None


def _local_days(at: dt.datetime, zone: Zone) -> list[dt.date]:
    today = at.astimezone(zone.info).date()
    return [today + offset * DAY for offset in range(-1, 9)]


def _earliest(
    candidates: Iterable[dt.datetime], after: dt.datetime, ok: Callable[[dt.datetime], bool]
) -> dt.datetime | None:
    for candidate in sorted(c for c in candidates if c > after):
        if ok(candidate):
            return candidate
    return None


def _c3_third_party_once(facts: Facts, at: dt.datetime) -> Denial | None:
    """C3: a third party is contacted once. Who answers a number cannot be known before
    dialling, so a number a third party answered is not dialled again: a second call
    could reach them again."""
    reached = facts.phone.third_party_reached_at if facts.phone is not None else None
    if reached is None:
        return None
    return Denial(
        "C3",
        f"a third party answered {masked(facts.number)} at {in_utc(reached)}, "
        "and a third party is contacted once",
    )


#: The fixed order: suppressions and consent first, then counts, then hours.
RULES: tuple[Rule, ...] = (
    _d9_suppressed,
    _c3_third_party_once,
    _d7_cease_or_stop,
    _d6_attorney,
    _d10_consent,
    _d2_after_conversation,
    _capped("D1"),
    _capped("D8"),
    _d4_calling_hours,
    _d5_inconvenient,
)


def find_denials(facts: Facts, at: dt.datetime) -> list[Denial]:
    return [denial for rule in RULES if (denial := rule(facts, at)) is not None]


def next_allowed(facts: Facts, at: dt.datetime, denials: list[Denial]) -> dt.datetime | None:
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
        denials = find_denials(facts, when)
    return when


def allowed_because(facts: Facts, at: dt.datetime) -> str:
    """The audit summary of an allowed call: cap usage, local times, consent."""
    parts = []
    consented = consented_callback(facts, at)
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


def in_utc(at: dt.datetime) -> str:
    return f"{at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"


def _days(window: dt.timedelta) -> str:
    return f"{window.days} days"


def masked(number: str) -> str:
    """A number fit for logs and reasons: the last four digits only."""
    digits = "".join(ch for ch in number if ch.isdigit())
    return f"...{digits[-4:]}" if len(digits) >= 4 else "...."
