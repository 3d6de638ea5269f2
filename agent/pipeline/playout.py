"""What the caller heard: each spoken piece of text followed to the end of its audio.

The TTS speaks text a piece at a time (each text frame it gets, in TOKEN mode one
synthesis each). Behind each piece it puts a ``PlayedFrame`` into the same audio
context, so the mark leaves the output transport only once the piece's audio has
been written to the line, and an interruption that drops the audio drops the mark
too. ``Playout`` watches what the output transport pushes (a synchronous handler
on it, so no mark can be lost between the output and a processor behind it when
an interruption flushes that processor's queue):

- a mark: its piece was played to the end;
- an interruption: the piece then playing was cut, at the share of its audio
  played so far; the pieces queued behind it were never heard.

From that it keeps ``log``, the agent's words as the caller heard them (what the
turn records store), and tells its listener (the policy processor) which pieces
it tagged were heard, so the policy counts a disclosure or a question only once
the caller has heard it to its end.

There are no word timestamps from our TTS, so a cut piece is cut by the share of
its audio duration that was played, at a word boundary, and marked as cut.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    DataFrame,
    Frame,
    InterruptionFrame,
    OutputAudioRawFrame,
)
from pipecat.processors.frame_processor import FrameProcessor

logger = logging.getLogger(__name__)

#: ``Frame.metadata`` key of a text frame's tag, reported back when the piece was heard.
TAG = "playout_tag"
#: ``InterruptionFrame.metadata`` key: which interruption it is (counted where the
#: caller's turn enters the conversation), so each stage drops only what came before it.
EPOCH = "playout_epoch"
#: A piece cut before this much of it played was not heard at all.
MIN_CUT_S = 0.05
#: Speaking rate used to size a piece whose synthesis was cut before it finished.
CHARS_PER_S = 15.0

TranscriptListener = Callable[[str, str], None]


@dataclass(eq=False)
class Piece:
    """One text the TTS speaks: its audio so far, and whether synthesis finished."""

    text: str
    tag: Any = None
    epoch: int = 0
    interruptible: bool = True
    audio_s: float = 0.0
    synthesized: bool = False

    def duration_s(self) -> float:
        """The piece's audio, estimated from its length while synthesis is unfinished."""
        if self.synthesized:
            return self.audio_s
        return max(self.audio_s, len(self.text) / CHARS_PER_S)


@dataclass
class PlayedFrame(DataFrame):
    """Leaves the output transport once the audio spoken before it has been played.

    The TTS puts one behind each piece it speaks. The policy processor pushes a bare
    one (no piece yet) behind a request the LLM phrases; the TTS gives it its piece."""

    tag: Any = None
    piece: Piece | None = field(default=None, repr=False)


@dataclass(frozen=True)
class PlayedText:
    """A piece of the agent's speech as heard: whole, or cut after ``fraction`` of it."""

    text: str
    fraction: float = 1.0

    @property
    def cut(self) -> bool:
        return self.fraction < 1.0

    def __str__(self) -> str:
        return self.text if not self.cut else cut_text(self.text, self.fraction)


def cut_text(text: str, fraction: float) -> str:
    """``text`` as heard when cut after ``fraction`` of its audio: the words played
    in full (by their share of the characters), then a cut marker with the share."""
    end = int(len(text) * max(0.0, min(fraction, 1.0)))
    heard = text[:end]
    if end < len(text) and not text[end].isspace():
        heard = heard.rsplit(" ", 1)[0] if " " in heard else ""
    marker = f"[cut at {round(100 * fraction)}%]"
    return f"{heard.rstrip()} {marker}" if heard.strip() else marker


class PlayoutListener(Protocol):
    """Told which tagged pieces were heard, and when an interruption cut the rest."""

    def on_heard(self, tag: Any) -> None: ...

    def on_interrupted(self, epoch: int | None) -> None: ...


class Playout:
    """One call's record of what was played to the caller; see the module docstring."""

    def __init__(self, on_transcript: TranscriptListener | None = None) -> None:
        self._on_transcript = on_transcript
        self.listener: PlayoutListener | None = None
        #: The agent's words as heard, in order.
        self.log: list[PlayedText] = []
        #: Pieces the TTS has begun, in order, not yet played to their end nor dropped.
        self._pending: list[Piece] = []
        #: Seconds of agent audio the output has written, and that count when the
        #: piece now playing began (its audio is what was written since).
        self._played_s = 0.0
        self._piece_start_s = 0.0
        #: The last interruption the TTS has seen (``EPOCH``): pieces begun after it
        #: are not dropped by it when it reaches the output.
        self.tts_epoch = 0

    # -- the TTS side ----------------------------------------------------------------

    def begin(self, text: str, tag: Any, interruptible: bool) -> Piece:
        """The TTS starts speaking ``text``: a piece, whose audio it counts as it comes."""
        piece = Piece(text.strip(), tag, self.tts_epoch, interruptible)
        self._pending.append(piece)
        return piece

    # -- the output side ---------------------------------------------------------------

    def attach(self, output: FrameProcessor) -> None:
        """Watch what ``output`` (the output transport) pushes, as it pushes it."""
        output.add_event_handler("on_before_push_frame", self._on_output_push)

    def _on_output_push(self, _output: FrameProcessor, frame: Frame) -> None:
        if isinstance(frame, OutputAudioRawFrame):
            channels = max(frame.num_channels, 1)
            self._played_s += len(frame.audio) / (2 * frame.sample_rate * channels)
        elif isinstance(frame, PlayedFrame):
            if frame.piece is not None:
                self._heard(frame.piece)
        elif isinstance(frame, InterruptionFrame):
            self._interrupted(frame.metadata.get(EPOCH))
        elif isinstance(frame, BotStartedSpeakingFrame | BotStoppedSpeakingFrame):
            self._piece_start_s = self._played_s  # no piece's audio spans a silence

    def _heard(self, piece: Piece) -> None:
        if piece in self._pending:
            self._pending.remove(piece)
        self._piece_start_s = self._played_s
        if piece.text:
            self._record(PlayedText(piece.text))
        if piece.tag is not None and self.listener is not None:
            self.listener.on_heard(piece.tag)

    def _interrupted(self, epoch: int | None) -> None:
        dropped = [
            p for p in self._pending if p.interruptible and (epoch is None or p.epoch < epoch)
        ]
        cut = self.in_progress()
        if cut is not None and dropped and dropped[0] is self._pending[0]:
            self._record(cut)
        self._pending = [p for p in self._pending if p not in dropped]
        self._piece_start_s = self._played_s
        if self.listener is not None:
            self.listener.on_interrupted(epoch)

    def _record(self, played: PlayedText) -> None:
        self.log.append(played)
        if self._on_transcript is not None:
            self._on_transcript("agent", str(played))

    # -- what was heard ------------------------------------------------------------

    def in_progress(self) -> PlayedText | None:
        """The piece playing now, as heard so far (None: nothing is playing)."""
        if not self._pending:
            return None
        piece = self._pending[0]
        played = self._played_s - self._piece_start_s
        if not piece.text or played < MIN_CUT_S:
            return None
        return PlayedText(piece.text, min(played / max(piece.duration_s(), 1e-6), 0.99))

    @property
    def position(self) -> int:
        """Where the log stands now: ``said_since(position)`` is what is heard from here."""
        return len(self.log)

    def said_since(self, position: int, *, playing: bool = True) -> str:
        """The agent's words heard since ``position``; with ``playing``, the piece
        playing now too, as heard so far (the caller cut in, or the call ended)."""
        heard = [str(p) for p in self.log[position:]]
        current = self.in_progress() if playing else None
        if current is not None:
            heard.append(str(current))
        return " ".join(heard).strip()
