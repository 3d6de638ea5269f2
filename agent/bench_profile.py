"""Where a worker's CPU goes on the per-frame path, from py-spy's samples.

``bench capacity --profile N`` runs one more worker carrying ``N`` calls under ``py-spy
record --threads --format raw`` and sums its samples here by part of the path: each
sample counts for the part of the innermost frame of its stack that belongs to one
(so the time aiohttp spends writing the STT's websocket counts for the STT client, the
time asyncio's queues spend between two processors for pipecat's frame hops), and every
busy sample of the RTP pacer's thread counts for the outgoing packets. Samples
of the event loop waiting in ``select`` are idle and left out; so are the worker's other
threads but the RTP pacer (the thread pool's are smart-turn's ONNX runs, reported as
such when they are busy).
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

#: Parts of the path, first match wins, each a list of substrings of a frame's file.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("RTP in (socket, jitter buffer, G.711 decode)", ("telephony/rtp.py", "telephony/g711.py")),
    ("SIP transport (frames in and out)", ("telephony/sip_transport.py",)),
    ("VAD", ("pipecat/audio/vad/", "webrtcvad", "agent/vad.py")),
    ("smart-turn (features, ONNX)", ("smart_turn", "onnxruntime")),
    ("resampling", ("pipecat/audio/resamplers", "soxr")),
    ("STT client (websocket)", ("agent/stt.py",)),
    ("TTS client (HTTP)", ("agent/tts.py", "agent/tts_router.py")),
    ("policy, guard, turn reader", (
        "agent/policy.py", "agent/guard.py", "agent/dialogue.py", "agent/understanding.py",
        "agent/phrasing.py",
    )),
    ("recording", ("agent/recording.py",)),
    ("turn ledger, call records (SQL)", ("agent/turns.py", "agent/store.py", "sqlalchemy")),
    ("pipecat frame hops (queues, observers, metrics)", ("pipecat/",)),
    ("logging", ("logging/", "loguru")),
)  # fmt: skip
OTHER = "asyncio and the rest"
#: The RTP pacer's thread is one part whatever it runs: the outgoing packets.
PACER = "RTP out (pacer thread)"
IDLE_LEAVES = ("EpollSelector.select", "select (selectors.py", "_worker (concurrent/futures")


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
    """py-spy's raw output (``--threads``) as busy samples per part, and the total."""
    parts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *frames = stack.split(";")
        name = thread.rsplit(":", 1)[-1].strip()
        if name not in ("MainThread", "rtp-pacer") and not any("onnxruntime" in f for f in frames):
            continue
        part = PACER if name == "rtp-pacer" else part_of(frames)
        if part is not None:
            parts[part] += int(count)
    return parts, sum(parts.values())


def table(parts: Counter[str], total: int) -> str:
    """Markdown: each part's share of the worker's busy samples."""
    rows = ["| part of the path | share of the worker's busy samples |", "|---|---:|"]
    for name, n in parts.most_common():
        rows.append(f"| {name} | {100 * n / total:.1f}% |")
    rows.append(f"| all ({total} samples) | 100% |")
    return "\n".join(rows)


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter's, or on the PATH."""
    import sys

    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")
