"""py-spy's samples summed by part of the per-frame path."""

from agent.bench_profile import OTHER, PACER, part_of, summarize, table

RAW = """\
thread (1): MainThread;run (asyncio/runners.py:118);_run_once (asyncio/base_events.py:1922);select (selectors.py:468) 500
thread (1): MainThread;_run_once (asyncio/base_events.py:1922);__input_frame_task_handler (pipecat/processors/frame_processor.py:1339);get (asyncio/queues.py:155) 30
thread (1): MainThread;process_frame (pipecat/processors/audio/vad_processor.py:134);analyze_audio (pipecat/audio/vad/vad_analyzer.py:191) 20
thread (1): MainThread;run_stt (agent/stt.py:333);send_frame (aiohttp/_websocket/writer.py:83) 10
thread (2): rtp-pacer;_run (telephony/pacer.py:120);send_slot (telephony/rtp.py:470) 25
thread (3): ThreadPoolExecutor-0_0;_worker (concurrent/futures/thread.py:81);run (onnxruntime/capi/onnxruntime_inference_collection.py:406) 15
thread (4): ThreadPoolExecutor-1_0;_worker (concurrent/futures/thread.py:81) 900
thread (1): MainThread;_run_once (asyncio/base_events.py:1922);_run (asyncio/events.py:80) 5
"""  # noqa: E501


def test_each_sample_counts_for_its_innermost_part_and_waits_are_idle() -> None:
    parts, total = summarize(RAW)

    assert parts["pipecat frame hops (queues, observers, metrics)"] == 30
    assert parts["VAD"] == 20
    assert parts["STT client (websocket)"] == 10  # aiohttp's writing counts for the STT
    assert parts[PACER] == 25  # the pacer thread's, though rtp.py builds the packets
    assert "RTP in (socket, jitter buffer, G.711 decode)" not in parts
    assert parts["smart-turn (features, ONNX)"] == 15  # the pool's busy ONNX run
    assert parts[OTHER] == 5
    assert total == 105  # the loop's select and the idle pool thread are left out


def test_an_idle_leaf_is_no_part() -> None:
    assert part_of(["_run_once (asyncio/base_events.py:1922)", "select (selectors.py:468)"]) is None
    assert part_of([]) is None


def test_the_table_gives_shares_that_add_up() -> None:
    parts, total = summarize(RAW)

    text = table(parts, total)

    assert "| VAD | 19.0% |" in text
    assert f"| all ({total} samples) | 100% |" in text
