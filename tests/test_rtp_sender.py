"""The RTP sender: the packets it builds, what it counts, its messages, and its process
(started, replaced when it dies, gone when the worker is)."""

from __future__ import annotations

import asyncio
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from aiortc.rtp import RtpPacket

from telephony.rtp import g711
from telephony.rtp.sender import (
    MAX_UNDERRUN_SLOTS,
    OutboundStream,
    RtpSender,
    SenderLoop,
    SenderStats,
    StreamConfig,
)

HOST = "127.0.0.1"
SPEECH = (np.full(160, 3000, dtype="<i2")).tobytes()  # one packet of audio


@pytest.fixture
def udp() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A sending socket and the far end's, both on 127.0.0.1."""
    ours, far = socket.socket(type=socket.SOCK_DGRAM), socket.socket(type=socket.SOCK_DGRAM)
    ours.bind((HOST, 0))
    far.bind((HOST, 0))
    far.settimeout(2)
    yield ours, far
    ours.close()
    far.close()


def config(far: socket.socket, **changes: Any) -> StreamConfig:
    fields: dict[str, Any] = dict(
        remote=far.getsockname(),
        codec="PCMU",
        dtmf_payload_type=101,
        direction="sendrecv",
        ssrc=0x1234,
        seq=65534,
        ts0=1000,
    )
    return StreamConfig(**{**fields, **changes})


def received(far: socket.socket, n: int) -> list[RtpPacket]:
    return [RtpPacket.parse(far.recv(2048)) for _ in range(n)]


def test_packets_carry_the_audio_then_silence_with_rtp_headers(udp: Any) -> None:
    ours, far = udp
    replies: list[tuple[Any, ...]] = []
    stream = OutboundStream(ours, config(far), replies.append)
    stream.write(SPEECH * 2, 0)
    for slot in range(3):
        stream.send_slot(slot, 0.0)

    packets = received(far, 3)
    assert [p.version for p in packets] == [2, 2, 2]
    assert [p.payload_type for p in packets] == [0, 0, 0]
    assert [p.marker for p in packets] == [1, 0, 0]
    assert [p.sequence_number for p in packets] == [65534, 65535, 0]  # wraps
    assert [p.timestamp for p in packets] == [1000, 1160, 1320]
    assert {p.ssrc for p in packets} == {0x1234}
    assert packets[0].payload == g711.encode("PCMU", SPEECH)
    assert packets[2].payload == bytes([g711.SILENCE["PCMU"]]) * 160
    assert stream.stats.packets_out == 3 and replies == []


def test_audio_late_inside_speech_counts_as_underruns_a_pause_does_not(udp: Any) -> None:
    ours, far = udp
    stream = OutboundStream(ours, config(far), lambda _: None)
    stream.write(SPEECH, 0)
    stream.send_slot(0, 0.0)
    stream.send_slot(1, 0.0)  # ran dry
    stream.send_slot(2, 0.0)
    stream.write(SPEECH, 3)  # two silent slots inside the agent's speech
    assert stream.stats.underruns == 2

    stream.send_slot(3, 0.0)
    stream.send_slot(4, 0.0)
    stream.write(SPEECH, 5 + MAX_UNDERRUN_SLOTS)  # a pause between utterances
    assert stream.stats.underruns == 2

    stream.send_slot(5 + MAX_UNDERRUN_SLOTS, 0.0)
    stream.clear()  # barge-in: the silence after it is wanted
    stream.send_slot(6 + MAX_UNDERRUN_SLOTS, 0.0)
    stream.write(SPEECH, 7 + MAX_UNDERRUN_SLOTS)
    assert stream.stats.underruns == 2


def test_a_partial_packet_ends_an_utterance_without_underrun(udp: Any) -> None:
    ours, far = udp
    stream = OutboundStream(ours, config(far), lambda _: None)
    stream.write(SPEECH + SPEECH[:100], 0)
    for slot in range(3):
        stream.send_slot(slot, 0.0)
    stream.write(SPEECH, 3)
    assert stream.stats.underruns == 0
    assert received(far, 2)[1].payload[:50] == g711.encode("PCMU", SPEECH[:100])


def test_skipped_slots_are_counted_and_set_the_marker(udp: Any) -> None:
    ours, far = udp
    stream = OutboundStream(ours, config(far), lambda _: None)
    stream.send_slot(0, 0.0)
    stream.send_slot(1, 0.0)
    stream.send_slot(7, 0.001)
    packets = received(far, 3)
    assert [p.marker for p in packets] == [1, 0, 1]
    assert packets[2].timestamp - packets[0].timestamp == 7 * 160
    assert stream.stats.skipped == 5
    assert stream.stats.lateness.count == 3 and stream.stats.lateness.max_s == 0.001


def test_hold_sends_nothing_answers_dtmf_and_resume_sets_the_marker(udp: Any) -> None:
    ours, far = udp
    replies: list[tuple[Any, ...]] = []
    stream = OutboundStream(ours, config(far), replies.append)
    stream.send_slot(0, 0.0)
    stream.update(config(far, direction="recvonly"))
    stream.send_dtmf(9, "5", 40)
    stream.send_slot(1, 0.0)
    stream.send_slot(2, 0.0)
    assert replies == [("dtmf", 9, "hold")]
    stream.update(config(far))
    stream.send_slot(3, 0.0)

    first, resumed = received(far, 2)
    assert first.marker == 1 and resumed.marker == 1
    assert resumed.timestamp - first.timestamp == 3 * 160
    assert stream.stats.packets_out == 2


def test_a_key_takes_its_slots_and_answers_when_its_end_is_out(udp: Any) -> None:
    ours, far = udp
    replies: list[tuple[Any, ...]] = []
    stream = OutboundStream(ours, config(far), replies.append)
    stream.write(SPEECH, 0)
    stream.send_dtmf(4, "#", 40)  # two updates, the end three times
    for slot in range(6):
        stream.send_slot(slot, 0.0)
    packets = received(far, 6)
    assert [p.payload_type for p in packets] == [101] * 5 + [0]
    assert len({p.timestamp for p in packets[:5]}) == 1
    assert [p.marker for p in packets[:5]] == [1, 0, 0, 0, 0]
    assert packets[5].payload == g711.encode("PCMU", SPEECH)  # the audio waited
    assert replies == [("dtmf", 4, None)]


def test_the_loop_answers_for_streams_it_does_not_have() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    loop = SenderLoop(theirs)
    loop.handle(("stats", 99, 1))
    loop.handle(("close", 99, 2))
    loop.handle(("dtmf", 99, 3, "1", 100))
    loop.handle(("audio", 99, b"\0" * 320))  # nothing to answer
    answers = [pickle.loads(ours.recv(4096)) for _ in range(3)]
    assert answers == [("stats", 1, None), ("stats", 2, None), ("dtmf", 3, "closed")]
    ours.close()
    theirs.close()


def test_the_loop_opens_counts_and_closes_a_stream(udp: Any) -> None:
    sock, far = udp
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    loop = SenderLoop(theirs)
    loop.handle(("open", 1, config(far), time.monotonic(), SPEECH), [os.dup(sock.fileno())])
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:
        loop._pacer.run_due()
        time.sleep(0.005)
    loop.handle(("close", 1, 7))
    kind, request, dumped = pickle.loads(ours.recv(65536))
    stats = SenderStats.load(dumped)
    assert (kind, request) == ("stats", 7)
    assert 2 <= stats.packets_out <= 4 and stats.lateness.count == stats.packets_out
    assert received(far, 1)[0].payload == g711.encode("PCMU", SPEECH)
    ours.close()
    theirs.close()


async def test_a_sender_that_dies_is_replaced_and_the_stream_goes_on(udp: Any) -> None:
    sock, far = udp
    sender = RtpSender()
    sid = sender.open(sock, config(far), time.monotonic())
    far.settimeout(5)
    before = RtpPacket.parse(await asyncio.to_thread(far.recv, 2048))
    first_pid = sender.pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)

    deadline = time.monotonic() + 5
    while sender.pid in (first_pid, None) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert sender.pid not in (first_pid, None)
    while True:  # packets the first one sent before it died may still be queued
        after = RtpPacket.parse(await asyncio.to_thread(far.recv, 2048))
        if after.marker:
            break
    assert after.ssrc == before.ssrc
    assert (after.timestamp - before.timestamp) % 160 == 0  # the same clock runs on
    sender.write(sid, SPEECH)
    stats = await sender.close(sid)
    assert stats is not None and stats.packets_out >= 1
    with sender._lock:
        sender._stop_locked()


async def test_the_sender_ignores_sigterm_and_ends_with_its_worker() -> None:
    script = textwrap.dedent(
        """
        import socket, sys, time
        from telephony.rtp.sender import RtpSender, StreamConfig
        sock = socket.socket(type=socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sender = RtpSender()
        sender.open(sock, StreamConfig(None, "PCMU", None, "sendrecv", 1, 1, 1), time.monotonic())
        while sender.refused == "":  # until it has said it is ready
            time.sleep(0.01)
        print(sender.pid, flush=True)
        sys.stdin.read()  # until the test closes it
        """
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert worker.stdout is not None and worker.stdin is not None
    pid = int(worker.stdout.readline())
    os.kill(pid, signal.SIGTERM)  # a drain's signal, sent to it by mistake
    await asyncio.sleep(0.3)
    os.kill(pid, 0)  # still there

    worker.stdin.close()
    worker.wait(10)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purpose
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_without_the_privilege_realtime_priority_is_refused_with_the_reason() -> None:
    probe = [sys.executable, "-c", "from telephony.rtp import sender as s\n"
             "print(s.take_realtime_priority())"]  # fmt: skip
    if os.geteuid() == 0:  # root: the same without the capability
        probe = ["setpriv", "--bounding-set=-sys_nice", "--", *probe]
    elif resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0:
        pytest.skip("this user may take real-time priority without the capability")
    result = subprocess.run(probe, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "Operation not permitted (needs CAP_SYS_NICE)"


def test_realtime_priority_is_not_inherited_by_children() -> None:
    script = textwrap.dedent(
        """
        import os, subprocess, sys
        from telephony.rtp.sender import take_realtime_priority
        refused = take_realtime_priority()
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
            capture_output=True, text=True, check=True,
        )
        policy = os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK
        print(refused is None, policy == os.SCHED_FIFO, child.stdout.strip())
        """
    )
    probe = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    took, fifo, child_policy = probe.stdout.split()
    assert took == fifo
    assert int(child_policy) == os.SCHED_OTHER


def test_stats_round_trip() -> None:
    stats = SenderStats(packets_out=3, skipped=1, underruns=2)
    stats.lateness.record(0.0042)
    back = SenderStats.load(pickle.loads(pickle.dumps(stats.dump())))
    assert (back.packets_out, back.skipped, back.underruns) == (3, 1, 2)
    assert back.lateness.count == 1 and back.lateness.percentile(100) == pytest.approx(0.0042)
