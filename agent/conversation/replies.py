"""What the conversation policy hands the pipeline: replies, the events it notes, tool answers.

Plain data, shared by the policy (``agent.conversation.policy``), which makes them, and
the pipeline's processors, the recording and the store, which read them; so a reader of
``PolicyEvent`` does not import the policy.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PolicyEvent:
    """A compliance-relevant moment: a disclosure, a verification, a consumer's signal."""

    kind: str
    detail: dict[str, Any]
    at: dt.datetime


@dataclass
class Reply:
    """What the agent says next (fixed texts, verbatim) and whether the call goes on.

    ``keys`` names the template of each text. ``notes`` holds the events to note
    once text i has been heard in full (``ConversationPolicy.played``);
    ``question`` is the index of the text the caller is to answer, if any.
    ``phrase`` is set when the reply is one question the LLM may phrase in its own
    words (the text is the reference it must keep to); ``texts`` stay the vetted
    fallback, spoken whenever the LLM's version is missing or blocked.
    """

    texts: list[str]
    end_call: bool = False
    transfer: bool = False
    phrase: str | None = None
    keys: list[str] = field(default_factory=list)
    notes: dict[int, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    question: int | None = None


@dataclass(frozen=True)
class ToolOutcome:
    """The policy's answer to a tool call of the LLM: done or refused, and what to say."""

    allowed: bool
    reason: str
    reply: Reply


@dataclass(frozen=True)
class Part:
    """One text of a reply: its template key, words and the events it carries."""

    key: str
    text: str
    notes: tuple[tuple[str, dict[str, Any]], ...] = ()


#: Every template the policy may speak: a prompt version must have them all.
REQUIRED_TEMPLATES = frozenset(
    """confirm_identity who_is_calling what_about ask_dob ask_last4 ask_full_dob
    verification_retry verification_failed third_party mini_miranda time_barred_notice
    ny_time_barred_notice purpose purpose_again ask_amount ask_monthly_amount one_or_monthly
    which_amount monthly_only above_balance counter_settlement counter_discount counter_plan
    press_once refused ask_date_and_method ask_date ask_method date_passed date_too_far
    read_back_payment read_back_settlement read_back_plan read_back_plan_last read_back_again
    what_to_change promise_recorded no_card_numbers no_numbers robot_answer transfer
    recording_objection no_arrest no_suit_time_barred not_legal_advice dispute_recorded
    dispute_partial stop_calling ask_attorney attorney hardship bankruptcy deceased
    noted_unverified deceased_unverified noted handoff_now handoff_later callback_when
    callback_confirmed inconvenient_noted wrong_number didnt_catch not_understood_end after_end
    wrap_up voicemail""".split()
)


class Templates:
    """The fixed texts of a prompt version, filled from the account and nothing else."""

    def __init__(self, texts: dict[str, str]) -> None:
        self._texts = texts

    def say(self, key: str, **values: Any) -> str:
        try:
            return self._texts[key].format(**values)
        except KeyError as e:
            raise KeyError(f"template {key!r} or its placeholder {e} is missing") from None

    def missing(self, keys: frozenset[str]) -> list[str]:
        return sorted(keys - set(self._texts))
