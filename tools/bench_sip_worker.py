"""The worker of ``bench sip`` and ``bench capacity``: its own process, carrying the calls.

It runs the agent server's own call path (or, for ``bench capacity``, pipecat's stock
pipeline, ``plain_pipeline``) on stub models, waits until ``--calls`` calls are up at once,
and counts the outgoing packets' lateness, the answers and its CPU over the window until the
first call ends (tools/bench_sip.py describes the whole). It writes the figures as JSON.

Run one alone: ``SIP_PORT=5070 python -m tools.bench_sip_worker --calls 4 --port 5070
--result out.json``, model URLs in ``STT_URL``, ``LLM_URL``, ``TTS_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.transports.base_transport import BaseTransport

from agent.config import Settings
from agent.pipeline.call import CallContext
from agent.runtime.context import AgentRuntime
from infra.serving import parse_server_arguments, server_arguments
from telephony.carriers.media_stream import CARRIER_SAMPLE_RATE
from telephony.rtp.sender import SENDER, LatenessHistogram
from telephony.rtp.session import RtpFrame, RtpSession
from tools.bench_profile import Sampler

logger = logging.getLogger(__name__)

PIPELINES = {
    "ours": "the agent's call path (agent.server.app: start_call)",
    "plain": "pipecat's stock voice pipeline (plain_pipeline)",
}
POLL_S = 0.02
#: The host's smart-turn service the calls ask (its process id): its CPU over the window
#: is measured apart from the worker's, as a model's.
SERVICE_PID_ENV = "BENCH_SMART_TURN_PID"
#: The window opens this long after the last call is up, and not before every call has
#: answered its caller once: building a call's pipeline holds the event loop (see the
#: report), which is the ramp-up's story, not the steady state's; and the first answer
#: verifies the caller (tools/bench_sip_callers.py), said word for word in phrase mode,
#: while every later one asks the LLM in every pipeline. Long enough for the caller's first
#: line (it ends 1.8 s into the call) and its answer.
SETTLE_S = 3.0
#: A caller's packet this loud (RMS of 16-bit samples) is voice: the bench's caller is
#: Piper's speech between stretches of digital silence.
VOICED_RMS = 300.0
#: The agent's audio after this long without any starts a new utterance: an answer.
ANSWER_GAP_S = 0.2


class BenchError(RuntimeError):
    """A step could not be measured (a process failed, calls were not carried)."""


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


class _Sessions(list[_TimedSession]):
    """The RTP sessions of a worker's calls, kept as the UA's media factory opens them."""

    async def open(self, rtp_host: str) -> _TimedSession:
        session = await _TimedSession.open(rtp_host, port=0)
        assert isinstance(session, _TimedSession)  # open() builds the class it is called on
        self.append(session)
        return session


def _rms(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32)
    return float(np.sqrt(np.mean(samples * samples))) if len(samples) else 0.0


#: What one meter has counted so far: lateness buckets, skipped slots, underruns, answers.
Reading = tuple[list[int], int, int, list[float]]


async def _read(session: _TimedSession) -> Reading:
    """A call's counts now (its sender's, asked for)."""
    stats = await session.refresh_stats()
    return list(stats.lateness.counts), stats.skipped, stats.underruns, list(session.answers_ms)


async def _snapshot(meters: Sequence[_TimedSession]) -> list[Reading]:
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


def _tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds ``root`` (this process) and its live descendants have used (Linux).

    A call's cost is not only the worker's: its RTP sender runs in a helper process, and
    the host's smart-turn service (``root``) is measured the same way. Unlike the busy time
    of the worker's core, this leaves out whatever else the machine runs there."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command, which may hold spaces
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


async def _until(condition: Callable[[], bool], deadline: float, waiting_for: str) -> None:
    loop = asyncio.get_running_loop()
    while not condition():
        if loop.time() > deadline:
            raise BenchError(f"timed out waiting for {waiting_for}")
        await asyncio.sleep(POLL_S)


async def _carry(
    live: Callable[[], int],
    calls: int,
    meters: Sequence[_TimedSession],
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

    service = int(os.environ.get(SERVICE_PID_ENV) or 0) or None

    def now() -> tuple[float, float, float, float, float]:
        return (
            time.monotonic(),
            _tree_cpu_s(),
            _busy_cpu_s(),
            _busy_cpu_s(core),
            _tree_cpu_s(service) if service else 0.0,
        )

    try:
        await _until(all_up, deadline, f"{calls} calls at once")
    except BenchError:
        raise BenchError(f"only {most} of {calls} calls were up at once") from None
    await asyncio.sleep(SETTLE_S)
    await _until(lambda: all(m.answers_ms for m in meters), deadline, "every call's first answer")
    sampler = Sampler()
    sampler.start()
    started, opened = now(), await _snapshot(meters)
    logger.info("%d calls up: window open", calls)
    try:
        await _until(lambda: live() < calls, deadline, "the first call to end")
        ended, closed = now(), await _snapshot(meters)
    finally:
        sampler.stop()
    logger.info("a call ended: window closed after %.1f s", ended[0] - started[0])
    await _until(lambda: live() == 0, deadline, "all calls to end")
    counts, skipped, underruns, answers = _window(opened, closed)
    ramp_counts, ramp_skipped, ramp_underruns, _ = _window([], opened)
    return {
        "calls": calls,
        "window_s": ended[0] - started[0],
        "tree_cpu_s": ended[1] - started[1],
        "machine_cpu_s": ended[2] - started[2],
        "core_cpu_s": ended[3] - started[3],
        "service_cpu_s": ended[4] - started[4],
        "counts": counts,
        "skipped": skipped,
        "underruns": underruns,
        "answers_ms": answers,
        "ramp_counts": ramp_counts,
        "ramp_skipped": ramp_skipped,
        "ramp_underruns": ramp_underruns,
        # The calls' worst over their whole life (their sessions are closed: final counts).
        "max_s": max((m.stats.lateness.max_s for m in meters), default=0.0),
        # Every answer of the calls' whole life: what the LLM requests are counted against.
        "answers_all": sum(len(m.answers_ms) for m in meters),
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

    pipecat's VAD processor (on our VAD analyzer, the same settings), its context
    aggregators, its turn tracking, and its OpenAI LLM service on every turn instead of
    the policy; no guard, recording, ledger or call records. The end of a turn is decided
    as the agent's calls decide it, so that both do the same work: smart-turn v3 asked of
    the host's service, the turn ended anyway after ``TURN_FALLBACK_SECS`` of silence
    (pipecat's default would run the model in the worker, with a 3 s fallback).
    """
    from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.processors.audio.vad_processor import VADProcessor
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy
    from pipecat.turns.user_turn_strategies import UserTurnStrategies

    from agent.pipeline.smart_turn import SmartTurnAnalyzer
    from agent.pipeline.stt import StreamingSTTService
    from agent.pipeline.tts import StreamingTTSService
    from agent.pipeline.vad import create_vad_analyzer

    settings, models = ctx.settings, ctx.models
    end_of_turn = SmartTurnAnalyzer(
        ctx.smart_turn, params=SmartTurnParams(stop_secs=settings.turn_fallback_secs)
    )
    strategies = UserTurnStrategies(
        stop=[TurnAnalyzerUserTurnStopStrategy(turn_analyzer=end_of_turn)]
    )
    aggregators = LLMContextAggregatorPair(
        LLMContext(), user_params=LLMUserAggregatorParams(user_turn_strategies=strategies)
    )
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


async def _work(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings.from_env(dict(os.environ))
    if settings.embedded_models:
        raise BenchError("set STT_URL, LLM_URL and TTS_URL (the stub server's)")
    worker = _plain_sip_worker if args.pipeline == "plain" else _sip_worker
    async with AgentRuntime(settings) as ctx:
        return await worker(ctx, args.host, args.port, args.calls, args.timeout)


def worker_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the worker process: carry the calls, write the figures, exit."""
    parser = server_arguments("A bench worker: carries the calls, writes their RTP lateness.")
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
    args.result.write_text(json.dumps({"pipeline": args.pipeline, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
