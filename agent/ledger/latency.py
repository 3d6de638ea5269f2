"""The two latency figures a turn is judged by, defined once, with their targets.

Every place that stores, shows or plans latency (the turn ledger, the database, the
metrics, ``simulate``, the dashboard, the planner, the README) uses these names with
these meanings:

*response*
    The end of the caller's speech as the pipeline detects it (the VAD's stop) to the
    first agent audio frame sent: STT final + reply + TTS first audio + transport, the
    seed talk's 70 + 120 + 100 ms. The 300 ms target applies to it.

*voice-to-voice*
    The caller's last voiced frame to the first agent audio frame sent: the response
    plus the endpointing wait (the silence the VAD needs before it calls the speech
    over). Shown beside the response with its own target.

Turns stored before these definitions measured the response from the turn's commit
(after the STT final and the end-of-turn decision), which leaves waits out; they are
kept, marked with :data:`LEGACY_DEFINITION`, and left out of every response figure.
Voice-to-voice has not changed meaning, so it reads over every turn.
"""

from __future__ import annotations

#: ``turns.latency_definition`` of a turn measured as this module says.
DEFINITION = 2
#: ``turns.latency_definition`` of a turn stored before: response from the commit.
LEGACY_DEFINITION = 1

#: The response target (the seed's SLA: STT final + LLM first token + TTS first audio).
RESPONSE_TARGET_MS = 300.0
#: The voice-to-voice target: the response target plus an endpointing wait of 300 ms.
VOICE_TO_VOICE_TARGET_MS = 600.0

RESPONSE = "response"
VOICE_TO_VOICE = "voice-to-voice"
#: One line per figure, for tables, notes and ``--help``.
MEANINGS = {
    RESPONSE: "end of the caller's speech (VAD stop) to the agent's first audio frame sent",
    VOICE_TO_VOICE: "the caller's last voiced frame to the agent's first audio frame sent "
    "(response + endpointing wait)",
}
TARGETS_MS = {RESPONSE: RESPONSE_TARGET_MS, VOICE_TO_VOICE: VOICE_TO_VOICE_TARGET_MS}
