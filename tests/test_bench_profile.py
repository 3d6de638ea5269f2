"""py-spy's samples summed by part of the per-frame path."""

import os
import sys
import time
from pathlib import Path

from tools.bench_profile import (
    OTHER,
    PROFILE_ENV,
    PROFILER_ENV,
    SENDER,
    SMART_TURN,
    Sampler,
    part_of,
    summarize,
    table,
)

WORKER = 'process 100:"python -m tools.bench_sip_worker --calls 8";'
SERVICE = 'process 100:"python -m tools.bench_sip_worker";process 101:"python -m infra.smart_turn_server --host 127.0.0.1 --port 40123";'  # noqa: E501
SENDING = 'process 100:"python -m tools.bench_sip_worker";process 102:"python -m telephony.rtp.sender 23";'  # noqa: E501
RAW = f"""\
{WORKER}thread (1): MainThread;run (asyncio/runners.py:118);_run_once (asyncio/base_events.py:1922);select (selectors.py:468) 500
{WORKER}thread (1): MainThread;_run_once (asyncio/base_events.py:1922);__input_frame_task_handler (pipecat/processors/frame_processor.py:1339);get (asyncio/queues.py:155) 30
{WORKER}thread (1): MainThread;process_frame (pipecat/processors/audio/vad_processor.py:134);analyze_audio (pipecat/audio/vad/vad_analyzer.py:191) 20
{WORKER}thread (1): MainThread;run_stt (agent/pipeline/stt.py:333);send_frame (aiohttp/_websocket/writer.py:83) 10
{WORKER}thread (1);run_stt (agent/pipeline/stt.py:333) 10
{WORKER}thread (3): ThreadPoolExecutor-0_0;_worker (concurrent/futures/thread.py:81);run (onnxruntime/capi/onnxruntime_inference_collection.py:406) 15
{WORKER}thread (4): ThreadPoolExecutor-1_0;_worker (concurrent/futures/thread.py:81) 900
{WORKER}thread (5): store-writer;_run (agent/store/database.py:300) 40
{WORKER}thread (1): MainThread;_run_once (asyncio/base_events.py:1922);_run (asyncio/events.py:80) 5
{SENDING}thread (7): MainThread;run (telephony/rtp/sender.py:313);run_due (telephony/rtp/pacer.py:90);send_slot (telephony/rtp/sender.py:230) 25
{SENDING}thread (7): MainThread;run (telephony/rtp/sender.py:307) 400
{SERVICE}thread (8): smart-turn_0;_worker (concurrent/futures/thread.py:81);predict (infra/smart_turn_server.py:132);run (onnxruntime/capi/onnxruntime_inference_collection.py:406) 50
{SERVICE}thread (9): MainThread;_run_once (asyncio/base_events.py:1922);end_of_turn (infra/smart_turn_server.py:238);read (aiohttp/web_request.py:700) 10
{SERVICE}thread (8): smart-turn_0;_worker (concurrent/futures/thread.py:81) 70
{SERVICE}thread (9): MainThread;run (asyncio/runners.py:118);_run_once (asyncio/base_events.py:1922);select (selectors.py:468) 300
"""  # noqa: E501


def test_each_sample_counts_for_its_innermost_part_and_waits_are_idle() -> None:
    parts, total = summarize(RAW)

    assert parts["pipecat frame hops (queues, observers, metrics)"] == 30
    assert parts["VAD"] == 20
    assert parts["STT client (websocket)"] == 10  # aiohttp's writing counts for the STT
    assert parts[SENDER] == 25  # the sender process's, though the pacer drives it
    assert "RTP in (socket, jitter buffer, G.711 decode)" not in parts
    # The service's requests and model runs, and a thread's (pipecat's own analyzer).
    assert parts[SMART_TURN] == 50 + 10 + 15
    assert parts[OTHER] == 5
    # The loops' selects, the idle pool threads, other threads, and the
    # thread lines py-spy gives without a name, are left out.
    assert total == 30 + 20 + 10 + 25 + 75 + 5


def test_an_idle_leaf_is_no_part() -> None:
    assert part_of(["_run_once (asyncio/base_events.py:1922)", "select (selectors.py:468)"]) is None
    assert part_of(["run (telephony/rtp/sender.py:307)"]) is None
    assert part_of([]) is None


def test_a_command_with_a_line_break_is_one_sample() -> None:
    raw = (
        'process 1:"python -c import x\nx.run()";thread (2): MainThread;'
        "f (agent/conversation/policy.py:1) 3\n"
    )
    parts, total = summarize(raw)
    assert parts == {"policy, guard, turn reader": 3} and total == 3


def test_the_table_gives_shares_that_add_up() -> None:
    parts, total = summarize(RAW)

    text = table(parts, total)

    assert "| VAD | 12.1% |" in text
    assert f"| all ({total} samples) | 100% |" in text


def test_the_sampler_samples_this_process_from_start_to_stop(tmp_path: Path) -> None:
    # A stand-in for py-spy that writes its arguments once interrupted, as py-spy writes
    # its samples on SIGINT.
    spy = tmp_path / "py-spy"
    spy.write_text(
        f"#!{sys.executable}\n"
        "import signal, sys, time\n"
        "def done(*_):\n"
        "    out = sys.argv[sys.argv.index('--output') + 1]\n"
        "    open(out, 'w').write(' '.join(sys.argv[1:]))\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, done)\n"
        "open(sys.argv[sys.argv.index('--output') + 1] + '.up', 'w').close()\n"
        "time.sleep(60)\n"
    )
    spy.chmod(0o755)
    output = tmp_path / "profile.txt"
    sampler = Sampler({PROFILER_ENV: str(spy), PROFILE_ENV: str(output)})

    sampler.start()
    ready = Path(f"{output}.up")
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()

    arguments = output.read_text().split()
    assert arguments[arguments.index("--pid") + 1] == str(os.getpid())
    assert "--subprocesses" in arguments


def test_without_a_profiler_the_sampler_does_nothing(tmp_path: Path) -> None:
    sampler = Sampler({PROFILE_ENV: str(tmp_path / "profile.txt")})

    sampler.start()
    sampler.stop()

    assert not (tmp_path / "profile.txt").exists()


def test_the_llm_clients_work_is_no_frame_hop() -> None:
    stack = [
        "__process_frame (pipecat/processors/frame_processor.py:1306)",
        "process_frame (pipecat/services/openai/base_llm.py:500)",
        "create (openai/resources/chat/completions/completions.py:2000)",
    ]
    assert part_of(stack) == "LLM client (HTTP)"
