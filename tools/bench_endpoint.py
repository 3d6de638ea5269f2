"""``python -m agent bench endpoint``: how soon the turn is called over, and how often wrongly.

Why: on the CPU default the wait from the last voiced frame to the turn's commit (the
endpointing wait, then the end-of-turn decision) is the largest part of voice-to-voice,
and the obvious lever is the VAD's stop time. Speed alone is the wrong score, though: a
shorter stop makes the VAD report a stop at every thinking pause ("I could do, um, ...
two hundred a month"), and then only the end-of-turn decision stands between the caller
and an agent that answers in the middle of their sentence. So this bench speaks the
built-in scenarios' caller lines with real mid-turn pauses and counts the *false cuts*
next to the delay, for each VAD stop time and each end-of-turn decision:

- ``smart-turn``: what the pipeline does (agent/pipeline/call.py): pipecat's
  ``TurnAnalyzerUserTurnStopStrategy`` over ``LocalSmartTurnAnalyzerV3``, driven here as
  pipecat objects, not a re-implementation: smart-turn v3 asked at every VAD stop, and
  its own ``stop_secs`` silence (3 s) as the fallback when it keeps saying "incomplete";
- ``vad``: commit at the VAD stop itself (no model).

Offline and faster than real time: the audio goes in 20 ms frames through the VAD the
pipeline builds (``create_vad_analyzer``, inside pipecat's ``VADController``) and into
the strategy, with no pipeline, transport or server. The decisions run on audio time:
the VAD counts frames, smart-turn's fallback counts the silence it is given in audio
milliseconds, and the one place smart-turn reads the wall clock (``time.monotonic()``
in ``base_smart_turn``: the timestamps of its audio buffer, which pick the 0.5 s plus
VAD start time of pre-speech audio it sends the model, and trim the buffer before
speech) is given an audio clock for the run (:func:`audio_time`). The wall time the
pipeline really waits, smart-turn's inference, is measured and added to the delay;
whether a turn was cut is judged at the audio frame that led to the commit, so the
cuts are the same on every run.
The strategy's wait for the final transcript (``wait_for_transcript``, timed on
``time.time()`` against the STT's p99) is not modelled: a commit here is the turn
detection's own decision, as if the transcript were in hand (the stub run of ``bench
turn``); with Whisper on the CPU the real commit also waits for the final, and a
caller who resumes within that wait cancels the cut.

The corpus is tools/bench_endpoint_corpus.py, the feeding tools/bench_endpoint_driver.py,
the verdict and report tools/bench_endpoint_report.py.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

from agent.config import Settings
from tools.bench_endpoint_corpus import (
    DEFAULT_PAUSES_MS,
    HESITATIONS,
    build_corpus,
    scenario_lines,
    speak_turns,
)
from tools.bench_endpoint_driver import DECISIONS, Config, measure
from tools.bench_endpoint_report import fallback_secs, recommend, report, table, verdict

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT = "docs/benchmarks/endpointing.md"
DEFAULT_STOPS = (0.1, 0.15, 0.2, 0.3, 0.5)
#: smart-turn fallbacks (its ``stop_secs``) swept besides pipecat's 3 s: longer than every
#: pause here, so the cuts stay smart-turn's own and only the wait for an "incomplete"
#: turn's end shrinks.
DEFAULT_FALLBACKS = (1.0,)
TAIL_S = 1.0  # after smart-turn's fallback would have fired, before "never committed"


def _say(text: str = "") -> None:
    """The bench's own table and progress lines, on the terminal."""
    print(text, flush=True)  # noqa: T201


def run_endpoint_bench(
    output: str = DEFAULT_OUTPUT,
    stops: Sequence[float] = DEFAULT_STOPS,
    scenarios: Sequence[str] | None = None,
    pauses_ms: Sequence[int] = DEFAULT_PAUSES_MS,
    *,
    settings: Settings | None = None,
    hesitations: bool = True,
    fallbacks: Sequence[float] = DEFAULT_FALLBACKS,
    seed: int = 7,
    command: str | None = None,
) -> int:
    """``python -m agent bench endpoint``: measure, print the table, write ``output``.

    The baseline, ``settings.vad_stop_secs`` (0.2 s by default) with smart-turn, is
    measured in the same run whether or not ``stops`` names it.
    """
    import onnxruntime
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

    from tools.bench import _write_report
    from tools.simulate import CallerVoice

    settings = settings or Settings()
    base_stop = settings.vad_stop_secs
    sweep = sorted({round(s, 3) for s in stops} | {round(base_stop, 3)})
    corpus = build_corpus(scenario_lines(scenarios), pauses_ms, HESITATIONS if hesitations else ())
    _say(f"speaking {len(corpus)} turns with the Piper voice ...")
    # Piper samples its prosody (onnxruntime random ops, seeded when a session is made):
    # seeded here, the same corpus is the same audio on every run.
    onnxruntime.set_seed(seed)
    voice = CallerVoice(settings.audio_in_sample_rate)
    smart_turn = LocalSmartTurnAnalyzerV3()
    tail = max(sweep) + max([float(smart_turn.params.stop_secs), *fallbacks]) + TAIL_S
    audios = speak_turns(corpus, voice, tail_s=tail, seed=seed)
    minutes = sum(a.duration_s for a in audios) / 60
    _say(
        f"measuring {len(sweep)} stop times x {len(DECISIONS)} decisions ({minutes:.1f} min "
        "of audio per stop time) ..."
    )
    results = asyncio.run(
        measure(audios, settings, sweep, smart_turn, fallbacks=fallbacks, progress=_say)
    )
    fallback = settings.turn_fallback_secs
    now = Config(
        round(base_stop, 3), "smart-turn", None if fallback == fallback_secs() else fallback
    )
    for r in results:
        r.baseline = r.config == Config(round(base_stop, 3), "smart-turn")
        r.current = r.config == now
    order = {d: i for i, d in enumerate(DECISIONS)}
    results.sort(
        key=lambda r: (
            order[r.config.decision],
            -1.0 if r.config.fallback_secs is None else r.config.fallback_secs,
            r.config.stop_secs,
        )
    )
    best = recommend(results)
    _say()
    _say(table(results, best))
    _say()
    _say(verdict(results, best))
    if command is None:
        command = "python -m agent bench endpoint"
        if tuple(stops) != DEFAULT_STOPS:
            command += " --stops " + ",".join(f"{s:g}" for s in stops)
        if scenarios:
            command += " --scenarios " + ",".join(scenarios)
        if tuple(pauses_ms) != DEFAULT_PAUSES_MS:
            command += " --pauses " + ",".join(str(p) for p in pauses_ms)
        if not hesitations:
            command += " --no-hesitations"
        if tuple(fallbacks) != DEFAULT_FALLBACKS:
            command += " --fallbacks '" + ",".join(f"{f:g}" for f in fallbacks) + "'"
    return _write_report(output, report(results, audios, settings, pauses_ms, command, seed) + "\n")


# --- the command line -------------------------------------------------------------------


def _floats(raw: str) -> list[float]:
    return [float(x) for x in raw.split(",") if x.strip()]


def add_endpoint_parser(benches: Any) -> None:
    """``python -m agent bench endpoint``."""
    parser = benches.add_parser(
        "endpoint",
        help="false cuts and endpoint delay per VAD stop time, smart-turn vs VAD alone, "
        "on the scenario lines spoken with mid-turn pauses (offline, CPU)",
    )
    parser.add_argument(
        "--stops",
        default=",".join(f"{s:g}" for s in DEFAULT_STOPS),
        help="comma-separated VAD stop times in seconds (the current one is always added)",
    )
    parser.add_argument(
        "--pauses",
        default=",".join(str(p) for p in DEFAULT_PAUSES_MS),
        help="comma-separated mid-turn pauses in ms",
    )
    parser.add_argument(
        "--scenarios", help="comma-separated built-in scenarios (default: all of them)"
    )
    parser.add_argument(
        "--no-hesitations", action="store_true", help="leave out the hesitation turns"
    )
    parser.add_argument(
        "--fallbacks",
        default=",".join(f"{f:g}" for f in DEFAULT_FALLBACKS),
        help="comma-separated smart-turn fallback silences in seconds (its stop_secs) to "
        "sweep besides pipecat's 3 s, each at every stop time ('' for none)",
    )
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="where to write the results")


def run_endpoint_command(args: argparse.Namespace, settings: Settings) -> int:
    """The command line's side: check the arguments, run, exit status (2: bad arguments)."""
    try:
        stops = _floats(args.stops)
        fallbacks = _floats(args.fallbacks)
        pauses = [int(p) for p in args.pauses.split(",") if p.strip()]
    except ValueError:
        print(  # noqa: T201
            "--stops must be seconds like 0.1,0.2 and --pauses milliseconds like 300,500",
            file=sys.stderr,
        )
        return 2
    if not stops or not pauses or min([*stops, *pauses, *fallbacks]) <= 0:
        print("--stops, --pauses and --fallbacks must be positive", file=sys.stderr)  # noqa: T201
        return 2
    names = [n.strip() for n in (args.scenarios or "").split(",") if n.strip()] or None
    try:
        return run_endpoint_bench(
            args.output,
            stops,
            names,
            pauses,
            settings=settings,
            hesitations=not args.no_hesitations,
            fallbacks=fallbacks,
        )
    except ValueError as e:
        print(f"bench endpoint: {e}", file=sys.stderr)  # noqa: T201
        return 2
