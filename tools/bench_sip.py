"""``bench sip``: how many concurrent calls one worker process carries with its audio on time.

The worker under test is a process of its own, so its CPU can be read, running the agent
server's own call path (``agent.server.app.make_app`` and ``start_call``: VAD, smart-turn, STT,
policy, guard, TTS, records) on stub models (``infra/stub_server.py``, one process for the
whole run). It carries ``n`` calls at once for each step, on one of two transports:

- **sip**: our SIP user agent and RTP engine (``telephony/``). sipp places the calls and
  streams the caller's voice as RTP; the agent's outgoing packets are paced by
  ``RtpSession``, which keeps a histogram of how late each one left.
- **websocket** (the baseline): pipecat's ``FastAPIWebsocketTransport`` with its
  ``TwilioFrameSerializer`` (G.711 8 kHz in JSON media events, the way pipecat serves
  carrier media streams) under uvicorn. Clients in the bench process stream the same voice.
  pipecat keeps no lateness figures, so the worker's output transport is a subclass that
  times each 20 ms chunk against pipecat's own send clock (see ``_MeteredOutput``).

Calls start at ``CALL_RATE`` per second and each is held long enough that all ``n`` are up
together for ``SETTLE_S`` plus ``hold_s``; lateness and CPU are counted over the ``hold_s``
window only, the worker reading its own histograms and ``time.process_time()`` when it
opens and when the first call ends (what came before is reported as the ramp-up). Each
step is a fresh worker; stepping stops at the first step where fewer than ``TARGET`` of
the packets left within ``LIMIT_S`` of their schedule.

Run a worker alone: ``SIP_PORT=5070 python -m tools.bench_sip --transport sip --calls 4
--port 5070 --result out.json``, model URLs in ``STT_URL``, ``LLM_URL``, ``TTS_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import logging
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiohttp import web
from fastapi import FastAPI, WebSocket
from pipecat.frames.frames import OutputAudioRawFrame
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.base_transport import BaseTransport
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketOutputTransport,
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)

from agent.config import Settings
from agent.ledger.quantiles import percentile
from agent.pipeline.call import CallContext
from agent.runtime.context import AgentRuntime
from agent.runtime.embedded import ModelServers, ServerProcess, ServerStartError, free_port
from infra.serving import parse_server_arguments, server_arguments
from telephony.carriers.media_stream import CARRIER_SAMPLE_RATE, parse_start
from telephony.rtp import g711
from telephony.rtp.sender import MAX_UNDERRUN_SLOTS, SENDER, LatenessHistogram
from telephony.rtp.session import PACKET_S, RtpFrame, RtpSession, RtpStats
from tools.bench import _machine, _write_report
from tools.bench_profile import py_spy, summarize
from tools.bench_profile import table as profile_table

logger = logging.getLogger(__name__)

TRANSPORTS = {
    "sip": "our SIP user agent and RTP engine; sipp places the calls",
    "websocket": "pipecat's FastAPIWebsocketTransport with its TwilioFrameSerializer",
}
PIPELINES = {
    "ours": "the agent's call path (agent.server.app: start_call)",
    "plain": "pipecat's stock voice pipeline (plain_pipeline)",
}
#: py-spy's samples per second in a profiled step.
PROFILE_RATE = 200
#: The acceptance criterion: this share of outgoing packets leaves within LIMIT_S.
LIMIT_S = 0.005
TARGET = 0.999
#: A step's answers may be this much slower (p95) than with the run's fewest calls.
ANSWER_SLACK_MS = 100.0
#: New calls per second on both transports, during ramp-up and ramp-down.
CALL_RATE = 10
#: The caller's line, spoken by Piper between two pauses and looped: the agent greets, the
#: caller speaks, the agent answers (the stub STT hears "yes that is me"; the policy asks
#: for the date of birth again and again), and round it goes, every ~3 s, so that the
#: agent speaks often (the stub TTS says anything as a 0.3 s tone).
CALLER_LINE = "Yes, speaking."
CALLER_PAUSES_S = (0.5, 1.0)
WORKER_START_TIMEOUT_S = 60.0
#: After the last call ended: the worker flushes its records and writes the result.
WORKER_EXIT_TIMEOUT_S = 30.0
POLL_S = 0.02
#: The window opens this long after the last call is up: building a call's pipeline holds
#: the event loop (see the report), which is the ramp-up's story, not the steady state's.
SETTLE_S = 1.0
#: A caller's packet this loud (RMS of 16-bit samples) is voice: the bench's caller is
#: Piper's speech between stretches of digital silence.
VOICED_RMS = 300.0
#: The agent's audio after this long without any starts a new utterance: an answer.
ANSWER_GAP_S = 0.2
PROJECT_ROOT = Path(__file__).resolve().parents[1]
SIPP_SCENARIO = """<?xml version="1.0" encoding="ISO-8859-1" ?>
<!-- One bench call: streams caller.ulaw (looped) for -d milliseconds, then hangs up. -->
<scenario name="bench sip call">
  <send retrans="500">
    <![CDATA[
      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller@[local_ip]:[local_port]>;tag=[call_number]t[pid]
      To: <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: <sip:caller@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Type: application/sdp
      Content-Length: [len]

      v=0
      o=caller 1 1 IN IP[local_ip_type] [local_ip]
      s=-
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [media_port] RTP/AVP 0
      a=rtpmap:0 PCMU/8000
      a=sendrecv
    ]]>
  </send>
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="200"/>
  <send>
    <![CDATA[
      ACK sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller@[local_ip]:[local_port]>;tag=[call_number]t[pid]
      To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 1 ACK
      Contact: <sip:caller@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <nop>
    <action>
      <exec rtp_stream="caller.ulaw,-1,0"/>
    </action>
  </nop>
  <pause/>
  <send retrans="500">
    <![CDATA[
      BYE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller@[local_ip]:[local_port]>;tag=[call_number]t[pid]
      To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 2 BYE
      Contact: <sip:caller@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
  <recv response="200"/>
</scenario>
"""


class BenchError(RuntimeError):
    """A step could not be measured (a process failed, calls were not carried)."""


# --- the worker: its own process, carrying the calls -------------------------------------


class _MeteredOutput(FastAPIWebsocketOutputTransport):
    """pipecat's websocket output, each audio chunk timed against pipecat's own clock.

    pipecat paces by sleeping after each chunk until ``_next_send_time``; the next chunk is
    due then, or at once when pipecat found itself behind and reset its clock. A chunk counts
    only if it was already queued when the one before it left: one that the TTS delivered
    later is on time by definition (the RTP sender sends silence in that slot), so the
    first chunk of each utterance, and of a sentence that arrives late, counts as 0 ms.
    """

    def __init__(self, *args: Any, stats: RtpStats, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stats = stats
        self._due: float | None = None

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        late = 0.0 if self._due is None else time.monotonic() - self._due
        self._due = None
        if not await super().write_audio_frame(frame):
            return False
        self.stats.packets_out += 1
        self.stats.lateness.record(late)
        return True

    async def _write_audio_sleep(self) -> None:
        now = time.monotonic()
        due = self._next_send_time if self._next_send_time > now else now
        queued = self._audio_queued()
        await super()._write_audio_sleep()
        if queued and self._audio_queued():  # not if a barge-in emptied the queue meanwhile
            self._due = due

    def _audio_queued(self) -> bool:
        queue = getattr(self._media_senders.get(None), "_audio_queue", None)
        return queue is not None and queue.has_frame(OutputAudioRawFrame)


class _MeteredWebsocketTransport(FastAPIWebsocketTransport):
    """``FastAPIWebsocketTransport`` with ``_MeteredOutput`` in place of its output."""

    def __init__(self, websocket: Any, params: FastAPIWebsocketParams, stats: RtpStats) -> None:
        super().__init__(websocket, params)
        self._output = _MeteredOutput(
            self, self._client, self._params, name=self._output_name, stats=stats
        )


class _TimedSession(RtpSession):
    """A call's RTP session that also times each of the agent's answers where the worker
    meets the network: from the caller's last voiced packet received to the first packet
    of the agent's answer handed to the sender (which sends it in the next 20 ms slot).
    The same measure for both pipelines, whatever their turn logic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers_ms: list[float] = []
        self._heard_at: float | None = None
        self._saying_until = 0.0

    def _put_frame(self, frame: RtpFrame) -> None:
        if not frame.concealed and _rms(frame.pcm) >= VOICED_RMS:
            self._heard_at = time.monotonic()
        super()._put_frame(frame)

    def write(self, pcm16_8k: bytes) -> None:
        now = time.monotonic()
        heard = self._heard_at
        if now > self._saying_until + ANSWER_GAP_S and heard is not None:
            self.answers_ms.append(1000 * (now - heard))  # a new utterance answers it
            self._heard_at = None
        self._saying_until = max(self._saying_until, now) + len(pcm16_8k) / 2 / 8000
        super().write(pcm16_8k)


class _Sessions(list[RtpSession]):
    """The RTP sessions of a worker's calls, kept as the UA's media factory opens them."""

    async def open(self, rtp_host: str) -> RtpSession:
        session = await _TimedSession.open(rtp_host, port=0)
        self.append(session)
        return session


def _rms(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32)
    return float(np.sqrt(np.mean(samples * samples))) if len(samples) else 0.0


#: What one meter has counted so far: lateness buckets, skipped slots, underruns, answers.
Reading = tuple[list[int], int, int, list[float]]


def _stats(meter: RtpStats | RtpSession) -> RtpStats:
    return meter.stats if isinstance(meter, RtpSession) else meter


async def _read(meter: RtpStats | RtpSession) -> Reading:
    """A meter's counts now (the sender's, asked for, when it is a call's RTP session)."""
    stats = await meter.refresh_stats() if isinstance(meter, RtpSession) else meter
    answers = list(meter.answers_ms) if isinstance(meter, _TimedSession) else []
    return list(stats.lateness.counts), stats.skipped, stats.underruns, answers


async def _snapshot(meters: Sequence[RtpStats | RtpSession]) -> list[Reading]:
    """Every call's counts now (copies; added up after the calls end)."""
    return list(await asyncio.gather(*(_read(meter) for meter in meters)))


def _window(
    started: list[Reading], ended: list[Reading]
) -> tuple[list[int], int, int, list[float]]:
    """Bucket counts, skipped slots, underruns and answers of all calls between two
    snapshots."""
    counts = [0] * (LatenessHistogram.BUCKETS + 1)
    skipped = underruns = 0
    answers: list[float] = []
    empty: Reading = ([0] * len(counts), 0, 0, [])
    for i, (counts1, skipped1, underruns1, answers1) in enumerate(ended):
        counts0, skipped0, underruns0, answers0 = started[i] if i < len(started) else empty
        for bucket, (a, b) in enumerate(zip(counts0, counts1, strict=True)):
            counts[bucket] += b - a
        skipped += skipped1 - skipped0
        underruns += underruns1 - underruns0
        answers += answers1[len(answers0) :]
    return counts, skipped, underruns, answers


def _busy_cpu_s(cpus: set[int] | None = None) -> float:
    """CPU seconds the machine's cores (or only ``cpus``) have been busy since boot (Linux)."""
    lines = Path("/proc/stat").read_text().splitlines()
    if cpus is None:
        rows = [lines[0]]
    else:
        rows = [line for line in lines if line.split()[0] in {f"cpu{c}" for c in cpus}]
    busy = 0
    for row in rows:
        fields = [int(v) for v in row.split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        busy += sum(fields[:8]) - idle
    return busy / os.sysconf("SC_CLK_TCK")


async def _until(condition: Callable[[], bool], deadline: float, waiting_for: str) -> None:
    loop = asyncio.get_running_loop()
    while not condition():
        if loop.time() > deadline:
            raise BenchError(f"timed out waiting for {waiting_for}")
        await asyncio.sleep(POLL_S)


async def _carry(
    live: Callable[[], int],
    calls: int,
    meters: Sequence[RtpStats | RtpSession],
    timeout_s: float,
) -> dict[str, Any]:
    """Wait for ``calls`` calls at once, measure until the first ends, wait for the rest."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    most = 0
    core = os.sched_getaffinity(0)

    def all_up() -> bool:
        nonlocal most
        most = max(most, live())
        return most >= calls

    def now() -> tuple[float, float, float, float]:
        return time.monotonic(), time.process_time(), _busy_cpu_s(), _busy_cpu_s(core)

    try:
        await _until(all_up, deadline, f"{calls} calls at once")
    except BenchError:
        raise BenchError(f"only {most} of {calls} calls were up at once") from None
    await asyncio.sleep(SETTLE_S)
    started, opened = now(), await _snapshot(meters)
    logger.info("%d calls up: window open", calls)
    await _until(lambda: live() < calls, deadline, "the first call to end")
    ended, closed = now(), await _snapshot(meters)
    logger.info("a call ended: window closed after %.1f s", ended[0] - started[0])
    await _until(lambda: live() == 0, deadline, "all calls to end")
    counts, skipped, underruns, answers = _window(opened, closed)
    ramp_counts, ramp_skipped, ramp_underruns, _ = _window([], opened)
    return {
        "calls": calls,
        "window_s": ended[0] - started[0],
        "cpu_s": ended[1] - started[1],
        "machine_cpu_s": ended[2] - started[2],
        "core_cpu_s": ended[3] - started[3],
        "counts": counts,
        "skipped": skipped,
        "underruns": underruns,
        # Answers are timed at the RTP edge (_TimedSession): not on the websocket.
        "answers_ms": answers if any(isinstance(m, _TimedSession) for m in meters) else None,
        "ramp_counts": ramp_counts,
        "ramp_skipped": ramp_skipped,
        "ramp_underruns": ramp_underruns,
        # The calls' worst over their whole life (their sessions are closed: final counts).
        "max_s": max((_stats(m).lateness.max_s for m in meters), default=0.0),
        "realtime": SENDER.refused is None,
    }


async def _sip_worker(
    ctx: CallContext, host: str, port: int, calls: int, timeout_s: float
) -> dict[str, Any]:
    from agent.server.app import CALLS, SIP, make_app

    app = make_app(ctx)
    runner = web.AppRunner(app, access_log=None)
    meters = _Sessions()

    try:
        await runner.setup()  # starts the SIP endpoint on SIP_PORT
        app[SIP].media = meters.open  # the UA's media factory: the default, timed and kept
        site = web.TCPSite(runner, host, port)  # /health: the bench waits for it
        await site.start()
        return await _carry(lambda: len(app[CALLS].tasks()), calls, meters, timeout_s)
    finally:
        await runner.cleanup()


def plain_pipeline(ctx: CallContext, transport: BaseTransport, call_id: str) -> PipelineWorker:
    """The baseline of ``bench capacity``: pipecat's stock voice pipeline, nothing of ours
    but the clients of our model servers (the stubs speak our STT and TTS protocols).

    pipecat's VAD processor (on our VAD analyzer, the same settings), its default turn
    strategies instead of smart-turn, its context aggregators and OpenAI LLM service on
    every turn instead of the policy; no guard, recording, ledger or call records.
    """
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.processors.audio.vad_processor import VADProcessor
    from pipecat.services.openai.llm import OpenAILLMService

    from agent.pipeline.stt import StreamingSTTService
    from agent.pipeline.tts import StreamingTTSService
    from agent.pipeline.vad import create_vad_analyzer

    settings, models = ctx.settings, ctx.models
    aggregators = LLMContextAggregatorPair(LLMContext())
    pipeline = Pipeline(
        [
            transport.input(),
            VADProcessor(vad_analyzer=create_vad_analyzer(settings)),
            StreamingSTTService(
                url=models.stt_url, session=ctx.sessions.session("stt"), call_id=call_id
            ),
            aggregators.user(),
            OpenAILLMService(
                api_key=settings.llm_api_key or "none",
                base_url=models.llm_url,
                settings=OpenAILLMService.Settings(model=settings.llm_model),
            ),
            StreamingTTSService(url=models.tts_url, session=ctx.sessions.session("tts")),
            transport.output(),
            aggregators.assistant(),
        ]
    )
    return PipelineWorker(
        pipeline,
        params=PipelineParams(
            audio_in_sample_rate=CARRIER_SAMPLE_RATE, audio_out_sample_rate=CARRIER_SAMPLE_RATE
        ),
        enable_rtvi=False,
        idle_timeout_secs=None,
    )


async def _plain_sip_worker(
    ctx: CallContext, host: str, port: int, calls: int, timeout_s: float
) -> dict[str, Any]:
    """``plain_pipeline`` on our SIP user agent and RTP engine, as the agent's calls are."""
    from pipecat.frames.frames import TTSSpeakFrame
    from pipecat.workers.runner import WorkerRunner

    from telephony.sip import call, ua

    meters = _Sessions()
    live: set[str] = set()

    async def on_call(line: call.SipCall) -> None:
        await line.answer()
        if line.state != "confirmed":
            return
        call_id = uuid.uuid4().hex
        transport = line.transport()
        worker = plain_pipeline(ctx, transport, call_id)

        @transport.event_handler("on_client_connected")
        async def _greet(_transport: Any, _client: Any) -> None:
            await worker.queue_frame(TTSSpeakFrame(ctx.prompts.greeting.format(consumer_name="")))

        @transport.event_handler("on_client_disconnected")
        async def _gone(_transport: Any, _client: Any) -> None:
            await worker.cancel()

        live.add(call_id)
        try:
            runner = WorkerRunner(handle_sigint=False)
            await runner.add_workers(worker)
            await runner.run()
        finally:
            live.discard(call_id)
            await line.hang_up()

    assert ctx.settings.sip_port is not None
    endpoint = ua.SipEndpoint(
        ctx.settings.sip_host, ctx.settings.sip_port, on_call=on_call, media=meters.open
    )

    async def healthy(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    health = web.Application()
    health.router.add_get("/health", healthy)
    runner = web.AppRunner(health, access_log=None)
    await endpoint.start()
    try:
        await runner.setup()
        await web.TCPSite(runner, host, port).start()  # /health: the bench waits for it
        return await _carry(lambda: len(live), calls, meters, timeout_s)
    finally:
        await runner.cleanup()
        await endpoint.close()


async def _websocket_worker(
    ctx: CallContext, host: str, port: int, calls: int, timeout_s: float
) -> dict[str, Any]:
    import uvicorn

    from agent.server.app import CALLS, make_app, start_call

    app = make_app(ctx)  # never served: it holds the calls, as the agent server's does
    meters: list[RtpStats] = []
    api = FastAPI()

    @api.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @api.websocket("/media")
    async def media(websocket: WebSocket) -> None:
        await websocket.accept()
        start = None
        while start is None:
            message = json.loads(await asyncio.wait_for(websocket.receive_text(), 5.0))
            if message.get("event") == "start":
                start = parse_start("twilio", message)
        serializer = TwilioFrameSerializer(
            start.stream_id, params=TwilioFrameSerializer.InputParams(auto_hang_up=False)
        )
        params = FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            audio_in_sample_rate=CARRIER_SAMPLE_RATE,
            audio_out_sample_rate=CARRIER_SAMPLE_RATE,
            audio_out_10ms_chunks=2,  # 20 ms, as RTP (pipecat's default is 40 ms)
            serializer=serializer,
        )
        stats = RtpStats()
        meters.append(stats)
        transport = _MeteredWebsocketTransport(websocket, params, stats)
        await start_call(app, transport, start.call_info()).task

    server = uvicorn.Server(
        uvicorn.Config(api, host=host, port=port, log_level="warning", lifespan="off")
    )
    serving = asyncio.create_task(server.serve())
    try:
        return await _carry(lambda: len(app[CALLS].tasks()), calls, meters, timeout_s)
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10.0)


async def _work(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings.from_env(dict(os.environ))
    if settings.embedded_models:
        raise BenchError("set STT_URL, LLM_URL and TTS_URL (the stub server's)")
    if args.pipeline == "plain":
        if args.transport != "sip":
            raise BenchError("the plain pipecat pipeline is measured on SIP only")
        worker = _plain_sip_worker
    else:
        worker = _sip_worker if args.transport == "sip" else _websocket_worker
    async with AgentRuntime(settings) as ctx:
        return await worker(ctx, args.host, args.port, args.calls, args.timeout)


def worker_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the worker process: carry the calls, write the figures, exit."""
    parser = server_arguments("A bench worker: carries the calls, writes their RTP lateness.")
    parser.add_argument("--transport", choices=sorted(TRANSPORTS), required=True)
    parser.add_argument("--pipeline", choices=sorted(PIPELINES), default="ours")
    parser.add_argument("--calls", type=int, required=True, help="calls carried at once")
    parser.add_argument("--result", type=Path, required=True, help="where to write the JSON")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for it all")
    args = parse_server_arguments(parser, argv)
    from loguru import logger as pipecat_logger

    pipecat_logger.remove()  # pipecat's per-frame lines would cost CPU in the worker
    pipecat_logger.add(sys.stderr, level="WARNING")
    try:
        result = asyncio.run(_work(args))
    except BenchError as e:
        args.result.write_text(json.dumps({"error": str(e)}))
        return 1
    args.result.write_text(
        json.dumps({"transport": args.transport, "pipeline": args.pipeline, **result})
    )
    return 0


# --- the bench: the callers, the steps, the table ----------------------------------------


@dataclasses.dataclass
class Packets:
    """Outgoing packets of all calls over a stretch of time: their lateness, the slots
    skipped, and the slots sent as silence because the agent's audio came too late."""

    lateness: LatenessHistogram
    skipped: int
    underruns: int = 0

    @classmethod
    def from_counts(
        cls, counts: list[int], skipped: int, max_s: float, underruns: int = 0
    ) -> Packets:
        # max_s: the calls' worst over their whole life, so only ≥100 ms shows it.
        return cls(LatenessHistogram.from_counts(counts, max_s), skipped, underruns)

    @property
    def within(self) -> float:
        """Share that left within LIMIT_S carrying the audio due: a slot the RTP sender
        skipped, or sent as silence in an underrun, counts as late."""
        sent = self.lateness.count
        if not sent + self.skipped:
            return 0.0
        on_time = self.lateness.fraction_within(LIMIT_S) * sent - self.underruns
        return max(0.0, on_time) / (sent + self.skipped)


@dataclasses.dataclass(frozen=True)
class Variant:
    """What one series of steps runs: a pipeline on a transport, named in the table."""

    name: str
    transport: str
    pipeline: str = "ours"


#: ``bench sip``: the agent's pipeline on our SIP stack and on pipecat's websocket transport.
TRANSPORT_VARIANTS = tuple(Variant(t, t) for t in TRANSPORTS)
#: ``bench capacity``: the agent's pipeline and pipecat's stock one, both on our SIP stack.
PIPELINE_VARIANTS = tuple(Variant(p, "sip", p) for p in PIPELINES)


@dataclasses.dataclass
class Step:
    """One step: ``calls`` carried at once; the window's packets, answers and CPU, the
    ramp-up's packets."""

    variant: str
    calls: int
    window_s: float
    cpu_s: float
    machine_cpu_s: float
    core_cpu_s: float
    window: Packets
    ramp: Packets
    #: None where they are not timed (the websocket transport).
    answers_ms: list[float] | None
    #: The caller's lines in the window, each owed an answer (calls x whole cycles).
    lines: int
    #: Whether the worker's RTP sender had real-time priority.
    realtime: bool = False
    #: The answer p95 of the variant's lightest step in the run (None: this is that step).
    reference_ms: float | None = None

    @classmethod
    def from_json(cls, variant: str, data: dict[str, Any], cycle_s: float) -> Step:
        return cls(
            variant,
            data["calls"],
            data["window_s"],
            data["cpu_s"],
            data["machine_cpu_s"],
            data["core_cpu_s"],
            Packets.from_counts(data["counts"], data["skipped"], data["max_s"], data["underruns"]),
            Packets.from_counts(
                data["ramp_counts"], data["ramp_skipped"], data["max_s"], data["ramp_underruns"]
            ),
            data["answers_ms"],
            data["calls"] * int(data["window_s"] / cycle_s),
            data.get("realtime", False),
        )

    @property
    def answer_p95_ms(self) -> float:
        """The answers' p95, a line left unanswered counting as never answered (inf);
        nan where answers are not timed."""
        if self.answers_ms is None:
            return math.nan
        missing = max(0, self.lines - len(self.answers_ms))
        values = [*self.answers_ms, *[math.inf] * missing]
        return percentile(values, 0.95) if values else math.inf

    @property
    def passed(self) -> bool:
        """Its packets on time with their audio, and its answers (where timed) as quick
        as the lightest step's but for ANSWER_SLACK_MS."""
        on_time = self.window.lateness.count > 0 and self.window.within >= TARGET
        if self.answers_ms is None:
            return on_time
        reference = self.answer_p95_ms if self.reference_ms is None else self.reference_ms
        return on_time and self.answer_p95_ms <= reference + ANSWER_SLACK_MS

    @property
    def answered(self) -> str:
        """Answers against lines owed, for the table ("–": not timed)."""
        return "–" if self.answers_ms is None else f"{len(self.answers_ms)}/{self.lines}"

    @property
    def cpu_percent(self) -> float:
        """The worker's CPU over the window, in % of one core."""
        return 100 * self.cpu_s / self.window_s

    @property
    def core_percent(self) -> float:
        """How busy the worker's cores were over the window (all processes on them), in %
        of one core."""
        return 100 * self.core_cpu_s / self.window_s


def _caller_audio() -> bytes:
    """The caller's side of a call as G.711 mu-law: a pause, the line, a pause."""
    from tools.simulate import CallerVoice

    before, after = (bytes(2 * int(s * CARRIER_SAMPLE_RATE)) for s in CALLER_PAUSES_S)
    pcm = before + CallerVoice(CARRIER_SAMPLE_RATE).say(CALLER_LINE) + after
    frame = 2 * int(PACKET_S * CARRIER_SAMPLE_RATE)
    pcm += bytes(-len(pcm) % frame)  # whole packets, so every loop is aligned
    return g711.encode("PCMU", pcm)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _sipp_calls(port: int, calls: int, call_s: float, workdir: Path) -> None:
    """``calls`` sipp calls at CALL_RATE per second, each ``call_s`` long."""
    timeout_s = call_s + calls / CALL_RATE + 30
    command = [
        "sipp", f"127.0.0.1:{port}", "-sf", str(workdir / "bench_call.xml"), "-s", "agent",
        "-m", str(calls), "-l", str(calls), "-r", str(CALL_RATE), "-d", str(int(call_s * 1000)),
        "-i", "127.0.0.1", "-p", str(_free_udp_port()),
        "-mi", "127.0.0.1", "-mp", str(_free_udp_port()),
        "-timeout", f"{int(timeout_s)}s", "-timeout_error", "-nostdin",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=workdir
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s + 10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        text = output.decode(errors="replace")
        raise BenchError(f"sipp failed ({process.returncode}):\n{text[-2000:]}")


async def _websocket_call(url: str, audio: bytes, call_s: float) -> None:
    """One caller on the media stream: ``start``, then 20 ms of voice every 20 ms, ``stop``."""
    sid = f"MZ{uuid.uuid4().hex}"
    frame = int(PACKET_S * CARRIER_SAMPLE_RATE)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:

        async def drain() -> None:
            async for _ in ws:
                pass

        reader = asyncio.create_task(drain())
        try:
            await ws.send_json({"event": "connected", "protocol": "Call", "version": "1.0.0"})
            await ws.send_json(
                {
                    "event": "start",
                    "streamSid": sid,
                    "start": {
                        "streamSid": sid,
                        "callSid": f"CA{uuid.uuid4().hex}",
                        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
                    },
                }
            )
            start = loop.time()
            for slot in range(int(call_s / PACKET_S)):
                delay = start + slot * PACKET_S - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                offset = slot * frame % len(audio)
                payload = base64.b64encode(audio[offset : offset + frame]).decode()
                await ws.send_json(
                    {"event": "media", "streamSid": sid, "media": {"payload": payload}}
                )
            await ws.send_json({"event": "stop", "streamSid": sid})
            await ws.close()
        finally:
            reader.cancel()


async def _websocket_calls(port: int, calls: int, call_s: float, audio: bytes) -> None:
    """``calls`` websocket callers at CALL_RATE per second, each ``call_s`` long."""
    url = f"ws://127.0.0.1:{port}/media"

    async def caller(i: int) -> None:
        await asyncio.sleep(i / CALL_RATE)
        await _websocket_call(url, audio, call_s)

    timeout_s = call_s + calls / CALL_RATE + 30
    await asyncio.wait_for(asyncio.gather(*(caller(i) for i in range(calls))), timeout_s)


def _launch_worker(
    name: str,
    port: int,
    args: list[str],
    env: dict[str, str],
    workdir: Path,
    cpus: set[int] | None = None,
    profile: Path | None = None,
) -> ServerProcess:
    """``python -m tools.bench_sip`` with ``env`` on top of ours, output to its log, on
    ``cpus`` (None: wherever the kernel puts it), under py-spy writing ``profile`` when
    given. No death signal: if the bench dies, the worker's own ``--timeout`` ends it."""
    log_path = workdir / f"{name}.log"
    command = [
        sys.executable, "-m", "tools.bench_sip", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "WARNING", *args,
    ]  # fmt: skip
    if profile is not None:
        spy = py_spy()
        if spy is None:
            raise BenchError("py-spy is not installed (pip install '.[dev]')")
        sampler = [spy, "record", "--threads", "--subprocesses", "--nonblocking", "--format", "raw"]
        command = [*sampler, "--rate", str(PROFILE_RATE), "--output", str(profile), "--", *command]
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    full_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
    )
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=PROJECT_ROOT,
            start_new_session=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
    return ServerProcess(name, process, f"http://127.0.0.1:{port}", log_path)


async def _step(
    variant: Variant,
    calls: int,
    hold_s: float,
    workdir: Path,
    env: dict[str, str],
    audio: bytes,
    cpus: set[int] | None = None,
    profile: Path | None = None,
) -> Step:
    """A fresh worker carrying ``calls`` calls; every call lasts long enough that all of
    them are up together for ``hold_s`` (the ramp at CALL_RATE comes on top)."""
    call_s = hold_s + SETTLE_S + (calls - 1) / CALL_RATE
    timeout_s = call_s + 2 * calls / CALL_RATE + 30
    result = workdir / f"{variant.name}-{calls}.json"
    port = free_port()
    sip = variant.transport == "sip"
    worker = _launch_worker(
        f"worker-{variant.name}-{calls}",
        port,
        ["--transport", variant.transport, "--pipeline", variant.pipeline,
         "--calls", str(calls), "--result", str(result), "--timeout", str(timeout_s)],
        dict(env, SIP_PORT=str(port)) if sip else env,
        workdir,
        cpus,
        profile,
    )  # fmt: skip
    try:
        await worker.wait_healthy(WORKER_START_TIMEOUT_S)
        if sip:
            await _sipp_calls(port, calls, call_s, workdir)
        else:
            await _websocket_calls(port, calls, call_s, audio)
        await asyncio.wait_for(asyncio.to_thread(worker.process.wait), WORKER_EXIT_TIMEOUT_S)
    except (TimeoutError, BenchError, ServerStartError, aiohttp.ClientError) as e:
        raise BenchError(f"{variant.name}, {calls} calls: {e}\n{worker.log_tail()}") from None
    finally:
        await worker.stop()
    data = json.loads(result.read_text()) if result.exists() else {"error": "no result"}
    if "error" in data:
        raise BenchError(f"{variant.name}, {calls} calls: {data['error']}\n{worker.log_tail()}")
    return Step.from_json(variant.name, data, len(audio) / CARRIER_SAMPLE_RATE)


def _percent(share: float) -> str:
    """Rounded down, so that a step below TARGET never shows as meeting it."""
    return f"{math.floor(share * 10000 + 1e-6) / 100:.2f}%"


def _ms(seconds: float) -> str:
    top = LatenessHistogram.BUCKETS * LatenessHistogram.BUCKET_S
    return f"≥{top * 1000:.0f}" if seconds >= top else f"{seconds * 1000:.1f}"


def table(steps: Sequence[Step], column: str = "transport") -> str:
    """Markdown table: one row per variant (``column`` names them) and step."""
    cores = os.cpu_count() or 1
    rows = [
        f"| {column} | calls | packets | underruns | p50 ms | p99 ms | p99.9 ms | within 5 ms "
        "| answered | answer p50 ms | answer p95 ms | worker CPU % | worker's core CPU % "
        f"| all CPU % (of {100 * cores}) | ramp-up: within 5 ms | ramp-up: max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        h = s.window.lateness
        mark = "" if s.passed else " ✗"
        p50 = f"{percentile(s.answers_ms, 0.5):.0f}" if s.answers_ms else "–"
        rows.append(
            f"| {s.variant} | {s.calls} | {h.count} | {s.window.underruns} "
            f"| {_ms(h.percentile(50))} | {_ms(h.percentile(99))} | {_ms(h.percentile(99.9))} "
            f"| {_percent(s.window.within)}{mark} | {s.answered} | {p50} "
            f"| {_answer_ms(s.answer_p95_ms)} "
            f"| {s.cpu_percent:.0f} | {s.core_percent:.0f} "
            f"| {100 * s.machine_cpu_s / s.window_s:.0f} | {_percent(s.ramp.within)} "
            f"| {_ms(s.ramp.lateness.percentile(100))} |"
        )
    return "\n".join(rows)


def _answer_ms(ms: float) -> str:
    return "–" if math.isnan(ms) else "∞" if math.isinf(ms) else f"{ms:.0f}"


def carried(steps: Sequence[Step], variant: str) -> int:
    """The most calls ``variant`` carried in a step that met the criterion (0: none)."""
    return max((s.calls for s in steps if s.variant == variant and s.passed), default=0)


def _carried(steps: Sequence[Step], variant: str) -> str:
    n = carried(steps, variant)
    return str(n) if n else "none of the steps"


@dataclasses.dataclass
class Run:
    """What a bench measured: the steps, the caller's cycle, the profiles by variant."""

    steps: list[Step]
    cycle_s: float
    profiles: dict[str, tuple[Counter[str], int]]
    #: Whether the workers' RTP senders had real-time priority (all of them).
    realtime: bool


async def _run(
    variants: Sequence[Variant],
    steps: Sequence[int],
    hold_s: float,
    worker_cpus: set[int] | None,
    profile_calls: int | None = None,
) -> Run:
    """Each variant, step by step, then under py-spy with ``profile_calls`` calls if given."""
    results: list[Step] = []
    profiles: dict[str, tuple[Counter[str], int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sip-") as tmp:
        workdir = Path(tmp)
        audio = _caller_audio()
        (workdir / "caller.ulaw").write_bytes(audio)
        (workdir / "bench_call.xml").write_text(SIPP_SCENARIO)
        async with await ModelServers.start(stub=True, log_dir=workdir) as stub:
            env = {
                "STT_URL": stub.stt_url,
                "LLM_URL": stub.llm_url,
                "TTS_URL": stub.tts_url,
                "DATABASE_URL": f"sqlite:///{workdir / 'bench.db'}",
                "SIP_HOST": "127.0.0.1",
                "TTS_FALLBACK": "none",
                "LLM_MODE": "templates",
                # The worker must not turn calls away (503) before the criterion does.
                "MAX_CALLS": str(max([*steps, profile_calls or 0])),
            }
            for variant in variants:
                lightest: Step | None = None
                for calls in steps:
                    step = await _step(variant, calls, hold_s, workdir, env, audio, worker_cpus)
                    if lightest is None:
                        lightest = step
                    else:
                        step.reference_ms = lightest.answer_p95_ms
                    results.append(step)
                    _show(
                        f"  [{variant.name}] {calls} calls: {step.window.lateness.count} "
                        f"packets, {_percent(step.window.within)} within "
                        f"{LIMIT_S * 1000:.0f} ms, {step.answered} lines answered, answer p95 "
                        f"{_answer_ms(step.answer_p95_ms)} ms, worker's "
                        f"core {step.core_percent:.0f}% busy"
                    )
                    if not step.passed:
                        break
                if profile_calls:
                    raw = workdir / f"profile-{variant.name}.txt"
                    args = (variant, profile_calls, hold_s, workdir, env, audio, worker_cpus, raw)
                    await _step(*args)
                    profiles[variant.name] = summarize(raw.read_text())
                    _show(f"  [{variant.name}] profiled with {profile_calls} calls")
    realtime = all(step.realtime for step in results)
    return Run(results, len(audio) / CARRIER_SAMPLE_RATE, profiles, realtime)


def _show(text: str, error: bool = False) -> None:
    """The bench's progress, table and errors, on the terminal."""
    print(text, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


def _measure(
    variants: Sequence[Variant],
    steps: Sequence[int],
    hold_s: float,
    worker_cpus: set[int] | None,
    profile_calls: int | None = None,
) -> Run | int:
    """The arguments checked, then the steps run; an exit status when either fails."""
    import shutil

    if not steps or any(n < 1 for n in steps) or list(steps) != sorted(set(steps)):
        _show(f"steps must be increasing positive call counts like 1,2,4,8, got {steps}", True)
        return 2
    if hold_s < 1:
        _show(f"the hold must be at least 1 s (~50 packets per call), got {hold_s:g}", True)
        return 2
    if shutil.which("sipp") is None:
        _show("sipp must be installed (Debian: apt-get install sip-tester)", True)
        return 2
    logging.getLogger("agent.runtime.embedded").setLevel(logging.WARNING)
    _show(f"stepping {', '.join(map(str, steps))} concurrent calls, {hold_s:g} s each ...")
    try:
        return asyncio.run(_run(variants, steps, hold_s, worker_cpus, profile_calls))
    except BenchError as e:
        _show(f"bench failed: {e}", True)
        return 1


def _criterion() -> str:
    """What a step must meet, as the reports say it."""
    return (
        f"a step passes when at least {TARGET:.1%} of the agent's outgoing 20 ms packets "
        f"left within {LIMIT_S * 1000:.0f} ms of their schedule carrying the audio that was "
        "due (a slot skipped after a stall, or sent as silence because the agent's audio "
        "came late, an *underrun*, counts as late), and its answers were no more than "
        f"{ANSWER_SLACK_MS:.0f} ms slower (p95) than with the run's fewest calls, a caller "
        "line left unanswered counting as never answered"
    )


def _columns() -> str:
    """The table's columns, as the reports explain them."""
    return (
        "*packets*: every packet the agent sent in the window; *underruns*: slots sent as "
        "silence inside the agent's speech because its audio came too late (the sender "
        f"counts a silence of at most {MAX_UNDERRUN_SLOTS} slots that ends in more audio); "
        "*p50/p99/p99.9 ms*: lateness, the send against the packet's absolute deadline; "
        "*answered*: the agent's answers in the window against the caller's lines in it "
        "(whole cycles); *answer ms*: from the caller's last voiced packet received to the "
        "first packet of the agent's answer handed to the sender (`_TimedSession`: the same "
        "measure for every pipeline, endpointing included); *worker CPU %*: the worker "
        "process's CPU time over the window, in % of one core; *worker's core CPU %*: how "
        "busy the worker's core(s) were, its sender and smart-turn processes included; "
        "*all CPU %*: every process on the machine; *ramp-up*: everything before the window "
        "(calls arriving, their greetings)."
    )


def run_sip_bench(output: str, steps: Sequence[int], hold_s: float) -> int:
    """``python -m agent bench sip``: the steps on both transports, the table, the report."""
    measured = _measure(TRANSPORT_VARIANTS, steps, hold_s, None)
    if isinstance(measured, int):
        return measured
    results, cycle_s = measured.steps, measured.cycle_s
    text = table(results)
    _show("")
    _show(text)
    command = f"python -m agent bench sip --steps {','.join(map(str, steps))} --hold {hold_s:g}"
    report = "\n".join(
        [
            "# SIP: concurrent calls one worker carries with its outgoing audio on time",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with `{command}`.",
            "",
            f"**Criterion**: {_criterion()}; stub models. "
            f"**Carried**: {_carried(results, 'sip')} on SIP, "
            f"{_carried(results, 'websocket')} on the websocket baseline. Stepping stops at "
            "the first step that fails (✗).",
            "",
            "One worker process runs the agent server's own call path (`make_app`, "
            "`start_call`: VAD, smart-turn, STT, policy, guard, TTS, call records in SQLite) "
            "on the instant stub models (one `infra/stub_server.py` process for the run); "
            f"each step is a fresh worker. Calls arrive at {CALL_RATE} per second; once all "
            f"are up the worker waits {SETTLE_S:g} s, then measures until the first call ends "
            f"({hold_s:g} s). *ramp-up* is everything before that window: calls arriving, "
            f'their greetings. The caller says "{CALLER_LINE}" every {cycle_s:.1f} s (Piper, '
            'looped); the agent greets, then answers every turn (the stub STT hears "yes that '
            'is me", the policy asks for the date of birth again); the stub TTS says each text '
            "it is sent as a 0.3 s tone.",
            "",
            f"- **sip**: {TRANSPORTS['sip']}, each call streaming the caller's voice as RTP. "
            "The agent's packets, a continuous 50 a second per call (silence included), leave "
            "from the worker's RTP sender process, which counts them (`telephony/rtp/sender.py`).",
            f"- **websocket** (the baseline): {TRANSPORTS['websocket']}, under uvicorn in "
            "the worker, 20 ms chunks; the callers are clients in the bench process "
            "streaming the same voice as Twilio media events. *packets*: the audio chunks "
            "pipecat wrote, only while the agent speaks (it sends nothing in silence), so far "
            "fewer: p99.9 of a few hundred is their maximum, and below 1,000 packets a single "
            "late one fails the criterion. Lateness: the chunk's write against pipecat's own "
            "send clock (the end of its sleep after the chunk before, or at once when it found "
            "itself behind), counted for chunks already queued when the one before left; the "
            "first chunk of each utterance counts as on time, and no underrun is counted; "
            "answers are not timed (the criterion is the packets'). pipecat runs one chunk "
            "ahead of real time, RTP none.",
            "",
            _columns(),
            "",
            text,
            "",
        ]
    )
    return _write_report(output, report)


def run_capacity_bench(
    output: str,
    steps: Sequence[int],
    hold_s: float,
    profile_calls: int | None = None,
    baseline: str | None = None,
) -> int:
    """``python -m agent bench capacity``: calls per core, the agent's pipeline vs pipecat's.

    The worker runs on one core of its own (the first this process may use), so the calls
    it carries are the calls per core; the stub models, sipp and this process share the
    other cores, so they do not take the worker's time. Both pipelines run on the same SIP
    stack, the same stub models and the same caller audio; only what is between the
    transport's input and output differs (``plain_pipeline``). With ``profile_calls``,
    one more worker per pipeline carries that many calls under py-spy
    (``tools.bench_profile``).
    """
    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        _show("bench capacity needs two cores: one for the worker, one for the callers", True)
        return 2
    worker_core = min(cores)
    # This process, and the stub server and sipp it starts, keep off the worker's core.
    os.sched_setaffinity(0, cores - {worker_core})
    try:
        measured = _measure(PIPELINE_VARIANTS, steps, hold_s, {worker_core}, profile_calls)
    finally:
        os.sched_setaffinity(0, cores)
    if isinstance(measured, int):
        return measured
    results, cycle_s = measured.steps, measured.cycle_s
    text = table(results, column="pipeline")
    _show("")
    _show(text)
    ours, plain = carried(results, "ours"), carried(results, "plain")
    command = (
        f"python -m agent bench capacity --steps {','.join(map(str, steps))} --hold {hold_s:g}"
        + (f" --profile {profile_calls}" if profile_calls else "")
    )
    profiled = [
        line
        for name, (parts, total) in measured.profiles.items()
        for line in (f"**{name}**, {profile_calls} calls:", "", profile_table(parts, total), "")
    ]
    if profiled:
        _show("")
        _show("\n".join(profiled))
        profiled = [
            "## Where the worker's CPU goes",
            "",
            f"One more worker per pipeline carried {profile_calls} calls under py-spy "
            "(`py-spy record --threads --subprocesses --nonblocking --rate "
            f"{PROFILE_RATE}`), the samples of the worker and its helper processes summed by "
            "part of the path (`tools/bench_profile.py`: each sample of the event loop counts "
            "for the innermost frame of its stack that belongs to a part; the RTP sender's and "
            "the smart-turn model's count whole; the waits are idle and left out).",
            "",
            *profiled,
        ]
    report = "\n".join(
        [
            "# Calls per core: the agent's pipeline vs pipecat's stock pipeline",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {_machine()} with `{command}`.",
            "",
            f"**Calls per core** (the most calls one worker on one core carried; {_criterion()}): "
            f"**{ours}** for the agent's pipeline, **{plain}** for pipecat's stock pipeline on "
            "the same transport. Stepping stops at the first step that fails (✗); the true "
            "figure lies between the last step passed and that one.",
            "",
            f"The worker process is pinned to core {worker_core}, and its helper processes "
            "with it (the RTP sender, the smart-turn model); the stub models (one "
            "`infra/stub_server.py`), sipp and the bench share the other core(s). Each step is "
            f"a fresh worker. sipp places the calls at {CALL_RATE} per second over our SIP "
            "user agent and RTP engine, each streaming the caller's voice as RTP: "
            f'"{CALLER_LINE}" every {cycle_s:.1f} s (Piper, looped), a line far more often '
            f"than a real caller's. Once all are up the worker waits {SETTLE_S:g} s, then "
            f"measures until the first call ends ({hold_s:g} s). The RTP sender ran with "
            f"{'real-time priority' if measured.realtime else 'ordinary priority'}.",
            "",
            f"- **ours**: {PIPELINES['ours']}: VAD, smart-turn v3, STT, the conversation "
            "policy, the output guard, the recording taps, TTS, the turn ledger and the "
            "call records in SQLite; replies are the policy's templates (`LLM_MODE=templates`).",
            f"- **plain**: {PIPELINES['plain']}: pipecat's VAD processor on the same VAD, its "
            "default turn strategies, its context aggregators and OpenAI LLM service (the "
            "stub's chat completions, every turn), our STT and TTS clients (the stubs speak "
            "their protocols); nothing else.",
            "",
            _columns(),
            "",
            text,
            "",
            *([baseline, ""] if baseline else []),
            *profiled,
        ]
    )
    return _write_report(output, report)


if __name__ == "__main__":
    sys.exit(worker_main())
