"""The store's tables: the portfolio, the contact ledger, and the call record.

Consumers, their phones and debts come from a creditor's portfolio
(``agent.campaigns.portfolio``); contact attempts are what the pre-dial gate
(``agent.campaigns.predial``) counts; calls, their turns, cost lines, events and
promises are the evidence a call leaves behind (docs/compliance.md) and what the
console reads. They must mean the same on SQLite (the embedded default) and
PostgreSQL (production), so only portable types are used, and the schema
changes only through the Alembic migrations in ``migrations/``.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Date,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from agent.ledger.latency import DEFINITION

#: Constraint names spelled out, so migrations can name what they alter and
#: SQLite batch mode can recreate tables faithfully.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones and hands back
    naive values. Storing UTC and attaching it again on read makes both return
    the same aware datetimes, and a naive datetime is refused, not guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: store timezone-aware UTC times")
        value = value.astimezone(dt.UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


class CallStatus(enum.StrEnum):
    """Where a call's record stands."""

    ACTIVE = "active"
    ENDED = "ended"
    #: The worker stopped before the call ended (see ``mark_abandoned_calls``).
    ABNORMAL = "abnormal"


class PhoneKind(enum.StrEnum):
    """Where a number rings; Massachusetts caps personal and other numbers apart (D8)."""

    PERSONAL = "personal"
    WORK = "work"
    OTHER = "other"


class ConsentSource(enum.StrEnum):
    """How the number came to us; only some are prior express consent (D10)."""

    #: Given to the creditor by the consumer, for this debt.
    CREDITOR_PROVIDED = "creditor_provided"
    #: Given to us by the consumer (on a call, in writing).
    CONSUMER_PROVIDED = "consumer_provided"
    #: Found by a skip-trace vendor: no consent, never dialled by the AI voice.
    SKIP_TRACED = "skip_traced"


class StatuteStatus(enum.StrEnum):
    """Whether the debt can still be sued on (C9: never threaten suit on a time-barred one)."""

    WITHIN = "within"
    TIME_BARRED = "time_barred"


class TenantType(enum.StrEnum):
    """Who collects; it picks the rule pack (docs/compliance.md, "Who is on the line")."""

    THIRD_PARTY_COLLECTOR = "third_party_collector"
    DEBT_BUYER = "debt_buyer"
    FIRST_PARTY_CREDITOR = "first_party_creditor"


class AttemptOutcome(enum.StrEnum):
    """What became of a contact attempt; ``agent.campaigns.contact_history`` decides which count
    (D3)."""

    #: Reserved by the gate, not yet dialled or not yet reported: counts.
    DIALING = "dialing"
    ANSWERED = "answered"
    NO_ANSWER = "no_answer"
    VOICEMAIL = "voicemail"
    BUSY = "busy"
    NOT_IN_SERVICE = "not_in_service"
    #: The call reached the consumer's attorney.
    ATTORNEY = "attorney"
    #: A call the consumer asked for ("call me Monday") within 7 days of asking.
    CONSENTED_CALLBACK = "consented_callback"
    #: Dialed, but the trunk or the network failed it; counts (whether it rang is unknown).
    FAILED = "failed"


class PromiseStatus(enum.StrEnum):
    """A promise to pay's lifecycle (docs/compliance.md, "Dispositions")."""

    OPEN = "open"
    KEPT = "kept"
    BROKEN = "broken"
    PARTIAL = "partial"


def _one_of(column: str, values: type[enum.StrEnum]) -> CheckConstraint:
    """A CHECK that ``column`` holds one of the enum's values, named after the column."""
    allowed = ", ".join(f"'{value}'" for value in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=column)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dt.datetime: UTCDateTime()}


class Call(Base):
    """One phone or browser conversation, inbound or outbound."""

    __tablename__ = "calls"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    transport: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str] = mapped_column(String(16))
    scenario: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default=CallStatus.ACTIVE.value)
    started_at: Mapped[dt.datetime]
    ended_at: Mapped[dt.datetime | None]
    duration_s: Mapped[float | None] = mapped_column(Float)
    end_reason: Mapped[str | None] = mapped_column(String(64))
    stt_model: Mapped[str | None] = mapped_column(String(128))
    llm_model: Mapped[str | None] = mapped_column(String(128))
    tts_voice: Mapped[str | None] = mapped_column(String(128))
    prompt_version: Mapped[str | None] = mapped_column(String(64))
    price_book_version: Mapped[str | None] = mapped_column(String(32))
    cost_usd: Mapped[float | None] = mapped_column(Float)
    cost_per_minute_usd: Mapped[float | None] = mapped_column(Float)
    #: The debt the call was about, once known (outbound: always; inbound: after lookup).
    debt_id: Mapped[int | None] = mapped_column(ForeignKey("debts.id", ondelete="SET NULL"))
    #: Who was reached: right_party, consumer_equivalent, third_party, wrong_number,
    #: attorney, unverified, voicemail, ...
    party: Mapped[str | None] = mapped_column(String(32))
    #: The call's disposition (docs/compliance.md, "Dispositions").
    disposition: Mapped[str | None] = mapped_column(String(64))
    #: When the right party was verified (C3); None while unverified.
    verified_at: Mapped[dt.datetime | None]
    #: The consumer's number, E.164: caller id inbound, the dialled number outbound.
    number: Mapped[str | None] = mapped_column(String(16))
    #: The campaign an outbound call was dialled for (``agent.campaigns.dialer``).
    campaign: Mapped[str | None] = mapped_column(String(128))
    #: Where the call's stereo recording is stored (``agent.pipeline.recording``); None: none kept.
    recording_uri: Mapped[str | None] = mapped_column(String(1024))
    #: The worker that carries (carried) the call (``WORKER_ID``): when a worker starts again,
    #: only its own calls left active are known to have died with it.
    worker: Mapped[str | None] = mapped_column(String(64))

    turns: Mapped[list[Turn]] = relationship(
        back_populates="call",
        order_by="Turn.number",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )
    cost_lines: Mapped[list[CostLine]] = relationship(
        back_populates="call",
        order_by="CostLine.id",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )
    events: Mapped[list[CallEvent]] = relationship(
        back_populates="call",
        order_by="(CallEvent.at, CallEvent.id)",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )

    __table_args__ = (
        # The call list's keyset order, newest first, and its commonest filters.
        Index("ix_calls_started_at", "started_at", "id"),
        Index("ix_calls_status", "status"),
        Index("ix_calls_debt_id", "debt_id"),
        Index("ix_calls_disposition_started_at", "disposition", "started_at"),
        Index("ix_calls_campaign_started_at", "campaign", "started_at"),
        Index("ix_calls_number", "number"),
    )

    def __repr__(self) -> str:
        return f"<Call {self.id} {self.transport} {self.direction} {self.status}>"


class Turn(Base):
    """One exchange: what the caller said, what the agent answered, and how long it took.

    Latency is kept in parts (endpointing, STT, LLM, TTS, transport out) and as
    both totals, response and voice-to-voice, as ``agent.ledger.latency`` defines them.
    """

    __tablename__ = "turns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("calls.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    #: When the caller started speaking; None for a turn the agent opened.
    started_at: Mapped[dt.datetime | None]
    ended_at: Mapped[dt.datetime | None]
    user_text: Mapped[str | None] = mapped_column(Text)
    agent_text: Mapped[str | None] = mapped_column(Text)
    interrupted: Mapped[bool] = mapped_column(Boolean, default=False)

    endpointing_ms: Mapped[float | None] = mapped_column(Float)
    stt_ms: Mapped[float | None] = mapped_column(Float)
    llm_ttft_ms: Mapped[float | None] = mapped_column(Float)
    tts_ttfb_ms: Mapped[float | None] = mapped_column(Float)
    transport_out_ms: Mapped[float | None] = mapped_column(Float)
    #: VAD stop (end of the caller's speech as detected) to first agent audio frame sent.
    response_ms: Mapped[float | None] = mapped_column(Float)
    #: Last voiced caller frame received to first agent audio frame sent.
    voice_to_voice_ms: Mapped[float | None] = mapped_column(Float)
    #: ``agent.ledger.latency.DEFINITION`` for turns written now; rows stored before it are
    #: ``LEGACY_DEFINITION`` (response from the commit), the server default.
    latency_definition: Mapped[int] = mapped_column(
        SmallInteger, default=DEFINITION, server_default="1"
    )

    stt_audio_s: Mapped[float | None] = mapped_column(Float)
    llm_prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    #: Of ``llm_prompt_tokens``, those the server found in its prefix cache (None: not known).
    llm_cached_tokens: Mapped[int | None] = mapped_column(Integer)
    llm_completion_tokens: Mapped[int | None] = mapped_column(Integer)
    tts_characters: Mapped[int | None] = mapped_column(Integer)

    call: Mapped[Call] = relationship(back_populates="turns")

    __table_args__ = (UniqueConstraint("call_id", "number"),)

    def __repr__(self) -> str:
        return f"<Turn {self.call_id}#{self.number}>"


class CostLine(Base):
    """One component's cost for a call, priced under a named price book version."""

    __tablename__ = "cost_lines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("calls.id", ondelete="CASCADE"), index=True)
    component: Mapped[str] = mapped_column(String(32))
    quantity: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(32))
    unit_price_usd: Mapped[float] = mapped_column(Float)
    amount_usd: Mapped[float] = mapped_column(Float)
    price_book_version: Mapped[str] = mapped_column(String(32))
    #: ``measured`` or ``declared`` (agent.ledger.throughput): what the unit price rests on;
    #: lines priced before the basis was kept read ``declared`` (the server default).
    basis: Mapped[str] = mapped_column(String(16), server_default="declared")
    #: Device seconds the servers reported for this line's work (the dashboard's utilization).
    compute_s: Mapped[float | None] = mapped_column(Float)

    call: Mapped[Call] = relationship(back_populates="cost_lines")

    def __repr__(self) -> str:
        return f"<CostLine {self.call_id} {self.component} {self.amount_usd}>"


class CallEvent(Base):
    """A timestamped marker on a call's timeline: compliance, fallbacks, errors."""

    __tablename__ = "call_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("calls.id", ondelete="CASCADE"), index=True)
    at: Mapped[dt.datetime]
    kind: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    call: Mapped[Call] = relationship(back_populates="events")

    __table_args__ = (
        # The console's compliance flag: the calls with a flag kind (docs/console.md).
        Index("ix_call_events_kind_call_id", "kind", "call_id"),
    )

    def __repr__(self) -> str:
        return f"<CallEvent {self.call_id} {self.kind} {self.at.isoformat()}>"


# -- the portfolio -----------------------------------------------------------


class Consumer(Base):
    """A person who owes, as the portfolio names them, with what the gate must know.

    The address's time zone is the first of the zones D4 checks;
    ``attorney_name`` (D6), ``inconvenient`` windows and
    ``workplace_forbids_calls`` (D5) are set by the portfolio or by what the
    consumer said on a call (``agent.campaigns.contact_history.apply_signal``).
    """

    __tablename__ = "consumers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: The portfolio's own id of the consumer: the key re-imports update by.
    external_ref: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    date_of_birth: Mapped[dt.date | None] = mapped_column(Date)
    address: Mapped[str] = mapped_column(Text)
    #: USPS two-letter code; picks the state rule pack (D8).
    state: Mapped[str] = mapped_column(String(2))
    city: Mapped[str] = mapped_column(String(100))
    #: IANA zone of the address, e.g. ``America/Chicago``.
    time_zone: Mapped[str] = mapped_column(String(64))
    #: Set when the consumer is known to have an attorney for the debt (D6).
    attorney_name: Mapped[str | None] = mapped_column(String(200))
    #: Stated inconvenient times, local to the consumer:
    #: ``[{"weekday": None | 0-6 (Monday 0), "start": "HH:MM", "end": "HH:MM"}]`` (D5).
    inconvenient: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    #: The consumer's employer forbids calls at work: no calls to ``work`` numbers (D5).
    workplace_forbids_calls: Mapped[bool] = mapped_column(Boolean, default=False)

    phones: Mapped[list[Phone]] = relationship(
        back_populates="consumer",
        order_by="Phone.id",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )
    debts: Mapped[list[Debt]] = relationship(
        back_populates="consumer",
        order_by="Debt.id",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )

    def __repr__(self) -> str:
        return f"<Consumer {self.id} {self.external_ref}>"


class Phone(Base):
    """A number of a consumer, with the consent to call it and what suppresses it."""

    __tablename__ = "phones"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), index=True
    )
    #: E.164, e.g. ``+16175550142``.
    number: Mapped[str] = mapped_column(String(16), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    #: How the number came to us (``ConsentSource``); None: no consent on file (D10).
    consent_source: Mapped[str | None] = mapped_column(String(32))
    consent_date: Mapped[dt.date | None] = mapped_column(Date)
    #: Someone answering it said it is not the consumer's (D9).
    wrong_number: Mapped[bool] = mapped_column(Boolean, default=False)
    #: When someone other than the consumer answered it: a third party is contacted once
    #: (C3), so the number is not dialled again.
    third_party_reached_at: Mapped[dt.datetime | None]
    #: When the consumer said "stop calling": no calls to any of their numbers (D7).
    opted_out_at: Mapped[dt.datetime | None]

    consumer: Mapped[Consumer] = relationship(back_populates="phones")

    __table_args__ = (
        UniqueConstraint("consumer_id", "number"),
        _one_of("kind", PhoneKind),
    )

    def __repr__(self) -> str:
        return f"<Phone {self.id} {self.kind} ...{self.number[-4:]}>"


class Debt(Base):
    """One account in collection, its offer envelope (C6) and what stops collecting it."""

    __tablename__ = "debts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), index=True
    )
    #: The portfolio's account id: the key re-imports update by.
    account_ref: Mapped[str] = mapped_column(String(64), unique=True)
    #: Last four of the account number, one way to verify the right party (C3).
    account_last4: Mapped[str | None] = mapped_column(String(4))
    creditor: Mapped[str] = mapped_column(String(200))
    balance_cents: Mapped[int] = mapped_column(Integer)
    statute_status: Mapped[str] = mapped_column(String(16))
    tenant_type: Mapped[str] = mapped_column(String(32))
    #: The creditor's approved envelope (C6).
    max_discount_pct: Mapped[float] = mapped_column(Float)
    min_installment_cents: Mapped[int] = mapped_column(Integer)
    max_term_months: Mapped[int] = mapped_column(Integer)
    #: Disputed, verification pending (D9).
    disputed: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Written cease request: no communication at all on this debt (D7).
    cease_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    bankrupt: Mapped[bool] = mapped_column(Boolean, default=False)
    deceased: Mapped[bool] = mapped_column(Boolean, default=False)
    #: The last telephone conversation about the debt (D2 counts days from it).
    last_conversation_at: Mapped[dt.datetime | None]
    #: A callback the consumer asked for ("call me after six tonight"): calls from
    #: ``callback_from`` until ``callback_until`` (UTC) neither count towards D1 nor are
    #: barred by D2, per 1006.14(b)(3); ``callback_consented_at`` is when the consent was
    #: given (the conversation it was given in; a later one ends it). See agent.campaigns.predial.
    callback_from: Mapped[dt.datetime | None]
    callback_until: Mapped[dt.datetime | None]
    callback_consented_at: Mapped[dt.datetime | None]

    consumer: Mapped[Consumer] = relationship(back_populates="debts")

    __table_args__ = (
        _one_of("statute_status", StatuteStatus),
        _one_of("tenant_type", TenantType),
        CheckConstraint("balance_cents >= 0", name="balance_cents"),
        CheckConstraint("max_discount_pct BETWEEN 0 AND 100", name="max_discount_pct"),
    )

    def __repr__(self) -> str:
        return f"<Debt {self.id} {self.account_ref}>"


# -- the contact ledger ------------------------------------------------------


class ContactAttempt(Base):
    """One call attempt about a debt: what the gate counts (D1, D3, D8).

    The gate inserts it (outcome ``dialing``, counted) in the same transaction
    that allowed it, so concurrent dialers cannot both take the last slot.
    """

    __tablename__ = "contact_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    debt_id: Mapped[int] = mapped_column(ForeignKey("debts.id", ondelete="CASCADE"))
    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), index=True
    )
    phone_id: Mapped[int | None] = mapped_column(
        ForeignKey("phones.id", ondelete="SET NULL"), index=True
    )
    #: The number dialled, E.164 (kept even if the phone row goes).
    number: Mapped[str] = mapped_column(String(16))
    #: When it was placed, UTC.
    at: Mapped[dt.datetime]
    outcome: Mapped[str] = mapped_column(String(32), default=AttemptOutcome.DIALING.value)
    #: Whether it counts towards the caps (D3).
    counts: Mapped[bool] = mapped_column(Boolean, default=True)
    #: Placed inside a callback window the consumer consented to (1006.14(b)(3)): it does
    #: not count towards D1 whatever its outcome; the stricter state caps (D8) still count it.
    consented: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    call_id: Mapped[str | None] = mapped_column(
        ForeignKey("calls.id", ondelete="SET NULL"), index=True
    )
    #: The gate's summary of why it was allowed, for the audit trail.
    decided_by: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_contact_attempts_debt_id_at", "debt_id", "at"),)

    def __repr__(self) -> str:
        return f"<ContactAttempt {self.id} debt {self.debt_id} {self.outcome}>"


class Promise(Base):
    """A promise to pay made on a call, and whether it was kept."""

    __tablename__ = "promises"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("calls.id", ondelete="CASCADE"), index=True)
    debt_id: Mapped[int] = mapped_column(ForeignKey("debts.id", ondelete="CASCADE"), index=True)
    amount_cents: Mapped[int] = mapped_column(Integer)
    due_date: Mapped[dt.date] = mapped_column(Date)
    #: How it will be paid: card, ach, pay_link, check, ...
    method: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default=PromiseStatus.OPEN.value)
    created_at: Mapped[dt.datetime]

    __table_args__ = (
        _one_of("status", PromiseStatus),
        CheckConstraint("amount_cents > 0", name="amount_cents"),
    )

    def __repr__(self) -> str:
        return f"<Promise {self.id} debt {self.debt_id} {self.amount_cents} {self.status}>"


# -- the console's people ----------------------------------------------------


class Role(enum.StrEnum):
    """What a console user may see and do (docs/console.md)."""

    #: Works the accounts: calls, transcripts, consumers.
    OPERATOR = "operator"
    #: Runs the agency: everything an operator sees, and the audit log.
    OWNER = "owner"
    #: Runs the system: users and settings.
    ADMIN = "admin"


class User(Base):
    """A person who logs in to the console; disabled, never deleted, so the audit keeps them."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: A login name or an e-mail address, lower-cased.
    username: Mapped[str] = mapped_column(String(254), unique=True)
    #: The argon2 hash in its PHC string form (it carries its own parameters and salt).
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime]
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)

    __table_args__ = (_one_of("role", Role),)

    def __repr__(self) -> str:
        return f"<User {self.id} {self.role}{' disabled' if self.disabled else ''}>"


class UserSession(Base):
    """A logged-in browser. Only the token's SHA-256 is kept: a copy of the table logs no one in."""

    __tablename__ = "sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime]
    #: The earlier of the idle timeout and the absolute lifetime; moved on as the user works.
    expires_at: Mapped[dt.datetime] = mapped_column(index=True)
    last_seen_at: Mapped[dt.datetime]
    user_agent: Mapped[str | None] = mapped_column(String(256))
    ip: Mapped[str | None] = mapped_column(String(45))

    def __repr__(self) -> str:
        return f"<UserSession user {self.user_id} until {self.expires_at.isoformat()}>"


class AuditEntry(Base):
    """Who looked at or changed what, and when: every view of a call by a person."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime]
    #: None for the command line (``python -m agent users ...``) and failed logins.
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), index=True)
    #: ``view_call``, ``login``, ``logout``, ``user_add``, ...
    action: Mapped[str] = mapped_column(String(64))
    object_id: Mapped[str | None] = mapped_column(String(64))
    #: The client's address; ``cli`` for the command line.
    ip: Mapped[str | None] = mapped_column(String(45))
    #: What the action and object leave out: the role granted, the range read, why a login
    #: failed.
    detail: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (Index("ix_audit_log_object_id_at", "object_id", "at"),)

    def __repr__(self) -> str:
        return f"<AuditEntry {self.id} {self.action} {self.object_id} by {self.user_id}>"


class ApiToken(Base):
    """A machine client's API token (``agent.console.tokens``). Only its SHA-256 is kept,
    as for sessions; revoked, never deleted, so the audit log keeps pointing at it."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: What uses it, for people: "ci-dialer", "prometheus".
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    #: Space-separated, as OAuth writes them: ``campaigns:read metrics:read``.
    scopes: Mapped[str] = mapped_column(String(255))
    #: The admin who made it; None: the command line.
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[dt.datetime]
    #: To the minute (``tokens.TOUCH_EVERY``), not to the request.
    last_used_at: Mapped[dt.datetime | None]
    revoked_at: Mapped[dt.datetime | None]

    def __repr__(self) -> str:
        return f"<ApiToken {self.id} {self.name}{' revoked' if self.revoked_at else ''}>"


# -- the carriers' webhooks ---------------------------------------------------


class MediaStreamToken(Base):
    """A media stream a signed voice webhook announced (``agent.server.carrier_auth``), until
    its socket spends it: in the database, so any worker or pod may take the socket. Only
    the token's SHA-256 is kept, as for sessions."""

    __tablename__ = "media_tokens"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: ``twilio`` or ``telnyx``: the token is good only on that carrier's route.
    carrier: Mapped[str] = mapped_column(String(16))
    #: The webhook's ``From`` and ``To`` as the carrier signed them (E.164, or a SIP URI).
    remote_number: Mapped[str | None] = mapped_column(Text)
    local_number: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[dt.datetime] = mapped_column(index=True)

    def __repr__(self) -> str:
        return f"<MediaStreamToken {self.carrier} until {self.expires_at.isoformat()}>"


class SeenWebhook(Base):
    """A signed carrier webhook already taken, remembered for the replay window so that a
    copy is refused by whichever worker or pod it reaches."""

    __tablename__ = "seen_webhooks"

    carrier: Mapped[str] = mapped_column(String(16), primary_key=True)
    #: The SHA-256 of what the carrier signed.
    signed_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[dt.datetime] = mapped_column(index=True)

    def __repr__(self) -> str:
        return f"<SeenWebhook {self.carrier} until {self.expires_at.isoformat()}>"
