"""The user agent dialing itself over loopback (telephony/sip/ua.py): outbound outcomes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from telephony.line import LineError
from telephony.sip.transaction import Timers
from telephony.sip.ua import SipCall, SipEndpoint
from telephony.sip_transport import SipTransport

FAST = Timers(t1=0.05, t2=0.2, t4=0.2)


async def callee_app(call: SipCall) -> None:
    action = call.info.local_number
    if action == "ring":
        await call.ended.wait()
    elif action == "decline":
        await call.hang_up()
    else:
        await call.answer()


@pytest.fixture
async def callee() -> AsyncIterator[SipEndpoint]:
    ua = SipEndpoint("127.0.0.1", 0, on_call=callee_app, credentials={"trunk": "pw"}, timers=FAST)
    await ua.start()
    yield ua
    await ua.close()


async def caller(auth: tuple[str, str] | None) -> SipEndpoint:
    async def never(call: SipCall) -> None:
        raise AssertionError("no inbound calls expected")

    ua = SipEndpoint("127.0.0.1", 0, on_call=never, trunk_auth=auth, timers=FAST)
    await ua.start()
    return ua


async def test_answered_hold_and_hang_up(callee: SipEndpoint) -> None:
    ua = await caller(("trunk", "pw"))
    try:
        result = await ua.invite(f"sip:answer@127.0.0.1:{callee.port}")
        assert result.outcome == "answered" and result.call is not None
        call = result.call
        assert call.info.direction == "outbound" and call.info.remote_number == "answer"
        assert isinstance(call.transport(), SipTransport) and call.transport() is call.transport()
        (inbound,) = callee.calls.values()
        await call.hold(True)
        assert inbound.direction == "recvonly" and call.direction == "sendonly"
        await call.hold(False)
        assert inbound.direction == "sendrecv"
        await call.hang_up()
        await asyncio.wait_for(inbound.ended.wait(), 5)
        assert inbound.end_reason == "hung up by the caller"
        with pytest.raises(LineError):
            await call.hold(True)
    finally:
        await ua.close()


async def test_unauthenticated_caller_is_refused(callee: SipEndpoint) -> None:
    ua = await caller(None)
    try:
        result = await ua.invite(f"sip:answer@127.0.0.1:{callee.port}")
        assert (result.outcome, result.status) == ("failed", 401)
    finally:
        await ua.close()


async def test_declined_and_no_answer(callee: SipEndpoint) -> None:
    ua = await caller(("trunk", "pw"))
    try:
        declined = await ua.invite(f"sip:decline@127.0.0.1:{callee.port}")
        assert (declined.outcome, declined.status) == ("failed", 603)
        unanswered = await ua.invite(f"sip:ring@127.0.0.1:{callee.port}", ring_timeout=0.3)
        assert (unanswered.outcome, unanswered.status) == ("no_answer", 487)
        for call in list(callee.calls.values()):
            await asyncio.wait_for(call.ended.wait(), 5)
        assert callee.calls == {}
    finally:
        await ua.close()


async def test_a_dial_given_up_while_ringing_stops_the_ringing(callee: SipEndpoint) -> None:
    ua = await caller(("trunk", "pw"))
    try:
        dialing = asyncio.ensure_future(ua.invite(f"sip:ring@127.0.0.1:{callee.port}"))
        for _ in range(500):
            if callee.calls:
                break
            await asyncio.sleep(0.01)
        [ringing] = callee.calls.values()
        dialing.cancel()
        await asyncio.wait_for(ringing.ended.wait(), 5)  # our CANCEL reached it
        assert ringing.end_reason and callee.calls == {}
    finally:
        await ua.close()


async def test_unreachable_uri_fails_cleanly() -> None:
    ua = await caller(None)
    try:
        result = await ua.invite("tel:+15551234567")
        assert result.outcome == "failed" and "cannot reach" in result.reason
    finally:
        await ua.close()
