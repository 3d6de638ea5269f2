"""Card digits read aloud (rule C11): the caller is stopped at the first digits, and the
digits go no further than the STT.

``CardGuard`` sits right after the STT. On a transcript (interim or final) that holds card
data it interrupts whatever the agent is saying and has it say the policy's
``no_card_numbers`` text (the secure payment link, or the keypad; ``no_numbers`` to a
caller not yet verified), once per caller turn; notes ``card_number_interrupted`` (a flag
for review); and tells the recording (``CardDataHeardFrame``), which silences the caller's
audio of that turn. The digits themselves go nowhere: an interim (or eager) transcript
with card data is dropped, a final one goes on with the digit runs cut out (an empty one
is dropped), so the user context, the LLM, the policy, the turn ledger and its store see
only the rest of the sentence. The listener that the STT tells of each utterance before
the pipeline does (``agent.pipeline.speculation``) gets the same cut text (``listening``).

What counts as card data is tuned so the conversation's own numbers survive: a date of
birth ("oh three twelve eighty four"), a phone number (7, 10 or 11 digits in 3-3-4
groups) and an amount ("$1,250") are not card digits; anything 13 digits or longer, two
four-digit groups in a row ("4111 1111"), five or more digits after a card word ("my
visa is 4111 1...") or three or more after "CVV" or "expires", and the markers the STT
client already put in place of card data, are. While payment is open (the policy's
``payment_open``: the moment a consumer is most likely to read a card out) any run of six
or more digits that is not an amount or a date is card data too.

Keyed digits (``InputDTMFFrame``) also stop here: nothing after the guard needs them (the
keypad path is a DTMF-masked payment provider, not this pipeline), so they can reach no
context, log or recording (RFC 4733 events are not audio; see agent/pipeline/recording.py for
tones sent in band).

The warning is a ``TTSSpeakFrame`` that interruptions do not drop: the caller, still
reading, hears it through. It is not an answer of the policy (no
``LLMFullResponseStartFrame`` passes the recording's tap), so the recording keeps holding
the caller's audio for the policy's judgement.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from pipecat.frames.frames import (
    EagerTranscriptionFrame,
    Frame,
    InputDTMFFrame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    SystemFrame,
    TranscriptionFrame,
    TTSSpeakFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.conversation.policy import ConversationPolicy
from agent.conversation.redaction import CARD_REMOVED, CODE_REMOVED, EXPIRY_REMOVED
from agent.conversation.replies import PolicyEvent
from agent.conversation.spoken_numbers import DIGIT_ITEM, digit_groups

EventSink = Callable[[PolicyEvent], None]

#: What the STT client writes in place of the card data it recognised itself.
CARD_MARKERS = (CARD_REMOVED, EXPIRY_REMOVED, CODE_REMOVED)
#: A run this long is a card number or part of one, whatever surrounds it: longer than any
#: US phone number (11 with the country code), shorter than any card (13-19).
LONG_RUN = 12
#: Digits after a card word that are more than the last four (which a consumer may say).
AFTER_CARD_WORD = 5
#: Digits after "CVV", "security code" or "expires": a code is 3-4, an expiry 3-6.
AFTER_CODE_WORD = 3
#: While payment is open: a run this long is not a last four, a code or an expiry.
WHILE_PAYING = 6

_GLUE = r"[\s,.\-/]+(?:(?:uh|um|and)\b[\s,.\-]*)?"
# Digits read out one group after another: "4111 1111", "four one one one, one one",
# "forty one eleven", "4111-1111", with the odd "uh" between groups.
_RUN_RE = re.compile(rf"(?<![\w.]){DIGIT_ITEM}(?:{_GLUE}{DIGIT_ITEM})*", re.I)
_CARD_WORD_RE = re.compile(
    r"\b(?:card|visa|master ?card|amex|american express|discover|credit|debit)\b", re.I
)
_CODE_WORD_RE = re.compile(
    r"\b(?:c\.?\s?v\.?\s?[vc]\.?\s?2?|cv2|csc|security code|expir\w*|exp|valid (?:thru|through))\b",
    re.I,
)
_MONEY_AFTER_RE = re.compile(r"\s*(?:dollars?|bucks|cents?|k\b|grand)", re.I)
_MONEY_BEFORE_RE = re.compile(r"\$\s*$")


@dataclass(frozen=True)
class DigitRun:
    """A stretch of digits read out, where it is in the text and its groups as said."""

    start: int
    end: int
    groups: tuple[str, ...]

    @property
    def digits(self) -> str:
        return "".join(self.groups)


def digit_runs(text: str) -> list[DigitRun]:
    """Every run of digits in ``text``, written or spoken."""
    runs = []
    for m in _RUN_RE.finditer(text):
        groups = tuple(digit_groups(m.group(0)))
        if groups:
            runs.append(DigitRun(m.start(), m.end(), groups))
    return runs


def longest_digit_run(text: str) -> int:
    """How many digits the longest run in ``text`` holds."""
    return max((len(r.digits) for r in digit_runs(text)), default=0)


def has_card_marker(text: str) -> bool:
    return any(marker in text for marker in CARD_MARKERS)


def _money(text: str, run: DigitRun) -> bool:
    return bool(_MONEY_BEFORE_RE.search(text[: run.start]) or _MONEY_AFTER_RE.match(text, run.end))


def _date(run: DigitRun) -> bool:
    """Month, day and perhaps a year, group by group as a date is read: "12/15/2025",
    "oh three twelve eighty four", "3 12 84"; never a group of four first ("4111 11")."""
    groups = list(run.groups)
    parts: list[str] = []
    for _ in ("month", "day"):
        if len(groups) >= 2 and groups[0] == "0" and len(groups[1]) == 1:
            parts.append(groups[0] + groups.pop(1))  # "oh three"
            groups.pop(0)
        elif groups and len(groups[0]) <= 2:
            parts.append(groups.pop(0))
        else:
            return False
    year = "".join(groups)
    month, day = int(parts[0]), int(parts[1])
    return (
        1 <= month <= 12
        and 1 <= day <= 31
        and (year == "" or len(year) == 2 or (len(year) == 4 and year[:2] in ("19", "20")))
    )


def _four_groups(run: DigitRun) -> bool:
    return any(
        len(a) == 4 and len(b) == 4 for a, b in zip(run.groups, run.groups[1:], strict=False)
    )


def card_spans(text: str, *, payment_open: bool = False) -> list[tuple[int, int]]:
    """Where ``text`` holds card data (see the module's docstring), in order."""
    spans = [
        (m.start(), m.end())
        for marker in CARD_MARKERS
        for m in re.finditer(re.escape(marker), text)
    ]
    for run in digit_runs(text):
        count = len(run.digits)
        before = text[max(0, run.start - 40) : run.start]
        money = _money(text, run)
        if (
            count > LONG_RUN
            or _four_groups(run)
            or (count >= AFTER_CARD_WORD and not money and _CARD_WORD_RE.search(before))
            or (count >= AFTER_CODE_WORD and _CODE_WORD_RE.search(before))
            or (payment_open and count >= WHILE_PAYING and not money and not _date(run))
        ):
            spans.append((run.start, run.end))
    return sorted(spans)


def cut(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without ``spans``, its spacing tidied; "" when only punctuation is left."""
    kept, at = [], 0
    for start, end in spans:
        if start >= at:
            kept.append(text[at:start])
            at = end
    kept.append(text[at:])
    rest = re.sub(r"\s{2,}", " ", "".join(kept))
    rest = re.sub(r"\s*[,.?!;:](?:\s*[,.?!;:])*", lambda m: m.group(0).strip()[-1], rest)
    rest = rest.strip()
    return rest if re.search(r"\w", rest) else ""


def warning_for(policy: ConversationPolicy) -> str:
    """What the caller is told, as the policy tells it: the pay link and the keypad only
    once the consumer is verified (before, a payment hint would tell a third party, C3)."""
    return policy.templates.say("no_card_numbers" if policy.verified else "no_numbers")


class UtteranceListener(Protocol):
    """``agent.pipeline.stt.UtteranceListener``: told of each utterance before the pipeline."""

    def heard(self, text: str) -> None: ...

    def resumed(self) -> None: ...


@dataclass
class CardDataHeardFrame(SystemFrame):
    """Card data was heard in the caller's words (the frame holds none of it): the
    recording silences the caller's audio of the turn. A system frame, so it keeps its
    place behind the audio it follows and no interruption drops it."""


class _Screened:
    """The STT's utterance listener, told only what the guard lets through."""

    def __init__(self, guard: CardGuard, listener: UtteranceListener) -> None:
        self._guard, self._listener = guard, listener

    def heard(self, text: str) -> None:
        rest = self._guard.screen(text)
        if rest:
            self._listener.heard(rest)

    def resumed(self) -> None:
        self._listener.resumed()


class CardGuard(FrameProcessor):
    """Stops a caller reading card digits, and the digits themselves (module docstring)."""

    def __init__(
        self,
        warning: Callable[[], str],
        on_event: EventSink,
        payment_open: Callable[[], bool] = lambda: False,
        on_digits: Callable[[], None] = lambda: None,
    ) -> None:
        # Direct mode: each frame is handled in the task that pushed it, so the caller's
        # 50 audio frames a second cost a call here, not a queue and a task switch.
        super().__init__(enable_direct_mode=True)
        self._warning = warning
        self._on_event = on_event
        self._payment_open = payment_open
        self._on_digits = on_digits
        #: The caller was told in this turn already: once a turn is enough.
        self._warned = False

    @classmethod
    def for_call(
        cls, policy: ConversationPolicy | None, templates: Mapping[str, str], on_event: EventSink
    ) -> CardGuard:
        """The guard of a call with ``policy`` (or none: a developer's bare pipeline)."""
        if policy is None:
            text = templates.get("no_numbers") or templates["no_card_numbers"]
            return cls(lambda: text, on_event)
        return cls(
            lambda: warning_for(policy),
            on_event,
            lambda: policy.payment_open,
            policy.card_digits_heard,
        )

    def screen(self, text: str) -> str:
        """``text`` without its card data ("" when nothing else is left)."""
        spans = card_spans(text, payment_open=self._payment_open())
        return cut(text, spans) if spans else text

    def listening(self, listener: UtteranceListener) -> UtteranceListener:
        """``listener`` told only the screened text of each utterance."""
        return _Screened(self, listener)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, UserStoppedSpeakingFrame):
            self._warned = False  # the turn is over (the aggregator tells both ways)
        if direction is FrameDirection.DOWNSTREAM:
            if isinstance(frame, InputDTMFFrame):
                return
            if isinstance(frame, InterimTranscriptionFrame | EagerTranscriptionFrame):
                if card_spans(frame.text, payment_open=self._payment_open()):
                    await self._stop_the_caller("interim")
                    return
            elif isinstance(frame, TranscriptionFrame):
                await self._final(frame)
                return
        await self.push_frame(frame, direction)

    async def _final(self, frame: TranscriptionFrame) -> None:
        spans = card_spans(frame.text, payment_open=self._payment_open())
        if spans:
            await self._stop_the_caller("final")
        text = cut(frame.text, spans) if spans else frame.text
        if not text:
            return
        # A frame of the guard's own, even when nothing was cut: the turn ledger stores
        # the transcript the guard pushed, never the STT's.
        await self.push_frame(
            TranscriptionFrame(
                text,
                frame.user_id,
                frame.timestamp,
                frame.language,
                result=None if spans else frame.result,
                finalized=frame.finalized,
            )
        )

    async def _stop_the_caller(self, heard: str) -> None:
        await self.push_frame(CardDataHeardFrame())
        self._on_digits()  # the policy opens payment: the recording keeps nothing from here
        if self._warned:
            return
        self._warned = True
        self._on_event(PolicyEvent("card_number_interrupted", {"heard": heard}, datetime.now(UTC)))
        # Downstream only: what the agent is saying stops; a broadcast would also empty
        # the guard's own queue, and the caller's next transcript with it.
        await self.push_frame(InterruptionFrame())
        warning = TTSSpeakFrame(self._warning(), append_to_context=True)
        warning.interruptible = False
        await self.push_frame(warning)
