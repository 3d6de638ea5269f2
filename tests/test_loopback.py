"""The loopback line: real-time pacing both ways, silence when nobody speaks."""

import asyncio
import time

from pipecat.frames.frames import OutputAudioRawFrame

from telephony.loopback import FRAME_MS, CallerEnd, LoopbackTransport


def test_the_line_sends_silence_when_the_caller_is_quiet():
    caller = CallerEnd(16000)
    assert caller.pull_frame(640) == bytes(640)


async def test_speech_goes_down_the_line_in_frames_and_speak_waits_for_it():
    caller = CallerEnd(16000)
    speech = b"\x01\x02" * 800  # 50 ms: two full frames and a half
    pending = asyncio.create_task(caller.speak(speech))
    await asyncio.sleep(0)
    frames = [caller.pull_frame(640) for _ in range(3)]
    assert frames[0] == speech[:640] and frames[1] == speech[640:1280]
    assert frames[2] == speech[1280:] + bytes(320)  # the last frame is padded
    assert await asyncio.wait_for(pending, 1) > 0
    assert caller.pull_frame(640) == bytes(640)


async def test_the_caller_hears_the_agent_until_it_goes_quiet():
    caller = CallerEnd(16000)
    loud = b"\x00\x10" * 320  # 20 ms at an RMS of 4096
    listening = asyncio.create_task(caller.listen(silence_s=0.1, timeout_s=5))
    await asyncio.sleep(0.01)
    for _ in range(5):
        caller.deliver(loud)
    caller.deliver(bytes(640))
    heard = await listening
    assert heard.last_sound_at >= heard.first_sound_at
    assert len(heard.audio) == 6 * 640


async def test_agent_audio_is_played_out_in_real_time():
    line = LoopbackTransport(16000)
    output = line.output()
    frame = OutputAudioRawFrame(audio=bytes(640), sample_rate=16000, num_channels=1)
    started = time.monotonic()
    for _ in range(10):
        await output.write_audio_frame(frame)
    elapsed = time.monotonic() - started
    # Ten 20 ms frames: the writer is held back until the ninth has played.
    assert elapsed >= 9 * FRAME_MS / 1000 * 0.9
