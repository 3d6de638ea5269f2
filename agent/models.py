"""The call record: calls, their turns, cost lines and events.

These tables are the evidence a call leaves behind (DOMAIN.md) and what the
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
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

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
        Index("ix_calls_started_at", "started_at"),
        Index("ix_calls_status", "status"),
    )

    def __repr__(self) -> str:
        return f"<Call {self.id} {self.transport} {self.direction} {self.status}>"


class Turn(Base):
    """One exchange: what the caller said, what the agent answered, and how long it took.

    Latency is kept in parts (endpointing, STT, LLM, TTS, transport out) and as
    both totals, because the honest number includes the endpointing wait.
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
    #: Turn committed to first agent audio frame sent.
    response_ms: Mapped[float | None] = mapped_column(Float)
    #: Last voiced caller frame received to first agent audio frame sent.
    voice_to_voice_ms: Mapped[float | None] = mapped_column(Float)

    stt_audio_s: Mapped[float | None] = mapped_column(Float)
    llm_prompt_tokens: Mapped[int | None] = mapped_column(Integer)
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

    def __repr__(self) -> str:
        return f"<CallEvent {self.call_id} {self.kind} {self.at.isoformat()}>"
