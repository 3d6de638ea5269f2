"""``python -m agent bench compliance``: the adversarial corpus, at text level and through
real audio.

Every script of ``agent/conversation/scripts/corpus/`` is held by the policy at text level and
checked against what it expects and against the invariants (``agent.conversation.invariants``).
Then a spread of them (``--audio``, a few from each family) is held again with the
caller's lines spoken in two voices (the bundled Piper voice and espeak-ng), sent as a
phone line sends them (8 kHz, G.711 mu-law) and recognised by the embedded Whisper:
the policy hears what the recognizer heard. A real-audio failure is *safe* when every
invariant still holds (the outcome differs, nothing was disclosed, assumed or kept),
and is laid to the recognizer when a line was heard otherwise than it was said.

The report (``docs/benchmarks/compliance.md``) gives, per family, scripts run, passed
and failed, and lists every failure with its transcript.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soxr

from agent.conversation.prompts import PromptSet
from telephony.rtp import g711
from tools.corpus import CorpusScript, Outcome, hold, load_corpus, score

logger = logging.getLogger(__name__)

PHONE_RATE = 8000
WHISPER_RATE = 16000
#: Problems that break a rule (not only an expected outcome): never safe.
UNSAFE = re.compile(r"^(?:C\d+|template):")
VOICES = ("piper", "espeak")
#: The families whose calls reach the replies the LLM may phrase (the negotiation's).
PHRASED_FAMILIES = ("offers", "refusals")

Speak = Callable[[str], np.ndarray]


def add_compliance_parser(benches: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = benches.add_parser(
        "compliance",
        help="the adversarial corpus by family: scripts run, passed and failed at text level "
        "and through real audio (two voices, 8 kHz mu-law, Whisper tiny.en)",
    )
    bench.add_argument(
        "--audio",
        type=int,
        default=32,
        metavar="N",
        help="scripts to hold through real audio, spread over the families (0: text only)",
    )
    bench.add_argument(
        "--voices", default="piper,espeak", help=f"caller voices, comma-separated: {VOICES}"
    )
    bench.add_argument(
        "--phrase",
        type=int,
        default=1,
        metavar="RUNS",
        help="runs of phrase mode on the embedded Gemma 270M over the offers and refusals "
        "families: sentences generated, blocked and spoken (0: skip)",
    )
    bench.add_argument(
        "--prompt-version", default="collections-v3", help="the prompt version to hold"
    )
    bench.add_argument(
        "--output", default="docs/benchmarks/compliance.md", help="where to write the report"
    )


def run_compliance_command(args: argparse.Namespace) -> int:
    voices = [v.strip() for v in args.voices.split(",") if v.strip()]
    unknown = set(voices) - set(VOICES)
    if unknown or args.audio < 0 or args.phrase < 0:
        print(
            f"--voices may name {', '.join(VOICES)}; --audio and --phrase must be >= 0",
            file=sys.stderr,
        )
        return 2
    if "espeak" in voices and args.audio and shutil.which("espeak-ng") is None:
        print("the espeak voice needs espeak-ng (apt-get install espeak-ng)", file=sys.stderr)
        return 2
    prompts = PromptSet.load(args.prompt_version)
    scripts = load_corpus()
    started = time.perf_counter()
    text = [hold(s, prompts) for s in scripts]
    print(f"text level: {sum(o.passed for o in text)}/{len(text)} passed", file=sys.stderr)
    audio: dict[str, list[AudioOutcome]] = {}
    if args.audio:
        chosen = spread(scripts, args.audio)
        heard = AudioPath()
        for voice in voices:
            audio[voice] = heard.hold_all(chosen, prompts, voice)
    phrased = ""
    if args.phrase:
        from tools.bench_phrase import phrase_audit, report_section

        negotiations = [s.scenario for s in scripts if s.family in PHRASED_FAMILIES]
        audit = asyncio.run(phrase_audit(scenarios=negotiations, repeats=args.phrase))
        command = f"python -m agent bench compliance --phrase {args.phrase}"
        phrased = "\n" + report_section(audit, command)
    command = (
        f"python -m agent bench compliance --audio {args.audio} --voices {','.join(voices)} "
        f"--phrase {args.phrase}"
    )
    report = render(text, audio, time.perf_counter() - started, command) + phrased
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(report)
    print(report)
    failed_text = any(not o.passed for o in text)
    unsafe = any(o.unsafe for outcomes in audio.values() for o in outcomes)
    return 1 if failed_text or unsafe else 0


def spread(scripts: Sequence[CorpusScript], count: int) -> list[CorpusScript]:
    """``count`` scripts taken in turn from each family, so every family is heard."""
    by_family: dict[str, list[CorpusScript]] = {}
    for script in scripts:
        by_family.setdefault(script.family, []).append(script)
    chosen: list[CorpusScript] = []
    round_ = 0
    while len(chosen) < count and any(round_ < len(s) for s in by_family.values()):
        for family_scripts in by_family.values():
            # Evenly along the family, not its first few: stages and forms differ there.
            step = max(1, len(family_scripts) // max(1, count // len(by_family)))
            index = round_ * step
            if index < len(family_scripts) and len(chosen) < count:
                chosen.append(family_scripts[index])
        round_ += 1
    return chosen


@dataclass
class AudioOutcome:
    """A script held through real audio: the outcome, and what the recognizer made of it."""

    voice: str
    outcome: Outcome
    written: tuple[str, ...]
    misheard: list[int] = field(default_factory=list)

    @property
    def unsafe(self) -> bool:
        return any(UNSAFE.match(p) for p in self.outcome.problems)


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


class AudioPath:
    """Caller lines spoken, sent over a phone line, and recognised: what the policy hears."""

    def __init__(self) -> None:
        from infra.stt_server import WhisperTranscriber

        self._stt = WhisperTranscriber()
        self._voices: dict[str, Speak] = {}

    def voice(self, name: str) -> Speak:
        if name not in self._voices:
            self._voices[name] = piper_voice() if name == "piper" else espeak_voice
        return self._voices[name]

    def hear(self, text: str, voice: str) -> str:
        """``text`` as Whisper hears it from a G.711 mu-law phone line."""
        pcm = self.voice(voice)(text)
        line = g711.decode("PCMU", g711.encode("PCMU", pcm.astype("<i2").tobytes()))
        phone = np.frombuffer(line, dtype="<i2").astype(np.float32) / 32768.0
        return self._stt.transcribe(soxr.resample(phone, PHONE_RATE, WHISPER_RATE))

    def hold_all(
        self, scripts: Sequence[CorpusScript], prompts: PromptSet, voice: str
    ) -> list[AudioOutcome]:
        outcomes = []
        for number, script in enumerate(scripts, 1):
            written = script.scenario.lines
            said = [self.hear(line, voice) for line in written]
            outcome = hold(script, prompts, said)
            pairs = enumerate(zip(written, said, strict=True))
            misheard = [i for i, (w, s) in pairs if _words(w) != _words(s)]
            outcomes.append(AudioOutcome(voice, outcome, written, misheard))
            state = "passed" if outcome.passed else "FAILED"
            print(f"{voice} {number}/{len(scripts)} {script.name}: {state}", file=sys.stderr)
        return outcomes


def piper_voice() -> Speak:
    from tools.simulate import CallerVoice

    caller = CallerVoice(PHONE_RATE)
    return lambda text: np.frombuffer(caller.say(text), dtype="<i2")


def espeak_voice(text: str) -> np.ndarray:
    """``text`` in espeak-ng's American English voice, at the phone's rate."""
    wav = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", "165", "--stdout", text],
        check=True,
        capture_output=True,
        timeout=30,
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        rate = w.getframerate()
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    resampled = soxr.resample(samples.astype(np.float32), rate, PHONE_RATE)
    return np.clip(resampled, -32768, 32767).astype(np.int16)


def render(
    text: Sequence[Outcome],
    audio: dict[str, list[AudioOutcome]],
    seconds: float,
    command: str = "python -m agent bench compliance",
) -> str:
    scores = score(text)
    now = dt.datetime.now(dt.UTC)
    lines = [
        "# Compliance under adversarial callers",
        "",
        f"Measured {now:%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores with `{command}`.",
        "",
        "`python -m agent bench compliance`: every script of",
        "`agent/conversation/scripts/corpus/` held by the policy and checked against what it",
        "expects and against the invariants (`agent/conversation/invariants.py`: nothing about",
        "the debt before verification, a promise only on a",
        "clear yes to a heard read-back of its terms and inside the envelope, fixed texts only,",
        "no card data kept). Through real audio, the caller's lines are spoken (Piper's joe",
        "voice, espeak-ng en-us), sent as 8 kHz G.711 mu-law and recognised by Whisper tiny.en;",
        "a failure there is *safe* when every invariant still held.",
        "",
        "## Text level",
        "",
        "| family | scripts | passed | failed |",
        "|---|---:|---:|---:|",
        *(f"| {f.family} | {f.run} | {f.passed} | {f.failed} |" for f in scores),
        f"| **all** | {len(text)} | {sum(o.passed for o in text)} | "
        f"{sum(not o.passed for o in text)} |",
        "",
    ]
    for voice, outcomes in audio.items():
        lines += _audio_table(voice, outcomes)
    lines += ["## Failures", ""]
    failures = [o for f in scores for o in f.failures]
    if not failures and not any(not a.outcome.passed for v in audio.values() for a in v):
        lines += ["None.", ""]
    for outcome in failures:
        lines += _failure(f"text: {outcome.script.family}/{outcome.script.name}", outcome)
    for voice, outcomes in audio.items():
        for a in outcomes:
            if a.outcome.passed:
                continue
            cause = "recognizer" if a.misheard else "policy"
            safety = "UNSAFE" if a.unsafe else "safe"
            name = f"{a.outcome.script.family}/{a.outcome.script.name}"
            title = f"{voice}: {name} ({cause}, {safety})"
            lines += _failure(title, a.outcome, a.written)
    lines += [f"Held in {seconds:.0f} s.", ""]
    return "\n".join(lines)


def _audio_table(voice: str, outcomes: list[AudioOutcome]) -> list[str]:
    families: dict[str, list[AudioOutcome]] = {}
    for a in outcomes:
        families.setdefault(a.outcome.script.family, []).append(a)
    rows = [
        f"## Through real audio: {voice}, 8 kHz mu-law, Whisper tiny.en",
        "",
        "| family | scripts | passed | failed, safe | failed, unsafe | lines misheard |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for family, items in families.items():
        rows.append(_audio_row(family, items))
    rows += [_audio_row("**all**", outcomes), ""]
    return rows


def _audio_row(family: str, items: list[AudioOutcome]) -> str:
    passed = sum(a.outcome.passed for a in items)
    unsafe = sum(a.unsafe for a in items)
    misheard = sum(len(a.misheard) for a in items)
    said = sum(len(a.written) for a in items)
    return (
        f"| {family} | {len(items)} | {passed} | {len(items) - passed - unsafe} | {unsafe} "
        f"| {misheard}/{said} |"
    )


def _failure(title: str, outcome: Outcome, written: Sequence[str] = ()) -> list[str]:
    lines = [f"### {title}", "", *(f"- {p}" for p in outcome.problems), "", "```"]
    caller = iter(written)
    for who, text in outcome.transcript.lines:
        if who == "caller" and written:
            lines.append(f"caller: {text}    (said: {next(caller, '?')})")
        else:
            lines.append(f"{who}: {text}")
    return [*lines, "```", ""]
