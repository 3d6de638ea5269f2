"""Where a worker's CPU goes on the per-frame path, from py-spy's samples.

``bench capacity --profile N`` runs one more worker carrying ``N`` calls, which samples
itself with ``py-spy record --threads --subprocesses --format raw`` over its measuring
window only (``Sampler``): sampled from its start, a worker's imports and its calls' set-up
outweighed the steady state it is meant to show. The samples are summed here by part of the
path: each sample of the worker's event loop counts for the part of the innermost frame
of its stack that belongs to one (so the time aiohttp spends writing the STT's websocket
counts for the STT client, the time asyncio's queues spend between two processors for
pipecat's frame hops). The worker's child processes count whole: every busy sample of
the RTP sender (``telephony.rtp.sender``) for the outgoing packets, and of a smart-turn
service the worker started itself (``infra.smart_turn_server``, when it was given no
``SMART_TURN_URL``; the bench's runs apart with the models) for smart-turn, as does a
thread of the worker asking it (or running the model, as pipecat's own analyzer does).
Samples of a loop waiting in ``select`` are idle and left out; so are the worker's other
threads.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

#: Parts of the path, first match wins, each a list of substrings of a frame's file.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "RTP in (socket, jitter buffer, G.711 decode)",
        ("telephony/rtp/session.py", "telephony/rtp/g711.py"),
    ),
    ("SIP transport (frames in and out)", ("telephony/sip/media.py",)),
    ("VAD", ("pipecat/audio/vad/", "webrtcvad", "agent/pipeline/vad.py")),
    ("smart-turn (features, ONNX)", ("smart_turn", "onnxruntime")),  # SMART_TURN
    ("resampling", ("pipecat/audio/resamplers", "soxr")),
    ("STT client (websocket)", ("agent/pipeline/stt.py",)),
    ("TTS client (HTTP)", ("agent/pipeline/tts.py", "agent/pipeline/tts_fallback.py")),
    ("LLM client (HTTP)", ("agent/pipeline/llm.py", "pipecat/services/openai/", "openai/")),
    ("policy, guard, turn reader", (
        "agent/conversation/policy.py",
        "agent/conversation/guard.py",
        "agent/pipeline/dialogue.py",
        "agent/conversation/intents.py",
        "agent/conversation/redaction.py",
        "agent/conversation/spoken_numbers.py",
        "agent/conversation/spoken_dates.py",
        "agent/pipeline/phrasing.py",
    )),
    ("recording", ("agent/pipeline/recording.py",)),
    (
        "turn ledger, call records (SQL)",
        ("agent/pipeline/turns.py", "agent/store/database.py", "sqlalchemy"),
    ),
    ("pipecat frame hops (queues, observers, metrics)", ("pipecat/",)),
    ("logging", ("logging/", "loguru")),
)  # fmt: skip
OTHER = "asyncio and the rest"
#: py-spy's samples per second.
PROFILE_RATE = 200
#: Given to a bench worker: the py-spy to sample its window with, and where to write it.
PROFILER_ENV = "BENCH_PROFILER"
PROFILE_ENV = "BENCH_PROFILE"
#: The RTP sender process is one part whatever it runs: the outgoing packets.
SENDER = "RTP out (sender process)"
SMART_TURN = "smart-turn (features, ONNX)"
IDLE_LEAVES = (
    "EpollSelector.select",
    "select (selectors.py",
    "_worker (concurrent/futures",
    "run (telephony/rtp/sender.py",  # the sender's own select
)
#: py-spy --subprocesses names each sample's processes first: ``process PID:"command";``.
_PROCESSES = re.compile(r'^((?:process \d+:"[^"]*";)*)(.*)$', re.DOTALL)


def part_of(frames: Sequence[str]) -> str | None:
    """The part a sample's stack (root first) counts for; None when it is idle."""
    if not frames or frames[-1].startswith(IDLE_LEAVES):
        return None
    for frame in reversed(frames):
        for name, files in PARTS:
            if any(f in frame for f in files):
                return name
    return OTHER


def summarize(raw: str) -> tuple[Counter[str], int]:
    """py-spy's raw output (``--threads``, ``--subprocesses``) as busy samples per part,
    and the total."""
    parts: Counter[str] = Counter()
    for sample in _samples(raw):
        stack, _, count = sample.rpartition(" ")
        processes, rest = _PROCESSES.match(stack).groups()  # type: ignore[union-attr]
        if not rest or not count.isdigit():
            continue
        thread, *frames = rest.split(";")
        command = processes.rsplit("process ", 1)[-1]
        part = None
        if "telephony.rtp.sender" in command:
            part = SENDER if part_of(frames) is not None else None
        elif "infra.smart_turn_server" in command:  # the service: its HTTP and its model
            part = SMART_TURN if part_of(frames) is not None else None
        elif thread.rsplit(":", 1)[-1].strip() == "MainThread":
            part = part_of(frames)
        elif part_of(frames) == SMART_TURN:  # pipecat's own analyzer, in a thread
            part = SMART_TURN
        if part is not None:
            parts[part] += int(count)
    return parts, sum(parts.values())


def _samples(raw: str) -> list[str]:
    """One string per sample: a process's command may hold a line break."""
    samples: list[str] = []
    for line in raw.splitlines():
        if samples and not line.startswith(("process ", "thread ")):
            samples[-1] += "\n" + line
        else:
            samples.append(line)
    return samples


def table(parts: Counter[str], total: int) -> str:
    """Markdown: each part's share of the worker's busy samples."""
    rows = ["| part of the path | share of the busy samples |", "|---|---:|"]
    for name, n in parts.most_common():
        rows.append(f"| {name} | {100 * n / total:.1f}% |")
    rows.append(f"| all ({total} samples) | 100% |")
    return "\n".join(rows)


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter's, or on the PATH."""
    import sys

    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Sampler:
    """py-spy sampling this process and its children, from ``start`` until ``stop``,
    when ``PROFILER_ENV`` and ``PROFILE_ENV`` are set (``bench capacity --profile``).

    py-spy runs on the cores this process does not (when there are any): it must not take
    the measured worker's core."""

    def __init__(self, environ: dict[str, str] | os._Environ[str] = os.environ) -> None:
        self._spy = environ.get(PROFILER_ENV)
        self._output = environ.get(PROFILE_ENV)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not (self._spy and self._output):
            return
        ours = os.sched_getaffinity(0)
        others = set(range(os.cpu_count() or 1)) - ours or ours
        self._process = subprocess.Popen(
            [self._spy, "record", "--threads", "--subprocesses", "--nonblocking", "--format",
             "raw", "--rate", str(PROFILE_RATE), "--output", self._output,
             "--pid", str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, others),
        )  # fmt: skip

    def stop(self) -> None:
        """End the sampling; py-spy writes its samples on SIGINT."""
        if self._process is None:
            return
        self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None
