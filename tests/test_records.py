"""agent.ledger.records: records are checked where they are built, not in the writer's thread."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from agent.ledger.pricebook import CallUsage, PriceBook, price_call
from agent.ledger.records import CallEnded, CallEventRecord, CallStarted, TurnRecord, new_call_id

NOW = dt.datetime(2026, 12, 2, 15, 0, tzinfo=dt.UTC)
NAIVE = dt.datetime(2026, 12, 2, 15, 0)


def test_new_call_id_fits_the_column() -> None:
    call_id = new_call_id()
    assert len(call_id) == 32 and int(call_id, 16) >= 0
    assert new_call_id() != call_id


def test_records_are_immutable() -> None:
    record = CallStarted(new_call_id(), "webrtc", "inbound", NOW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.transport = "sip"  # type: ignore[misc]


def test_turn_latency_and_usage_default_to_unknown() -> None:
    record = TurnRecord(new_call_id(), 1)
    assert record.response_ms is None and record.voice_to_voice_ms is None
    assert record.llm_prompt_tokens is None and record.tts_characters is None
    assert record.interrupted is False


@pytest.mark.parametrize(
    "build",
    [
        lambda: CallStarted(new_call_id(), "webrtc", "inbound", NAIVE),
        lambda: CallStarted(new_call_id(), "webrtc", "sideways", NOW),
        lambda: CallStarted("x" * 33, "webrtc", "inbound", NOW),
        lambda: CallStarted("", "webrtc", "inbound", NOW),
        lambda: TurnRecord(new_call_id(), 1, ended_at=NAIVE),
        lambda: TurnRecord(new_call_id(), -1),
        lambda: CallEventRecord(new_call_id(), NAIVE, "greeting", {}),
        lambda: CallEventRecord(new_call_id(), NOW, "greeting", {"at": NOW}),
        lambda: CallEventRecord(new_call_id(), NOW, "", {}),
    ],
    ids=[
        "naive-start",
        "direction",
        "long-id",
        "empty-id",
        "naive-turn-end",
        "negative-turn",
        "naive-event",
        "detail-not-json",
        "empty-kind",
    ],
)
def test_bad_records_fail_where_they_are_built(build: object) -> None:
    with pytest.raises(ValueError):
        build()  # type: ignore[operator]


def test_event_detail_is_a_snapshot() -> None:
    detail = {"offer": {"discount": 0.2}}
    record = CallEventRecord(new_call_id(), NOW, "offer_made", detail)
    detail["offer"]["discount"] = 0.9
    assert record.detail == {"offer": {"discount": 0.2}}


def test_call_ended_carries_the_priced_call() -> None:
    book = PriceBook.load()
    cost = price_call(book, "embedded-cpu", CallUsage("loopback", 60.0, stt_audio_s=10.0))
    record = CallEnded(new_call_id(), NOW, 60.0, "hangup", cost)
    stt, _ = book.unit_price("embedded-cpu", "stt", "audio_s_per_s")
    assert record.cost.total_usd == pytest.approx(10.0 * stt)
    with pytest.raises(ValueError):
        CallEnded(new_call_id(), NOW, -1.0, "hangup", cost)
