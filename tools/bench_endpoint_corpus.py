"""The corpus of ``bench endpoint``: the built-in scenarios' caller lines, spoken with pauses.

Each line of several clauses is spoken with a mid-turn pause between its clauses (a speaker
thinking), either clause by clause (*apart*) or as one synthesis cut at its clause boundaries
(*in context*, so the prosody before the pause is that of an unfinished sentence); the
hesitations (a filler, a pause, the rest) are spoken the same way. tools/bench_endpoint.py
says what the bench measures on it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

logger = logging.getLogger(__name__)

#: The mid-turn pauses (ms) between a turn's clauses: a speaker thinking, short to long.
DEFAULT_PAUSES_MS = (300, 500, 700)
#: Noise floor under the whole turn (pauses included): a quiet phone line, not digital zero.
NOISE_DBFS = -60.0
LEAD_S = 1.0  # noise before the first word: the VAD and smart-turn's pre-speech buffer fill
#: A 10 ms window louder than this (about -50 dBFS) is voiced, when trimming Piper's
#: clips and when marking where a clause starts and the turn's voice ends.
VOICED_RMS = 100.0

#: Hesitations, as their clauses: a filler or an unfinished phrase, a pause, the rest.
HESITATIONS: tuple[tuple[str, ...], ...] = (
    ("I could do, um,", "two hundred a month."),
    ("My date of birth is, uh,", "March fifth, nineteen eighty."),
    ("I can pay, uh,", "maybe fifty dollars on Friday."),
    ("The last four are, um,", "four eight two one."),
    ("Can you, uh,", "can you call me back after five?"),
    ("I want to pay it, but,", "I need to talk to my wife first."),
    ("So if I pay today,", "um,", "is that the whole thing settled?"),
    ("Well, I was thinking,", "maybe a hundred now and the rest next month."),
)

_CLAUSE_END = re.compile(r"(?<=[.?!,;])\s+")


class Voice(Protocol):
    """What speaks the clauses: ``tools.simulate.CallerVoice`` (Piper), or a fake in tests."""

    sample_rate: int

    def say(self, text: str) -> bytes: ...


Rendition = Literal["apart", "in-context"]
RENDITIONS: tuple[Rendition, ...] = ("apart", "in-context")
#: Piper's own silence at a clause boundary (a comma, a sentence end) is 140 ms or more;
#: inside a clause (a stop consonant's closure) up to about 130 ms: a boundary is one of
#: the turn's longest silences, at least this long and this much longer than any other.
BOUNDARY_GAP_S = 0.1
BOUNDARY_RATIO = 1.5
#: Syntheses of a whole turn tried before giving up on finding its boundaries.
IN_CONTEXT_TRIES = 5


@dataclass(frozen=True)
class CorpusTurn:
    """One caller turn: its clauses with ``pause_ms`` of pause between each two.

    ``apart``: each clause synthesized on its own (as an utterance of its own: its end
    sounds final even at a comma); ``in-context``: the whole turn synthesized at once and
    Piper's silences at the clause boundaries stretched to the pause (the clause before
    a pause keeps the prosody of speech that goes on).
    """

    source: str  # the scenario (the first that says the line) or "hesitation"
    clauses: tuple[str, ...]
    pause_ms: int  # 0 for a turn of one clause
    rendition: Rendition = "apart"

    @property
    def text(self) -> str:
        return " | ".join(self.clauses)

    @property
    def hesitation(self) -> bool:
        return self.source == "hesitation"


@dataclass(frozen=True)
class TurnAudio:
    """A turn's audio (int16 mono) and where, in seconds from its start, its voice is."""

    turn: CorpusTurn
    pcm: bytes
    sample_rate: int
    last_clause_start_s: float
    voiced_end_s: float

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


def split_clauses(line: str) -> tuple[str, ...]:
    """A line's clauses: split after sentence ends and commas, punctuation kept."""
    return tuple(c for c in _CLAUSE_END.split(line.strip()) if c)


def build_corpus(
    lines: Sequence[tuple[str, str]],
    pauses_ms: Sequence[int] = DEFAULT_PAUSES_MS,
    hesitations: Sequence[Sequence[str]] = HESITATIONS,
    renditions: Sequence[Rendition] = RENDITIONS,
) -> list[CorpusTurn]:
    """The turns: each (source, line) of several clauses once per pause and rendition,
    one-clause lines once (they have no pause, and both renditions are the same audio).

    Lines said word for word in several scenarios are measured once (the first source).
    """
    turns: list[CorpusTurn] = []
    seen: set[str] = set()
    every = [(source, split_clauses(line)) for source, line in lines]
    every += [("hesitation", tuple(h)) for h in hesitations]
    for source, clauses in every:
        if " ".join(clauses) in seen:
            continue
        seen.add(" ".join(clauses))
        if len(clauses) == 1:
            turns.append(CorpusTurn(source, clauses, 0))
            continue
        for rendition in renditions:
            turns.extend(CorpusTurn(source, clauses, p, rendition) for p in pauses_ms)
    return turns


def scenario_lines(names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(scenario, line) for the built-in scenarios (all, or those named), in name order."""
    from agent.conversation.scenarios import builtin_scenarios

    scenarios = builtin_scenarios()
    unknown = sorted(set(names or ()) - set(scenarios))
    if unknown:
        raise ValueError(f"no such scenario: {', '.join(unknown)}")
    chosen = sorted(names) if names else sorted(scenarios)
    return [(name, line) for name in chosen for line in scenarios[name].lines]


def _voiced_windows(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Whether each whole 10 ms window of ``audio`` (int16 values) is voiced."""
    window = sample_rate // 100
    count = len(audio) // window
    frames = audio[: count * window].astype(np.float32).reshape(count, window)
    return np.asarray(np.sqrt((frames**2).mean(axis=1)) > VOICED_RMS)


def voiced_span(pcm: bytes, sample_rate: int) -> tuple[int, int] | None:
    """First and past-the-last sample of the voiced 10 ms windows, or None if all quiet."""
    voiced = np.nonzero(_voiced_windows(np.frombuffer(pcm, dtype=np.int16), sample_rate))[0]
    if len(voiced) == 0:
        return None
    window = sample_rate // 100
    return int(voiced[0]) * window, (int(voiced[-1]) + 1) * window


def boundary_gaps(audio: np.ndarray, sample_rate: int, count: int) -> list[tuple[int, int]]:
    """The ``count`` silences in ``audio`` (trimmed to its voice) that are clause
    boundaries, in order, as sample ranges: its ``count`` longest, each at least
    ``BOUNDARY_GAP_S`` long and ``BOUNDARY_RATIO`` times longer than any other.
    ValueError if they cannot be told apart."""
    window = sample_rate // 100
    voiced = _voiced_windows(audio, sample_rate)
    gaps: list[tuple[int, int]] = []
    start: int | None = None
    for i, v in enumerate(voiced):
        if not v and start is None:
            start = i
        elif v and start is not None:
            gaps.append((start * window, i * window))
            start = None
    longest = sorted(gaps, key=lambda g: g[0] - g[1])  # longest first
    chosen, rest = longest[:count], longest[count:]
    shortest = min((b - a for a, b in chosen), default=0)
    if len(chosen) < count or shortest < BOUNDARY_GAP_S * sample_rate:
        raise ValueError(f"found {len(chosen)} clause-length silences, expected {count}")
    if rest and shortest < BOUNDARY_RATIO * max(b - a for a, b in rest):
        raise ValueError("a silence inside a clause is as long as one between clauses")
    return sorted(chosen)


class _Speaker:
    """Synthesizes each text once and trims it to its voice."""

    def __init__(self, voice: Voice) -> None:
        self.voice = voice
        self._clips: dict[str, np.ndarray] = {}

    def clip(self, text: str, fresh: bool = False) -> np.ndarray:
        if fresh or text not in self._clips:
            pcm = self.voice.say(text)
            span = voiced_span(pcm, self.voice.sample_rate)
            if span is None:
                raise ValueError(f"the voice said nothing for {text!r}")
            self._clips[text] = np.frombuffer(pcm, dtype=np.int16)[span[0] : span[1]]
        return self._clips[text]

    def clauses(self, turn: CorpusTurn) -> list[np.ndarray]:
        """The turn's clauses as voice, in its rendition, without the pauses."""
        if turn.rendition == "apart" or len(turn.clauses) == 1:
            return [self.clip(c) for c in turn.clauses]
        # Piper pauses at every comma and sentence end; the turn pauses at some of them.
        fine = [len(split_clauses(c)) for c in turn.clauses]
        text = " ".join(turn.clauses)
        for attempt in range(IN_CONTEXT_TRIES):
            whole = self.clip(text, fresh=attempt > 0)
            try:
                gaps = boundary_gaps(whole, self.voice.sample_rate, sum(fine) - 1)
                break
            except ValueError as e:
                why = e
        else:
            raise ValueError(f"{turn.text!r} in context: {why}")
        cuts = [gaps[sum(fine[: i + 1]) - 1] for i in range(len(fine) - 1)]
        edges = [0, *(x for gap in cuts for x in gap), len(whole)]
        return [whole[edges[i] : edges[i + 1]] for i in range(0, len(edges), 2)]


def speak_turns(
    turns: Sequence[CorpusTurn], voice: Voice, tail_s: float, seed: int = 7
) -> list[TurnAudio]:
    """Each turn as audio: ``LEAD_S`` of noise, its clauses (trimmed to their voice) with
    exactly its pause between each two, ``tail_s`` of noise after; noise (``NOISE_DBFS``,
    seeded per turn) under it all. Each text is synthesized once."""
    rate = voice.sample_rate
    speaker = _Speaker(voice)
    std = 32768.0 * 10 ** (NOISE_DBFS / 20)
    out: list[TurnAudio] = []
    for index, turn in enumerate(turns):
        parts: list[np.ndarray] = [np.zeros(int(LEAD_S * rate), dtype=np.float32)]
        pause = np.zeros(int(turn.pause_ms * rate / 1000), dtype=np.float32)
        last_start = 0
        for i, clause in enumerate(speaker.clauses(turn)):
            if i:
                parts.append(pause)
            last_start = sum(len(p) for p in parts)
            parts.append(clause.astype(np.float32))
        voiced_end = sum(len(p) for p in parts)
        parts.append(np.zeros(int(tail_s * rate), dtype=np.float32))
        audio = np.concatenate(parts)
        audio += np.random.default_rng([seed, index]).normal(0.0, std, len(audio))
        pcm = np.clip(np.round(audio), -32768, 32767).astype(np.int16).tobytes()
        out.append(TurnAudio(turn, pcm, rate, last_start / rate, voiced_end / rate))
    return out
