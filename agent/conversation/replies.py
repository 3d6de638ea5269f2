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
