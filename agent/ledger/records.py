"""What the call hands to the store: one immutable record per fact.

The pipeline builds these on the audio path and passes them to
``StoreWriter.submit``; the database work happens on the writer's thread. They
are checked here, when built, so a mistake shows in the code that made it and
not later as a skipped row in the writer's log. This module needs no database.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from agent.ledger.latency import DEFINITION
from agent.ledger.pricebook import CallCost

#: Event kinds that flag a call for compliance review (the console marks and filters them).
FLAG_KINDS = ("blocked_sentence", "tool_denied", "card_number_spoken", "card_number_interrupted")
#: A call id is a uuid4 in hex (the ``calls.id`` column is 32 characters).
CALL_ID_LENGTH = 32
DIRECTIONS = ("inbound", "outbound")
#: Every path a call can arrive by (``telephony.line.CallInfo.path``, a call's
#: ``transport_name``); the price book must have a rate for each (``infra/pricebook.toml``).
TRANSPORTS = ("webrtc", "sip", "twilio", "telnyx", "livekit", "loopback")


def new_call_id() -> str:
    """A fresh call id."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class CallStarted:
    """A call was connected; the writer inserts its row with status ``active``."""

    call_id: str
    transport: str
    direction: str
    started_at: dt.datetime
    scenario: str | None = None
    stt_model: str | None = None
    llm_model: str | None = None
    tts_voice: str | None = None
    prompt_version: str | None = None
    #: The consumer's number (caller id inbound, the dialled number outbound), E.164.
    number: str | None = None
    #: The campaign an outbound call was dialled for.
    campaign: str | None = None
    #: The worker carrying the call (``Settings.worker_id``).
    worker: str | None = None

    def __post_init__(self) -> None:
        _check_call_id(self.call_id)
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        _check_aware("started_at", self.started_at)


@dataclass(frozen=True)
class TurnRecord:
    """A finished turn, with its latency parts in milliseconds and its usage.

    ``response_ms`` and ``voice_to_voice_ms`` are the two figures of ``agent.ledger.latency``;
    ``latency_definition`` says which definition they were measured under.
    """

    call_id: str
    number: int
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    user_text: str | None = None
    agent_text: str | None = None
    interrupted: bool = False
    endpointing_ms: float | None = None
    stt_ms: float | None = None
    llm_ttft_ms: float | None = None
    tts_ttfb_ms: float | None = None
    transport_out_ms: float | None = None
    response_ms: float | None = None
    voice_to_voice_ms: float | None = None
    stt_audio_s: float | None = None
    llm_prompt_tokens: int | None = None
    llm_cached_tokens: int | None = None
    llm_completion_tokens: int | None = None
    tts_characters: int | None = None
    latency_definition: int = DEFINITION

    def __post_init__(self) -> None:
        _check_call_id(self.call_id)
        if isinstance(self.number, bool) or not isinstance(self.number, int) or self.number < 0:
            raise ValueError(f"turn number must be a non-negative int, got {self.number!r}")
        _check_aware("started_at", self.started_at)
        _check_aware("ended_at", self.ended_at)


@dataclass(frozen=True)
class PromiseRecord:
    """A promise to pay made on the call (stored when the call's debt is known)."""

    amount_cents: int
    due_date: dt.date
    method: str
    installments: int = 1


@dataclass(frozen=True)
class CallOutcome:
    """How the conversation ended: who was reached, the disposition, any promise."""

    party: str | None
    disposition: str | None
    verified_at: dt.datetime | None = None
    debt_id: int | None = None
    promise: PromiseRecord | None = None

    def __post_init__(self) -> None:
        _check_aware("verified_at", self.verified_at)


@dataclass(frozen=True)
class CallEnded:
    """A call hung up; the writer closes its row and stores its cost lines at once."""

    call_id: str
    ended_at: dt.datetime
    duration_s: float
    end_reason: str | None
    #: None: the call could not be priced (its ``cost_error`` event says why); the rest of
    #: its end is written all the same.
    cost: CallCost | None
    outcome: CallOutcome | None = None
    #: Where the call's recording was stored (``agent.pipeline.recording``); None: not recorded.
    recording_uri: str | None = None

    def __post_init__(self) -> None:
        _check_call_id(self.call_id)
        _check_aware("ended_at", self.ended_at)
        if self.duration_s < 0:
            raise ValueError(f"duration_s must not be negative, got {self.duration_s!r}")


@dataclass(frozen=True)
class CallEventRecord:
    """A marker on the call's timeline (a disclosure given, a fallback taken, ...).

    ``detail`` is copied through JSON when the record is built: it must be
    JSON-serialisable, and later changes to the caller's dict do not leak in.
    """

    call_id: str
    at: dt.datetime
    kind: str
    detail: dict[str, Any]

    def __post_init__(self) -> None:
        _check_call_id(self.call_id)
        _check_aware("at", self.at)
        if not self.kind:
            raise ValueError("kind must not be empty")
        try:
            snapshot = json.loads(json.dumps(self.detail, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"detail of a {self.kind!r} event is not JSON: {exc}") from exc
        if not isinstance(snapshot, dict):
            raise ValueError(f"detail must be a dict, got {type(self.detail).__name__}")
        object.__setattr__(self, "detail", snapshot)


#: Everything ``StoreWriter.submit`` accepts.
Record = CallStarted | TurnRecord | CallEnded | CallEventRecord
RECORD_TYPES = (CallStarted, TurnRecord, CallEnded, CallEventRecord)


def _check_call_id(call_id: str) -> None:
    if not isinstance(call_id, str) or not 0 < len(call_id) <= CALL_ID_LENGTH:
        raise ValueError(f"call_id must be a string of 1-{CALL_ID_LENGTH} characters: {call_id!r}")


def _check_aware(name: str, value: dt.datetime | None) -> None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValueError(f"{name} must be timezone-aware (UTC), got naive {value!r}")
