"""SipTransport in a running pipecat pipeline, with a real RtpSession as the caller."""

from __future__ import annotations

import asyncio

import numpy as np
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InputDTMFFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    OutputDTMFFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from telephony.rtp import g711
from telephony.rtp.session import RtpSession
from telephony.sip.media import SipTransport

HOST = "127.0.0.1"


class Echo(FrameProcessor):
    """Plays the caller's audio back and answers each key with the same key."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            await self.push_frame(
                OutputAudioRawFrame(frame.audio, frame.sample_rate, frame.num_channels)
            )
        elif isinstance(frame, InputDTMFFrame):
            await self.push_frame(OutputDTMFFrame(button=frame.button))
        else:
            await self.push_frame(frame, direction)


async def test_audio_and_dtmf_flow_both_ways_through_a_pipeline() -> None:
    agent_media = await RtpSession.open(HOST)
    caller = await RtpSession.open(HOST)
    agent_media.start(caller.local_address, "PCMU", 101)
    caller.start(agent_media.local_address, "PCMU", 101)
    transport = SipTransport(agent_media)
    task = PipelineTask(
        Pipeline([transport.input(), Echo(), transport.output()]),
        params=PipelineParams(audio_in_sample_rate=8000, audio_out_sample_rate=8000),
    )
    runner = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))

    t = np.arange(160 * 25)
    speech = g711.decode(
        "PCMU", g711.encode("PCMU", (8000 * np.sin(t * 0.3)).astype("<i2").tobytes())
    )
    caller.write(speech)
    heard = bytearray()
    while bytes(speech[:640]) not in bytes(heard) and len(heard) < 4 * len(speech):
        frame = await asyncio.wait_for(caller.read(), 10)
        heard.extend(frame.pcm)
    await caller.send_dtmf("9")
    assert await asyncio.wait_for(caller.read_dtmf(), 10) == "9"
    assert agent_media.stats.packets_in > 0 and caller.stats.packets_in > 0
    # The echo is the caller's own (G.711-exact) audio, shifted by the round trip.
    assert bytes(speech[:640]) in bytes(heard)

    await task.queue_frame(EndFrame())
    await asyncio.wait_for(runner, 10)
    await caller.close()
    await agent_media.close()


async def test_interruption_clears_queued_agent_audio() -> None:
    s = await RtpSession.open(HOST)
    output = SipTransport(s).output()
    s.write(bytes(16000))
    await output.process_frame(InterruptionFrame(), FrameDirection.DOWNSTREAM)
    assert s.queued_s == 0
    await s.close()
