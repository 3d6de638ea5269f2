"""The turn ledger on a scripted frame sequence (unit test: processors are stand-ins)."""

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMTextFrame,
    MetricsFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import (
    LLMTokenUsage,
    LLMUsageMetricsData,
    STTUsage,
    STTUsageMetricsData,
    TTSUsageMetricsData,
)
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.ledger.latency import DEFINITION
from agent.pipeline.turns import CallProcessors, TurnLedger
from agent.pipeline.usage import ComputeUsageMetricsData, TTSAudioUsageMetricsData

CALL = "c" * 32
MS = 1_000_000


class Line:
    def __init__(self):
        self.vad, self.stt, self.user = FrameProcessor(), FrameProcessor(), FrameProcessor()
        self.llm, self.tts, self.out = FrameProcessor(), FrameProcessor(), FrameProcessor()
        self.records = []
        self.heard = []
        self.ledger = TurnLedger(
            CALL,
            CallProcessors(stt=self.stt, thinkers=(self.llm,), tts=self.tts, output=self.out),
            sink=self.records.append,
            on_transcript=lambda who, text: self.heard.append((who, text)),
        )

    async def push(self, at_ms, frame, src, dst=None, first=True):
        await self.ledger.on_push_frame(
            FramePushed(
                source=src,
                destination=dst or FrameProcessor(),
                frame=frame,
                direction=FrameDirection.DOWNSTREAM,
                timestamp=int(at_ms * MS),
                first_push=first,
            )
        )

    async def turn(self, t0, text="yes that is me", reply="Thank you."):
        await self.push(t0, UserStartedSpeakingFrame(), self.user)
        await self.push(t0 + 1000, VADUserStoppedSpeakingFrame(stop_secs=0.2), self.vad)
        await self.push(t0 + 1040, TranscriptionFrame(text, "", "now"), self.stt)
        stt_usage = STTUsageMetricsData(processor="stt", value=STTUsage(audio_seconds=1.3))
        await self.push(t0 + 1040, MetricsFrame(data=[stt_usage]), self.stt)
        await self.push(t0 + 1100, UserStoppedSpeakingFrame(), self.user)
        await self.push(t0 + 1102, LLMContextFrame(LLMContext()), self.user, self.llm)
        await self.push(t0 + 1180, LLMTextFrame(reply), self.llm)
        await self.push(t0 + 1190, TTSStartedFrame(), self.tts)
        await self.push(t0 + 1195, TTSTextFrame(reply, "sentence"), self.tts)
        await self.push(t0 + 1250, TTSAudioRawFrame(b"\0" * 640, 16000, 1), self.tts)
        await self.push(t0 + 1262, BotStartedSpeakingFrame(), self.out)
        usage = LLMTokenUsage(prompt_tokens=30, completion_tokens=4, total_tokens=34)
        await self.push(
            t0 + 1270,
            MetricsFrame(data=[LLMUsageMetricsData(processor="llm", value=usage)]),
            self.llm,
        )
        await self.push(
            t0 + 1270,
            MetricsFrame(data=[TTSUsageMetricsData(processor="tts", value=10)]),
            self.tts,
        )
        await self.push(t0 + 1300, LLMFullResponseEndFrame(), self.llm)


async def test_a_turn_is_broken_into_its_parts():
    line = Line()
    await line.turn(0)
    await line.push(2500, BotStoppedSpeakingFrame(), line.out)
    [record] = line.records
    assert record.number == 1
    assert record.user_text == "yes that is me"
    assert record.agent_text == "Thank you."
    assert record.endpointing_ms == 200  # last voiced at 800 (VAD stop 1000 - 200)
    assert record.stt_ms == 40
    assert record.llm_ttft_ms == 78
    assert record.tts_ttfb_ms == 60
    assert record.transport_out_ms == 12
    # agent.ledger.latency: from the VAD's stop, so the STT final and the end-of-turn decision
    # (committed at 1100) are inside it; voice-to-voice adds the endpointing wait.
    assert record.response_ms == 262
    assert record.voice_to_voice_ms == 462
    assert record.endpointing_ms + record.response_ms == record.voice_to_voice_ms
    assert record.latency_definition == DEFINITION
    assert record.stt_audio_s == 1.3
    assert (record.llm_prompt_tokens, record.llm_completion_tokens) == (30, 4)
    assert record.tts_characters == 10
    assert not record.interrupted
    assert line.heard == [("caller", "yes that is me"), ("agent", "Thank you.")]
    assert line.ledger.totals.llm_prompt_tokens == 30


async def test_the_servers_time_and_the_tts_audio_are_summed_for_the_price():
    line = Line()
    cached = LLMTokenUsage(
        prompt_tokens=50, completion_tokens=5, total_tokens=55, cache_read_input_tokens=40
    )
    usage = [
        ComputeUsageMetricsData(processor="stt", stage="stt", value=0.2),
        ComputeUsageMetricsData(processor="stt", stage="stt", value=0.1),
        ComputeUsageMetricsData(processor="llm", stage="llm", value=0.5),
        ComputeUsageMetricsData(processor="tts", stage="tts", value=0.03),
        TTSAudioUsageMetricsData(processor="tts", value=1.5),
        LLMUsageMetricsData(processor="llm", value=cached),
    ]
    await line.push(10, MetricsFrame(data=usage), line.stt)  # before any turn: still the call's
    await line.turn(100)
    await line.push(10, MetricsFrame(data=usage[:1]), line.stt, first=False)  # counted once

    totals = line.ledger.totals
    assert (totals.stt_compute_s, totals.llm_compute_s) == (0.30000000000000004, 0.5)
    assert (totals.tts_compute_s, totals.tts_audio_s) == (0.03, 1.5)
    assert (totals.llm_prompt_tokens, totals.llm_cached_tokens) == (80, 40)
    priced = totals.priced_as("sip", 60.0, fallback_tts_characters=7, worker_cpu_s=1.25)
    assert (priced.transport, priced.duration_s, priced.stt_audio_s) == ("sip", 60.0, 1.3)
    assert (priced.fallback_tts_characters, priced.worker_cpu_s) == (7, 1.25)
    assert (priced.llm_cached_tokens, priced.tts_compute_s) == (40, 0.03)


async def test_frames_pushed_on_are_counted_once():
    line = Line()
    await line.turn(0)
    # The same frames pushed again by later processors must not move the marks.
    await line.push(1500, UserStoppedSpeakingFrame(), line.llm, first=False)
    await line.push(1600, BotStartedSpeakingFrame(), line.tts, first=False)
    await line.push(2500, BotStoppedSpeakingFrame(), line.out)
    assert line.records[0].response_ms == 262


async def test_turns_follow_each_other_and_barge_in_is_marked():
    line = Line()
    await line.turn(0)
    await line.push(1400, InterruptionFrame(), line.user)  # caller cuts in while agent speaks
    await line.turn(1500, text="wait", reply="Sorry.")
    await line.push(5000, BotStoppedSpeakingFrame(), line.out)
    first, second = line.records
    assert first.interrupted and not second.interrupted
    assert (first.number, second.number) == (1, 2)
    assert second.user_text == "wait"


async def test_a_turn_without_vad_is_still_recorded():
    # A turn started from a transcript alone (no VAD frames): recorded, VAD parts unknown.
    line = Line()
    await line.push(0, TranscriptionFrame("hello", "", "now"), line.stt)
    await line.push(100, UserStoppedSpeakingFrame(), line.user)
    await line.push(102, LLMContextFrame(LLMContext()), line.user, line.llm)
    await line.push(200, LLMTextFrame("Hi."), line.llm)
    await line.push(210, TTSStartedFrame(), line.tts)
    await line.push(250, TTSAudioRawFrame(b"\0" * 640, 16000, 1), line.tts)
    await line.push(260, BotStartedSpeakingFrame(), line.out)
    await line.push(300, LLMFullResponseEndFrame(), line.llm)
    await line.push(900, BotStoppedSpeakingFrame(), line.out)
    [record] = line.records
    assert record.user_text == "hello"
    assert record.response_ms == 160  # from the commit: the only sign the caller was done
    assert record.endpointing_ms is None and record.voice_to_voice_ms is None


async def test_the_turn_in_progress_is_written_when_the_call_ends():
    line = Line()
    await line.turn(0)
    await line.push(1400, EndFrame(), line.user)
    assert len(line.records) == 1
    await line.push(1500, EndFrame(), line.llm, first=False)
    assert len(line.records) == 1


async def test_an_uncommitted_turn_is_not_written():
    line = Line()
    await line.push(0, UserStartedSpeakingFrame(), line.user)
    line.ledger.close()
    assert line.records == []


async def test_context_reaching_the_llm_commits_the_turn():
    # pipecat's user aggregator hands the context over before it announces the
    # turn's end; the turn is committed at the earlier of the two.
    line = Line()
    await line.push(0, UserStartedSpeakingFrame(), line.user)
    await line.push(1000, VADUserStoppedSpeakingFrame(stop_secs=0.2), line.vad)
    await line.push(1040, TranscriptionFrame("hi", "", "now"), line.stt)
    await line.push(1100, LLMContextFrame(LLMContext()), line.user, line.llm)
    await line.push(1101, UserStoppedSpeakingFrame(), line.user)
    await line.push(1180, LLMTextFrame("Hello."), line.llm)
    await line.push(1190, TTSStartedFrame(), line.tts)
    await line.push(1250, TTSAudioRawFrame(b"\0" * 640, 16000, 1), line.tts)
    await line.push(1260, BotStartedSpeakingFrame(), line.out)
    await line.push(1300, LLMFullResponseEndFrame(), line.llm)
    await line.push(2000, BotStoppedSpeakingFrame(), line.out)
    [record] = line.records
    assert record.endpointing_ms == 200
    assert record.llm_ttft_ms == 80
    assert record.response_ms == 260
