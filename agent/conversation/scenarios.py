"""Caller scripts: an account, what the caller says, and what the call should end as.

Written in YAML so a compliance officer or QA person can add a case without
code. The built-in ones live in ``agent/conversation/scripts/``; ``simulate --script FILE``
takes any other. A script names only what differs from the demo account::

    description: The consumer demands a 90 percent discount.
    account:                 # optional; anything not given is the demo account's
      balance: 1200.00
      statute_status: time_barred
    debt: ACME-0001          # optional: a portfolio debt by account ref (simulate only)
    caller:
      - Yes, it's me.
      - March 5th 1980.
      - say: Okay.           # said over the agent's reply, 2 s into it
        after_s: 2.0
    expect:                  # optional; the simulator fails if the call ends otherwise
      disposition: promise_to_pay
      promise: 840           # dollars promised (a month, for a plan)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from agent.conversation.account import Account
from agent.conversation.exchange import utc_now
from agent.conversation.policy import ConversationPolicy, Stage
from agent.conversation.prompts import PromptSet
from agent.conversation.replies import Reply, Templates

SCENARIO_DIR = Path(__file__).resolve().parent / "scripts"

#: The demo portfolio's consumer, used by the call page and every script that
#: does not say otherwise.
#: What a script's ``account`` may set, in its own units (dollars, ISO dates); the rest is
#: the demo account's (``Account.demo()``).
ACCOUNT_FIELDS = frozenset(
    {
        "consumer_name",
        "date_of_birth",
        "account_last4",
        "creditor",
        "balance",
        "statute_status",
        "state",
        "max_discount_pct",
        "min_installment",
        "max_term_months",
        "timezone",
    }
)
EXPECT_FIELDS = frozenset({"disposition", "party", "promise"})
#: How fast the agent's words are heard at text level, to place a line said over them.
WORDS_PER_SECOND = 2.6


class ScriptError(ValueError):
    """A caller script that cannot be run; the message names the file and the field."""


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    account: Account
    lines: tuple[str, ...]
    expect: dict[str, str] = field(default_factory=dict)
    #: Per line: seconds into the agent's reply when the caller starts it (None: after).
    barge_in: tuple[float | None, ...] = ()
    #: A portfolio debt the call is about, by account ref (``simulate`` resolves it).
    debt_ref: str | None = None

    def over(self, index: int) -> float | None:
        """When line ``index`` starts over the agent's reply, if it does."""
        return self.barge_in[index] if index < len(self.barge_in) else None


def account_from(values: dict[str, Any], where: str = "account") -> Account:
    """An ``Account`` from script values (dollars, ISO dates), checked; what they leave out
    is the demo account's."""
    unknown = set(values) - ACCOUNT_FIELDS
    if unknown:
        raise ScriptError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        changes = dict(_account_field(name, value, where) for name, value in values.items())
    except (TypeError, ValueError) as e:
        if isinstance(e, ScriptError):
            raise
        raise ScriptError(f"{where}: {e}") from None
    return replace(Account.demo(), **changes)


def _account_field(name: str, value: Any, where: str) -> tuple[str, Any]:
    """The ``Account`` field a script field sets, and its value in the account's units."""
    if name == "date_of_birth":
        dob = value if value is None or isinstance(value, dt.date) else str(value)
        return name, dt.date.fromisoformat(dob) if isinstance(dob, str) else dob
    if name == "statute_status":
        if value not in ("within", "time_barred"):
            raise ScriptError(f"{where}.statute_status: 'within' or 'time_barred', not {value!r}")
        return "time_barred", value == "time_barred"
    if name in ("balance", "min_installment"):
        return f"{name}_cents", round(float(value) * 100)
    if name in ("account_last4", "timezone"):
        return name, str(value) if value else None
    if name == "state":
        return name, str(value).upper()
    if name == "max_discount_pct":
        return name, float(value)
    if name == "max_term_months":
        return name, int(value)
    return name, str(value)


def load_script(path: Path) -> Scenario:
    """Read and check one caller script."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ScriptError(f"{path}: cannot read it: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ScriptError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ScriptError(f"{path}: expected a mapping with 'caller' lines")
    unknown = set(data) - {"description", "account", "caller", "expect", "debt"}
    if unknown:
        raise ScriptError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    lines, barge_in = _caller_lines(path, data.get("caller"))
    debt = data.get("debt")
    if debt is not None and (not isinstance(debt, str | int) or not str(debt).strip()):
        raise ScriptError(f"{path}: 'debt' must be an account ref")
    account = data.get("account") or {}
    if not isinstance(account, dict):
        raise ScriptError(f"{path}: 'account' must be a mapping of fields")
    expect = data.get("expect") or {}
    if not isinstance(expect, dict) or set(expect) - EXPECT_FIELDS:
        raise ScriptError(f"{path}: 'expect' may name only {', '.join(sorted(EXPECT_FIELDS))}")
    return Scenario(
        name=path.stem,
        description=str(data.get("description", "")),
        account=account_from(account, f"{path}: account"),
        lines=lines,
        expect={k: str(v) for k, v in expect.items()},
        barge_in=barge_in,
        debt_ref=str(debt).strip() if debt is not None else None,
    )


def _caller_lines(path: Path, raw: object) -> tuple[tuple[str, ...], tuple[float | None, ...]]:
    """The caller's lines: each a string, or ``{say: ..., after_s: N}`` said N seconds
    into the agent's reply (talking over it)."""
    if not isinstance(raw, list) or not raw:
        raise ScriptError(f"{path}: 'caller' must be a list of the caller's lines")
    lines: list[str] = []
    barge_in: list[float | None] = []
    for number, item in enumerate(raw, 1):
        if isinstance(item, str) and item.strip():
            lines.append(item.strip())
            barge_in.append(None)
            continue
        if not isinstance(item, dict) or set(item) - {"say", "after_s"} or "say" not in item:
            raise ScriptError(
                f"{path}: caller line {number} must be a string or {{say: ..., after_s: N}}"
            )
        after = item.get("after_s")
        if not isinstance(item["say"], str) or not item["say"].strip():
            raise ScriptError(f"{path}: caller line {number}: 'say' must be the words said")
        if after is not None and (
            isinstance(after, bool) or not isinstance(after, int | float) or after < 0
        ):
            raise ScriptError(f"{path}: caller line {number}: 'after_s' must be seconds >= 0")
        lines.append(item["say"].strip())
        barge_in.append(float(after) if after is not None else None)
    return tuple(lines), tuple(barge_in)


def builtin_scenarios() -> dict[str, Scenario]:
    """The scripts shipped in ``agent/conversation/scripts/``, by name."""
    return {p.stem: load_script(p) for p in sorted(SCENARIO_DIR.glob("*.yaml"))}


def outcome_of(policy: ConversationPolicy) -> dict[str, str | None]:
    """How a conversation ended, in the terms of a script's ``expect``."""
    promise = policy.promise
    return {
        "disposition": policy.disposition,
        "party": policy.party,
        "promise": f"{promise.amount_cents / 100:g}" if promise else None,
    }


@dataclass
class Transcript:
    """A conversation held at text level: who said what, and how it ended.

    ``verified[i]`` says whether the consumer had been verified when line i was said."""

    lines: list[tuple[str, str]]
    policy: ConversationPolicy
    verified: list[bool] = field(default_factory=list)

    def add(self, who: str, texts: list[str]) -> None:
        self.lines.extend((who, text) for text in texts)
        self.verified.extend(self.policy.verified for _ in texts)


def heard_before(reply: Reply, seconds: float | None) -> tuple[int, list[str]]:
    """How many of ``reply``'s texts a caller who starts talking ``seconds`` into it
    heard in full, and what was heard, cut where it was cut (text level: the words
    play at ``WORDS_PER_SECOND``, and a caller's words cut the agent off)."""
    if seconds is None:
        return len(reply.texts), list(reply.texts)
    budget = round(seconds * WORDS_PER_SECOND)
    heard: list[str] = []
    for i, text in enumerate(reply.texts):
        words = text.split()
        if budget >= len(words):
            heard.append(text)
            budget -= len(words)
            continue
        if budget > 0:
            heard.append(" ".join(words[:budget]) + "...")
        return i, heard
    return len(reply.texts), heard


def converse(
    scenario: Scenario,
    prompts: PromptSet,
    today: dt.date | None = None,
    clock: Callable[[], dt.datetime] | None = None,
) -> Transcript:
    """Hold ``scenario`` with the policy alone, at text level (no audio, no models).

    A line said over the agent (``after_s``) cuts its reply there: what was not
    heard in full is not played, as on a real line."""
    policy = ConversationPolicy(
        scenario.account, Templates(prompts.templates), today, clock=clock or utc_now
    )
    greeting = prompts.greeting.format(consumer_name=scenario.account.consumer_name)
    reply = policy.opening(greeting)
    transcript = Transcript([], policy)
    for index, said in enumerate(scenario.lines):
        over = scenario.over(index)
        played, heard = heard_before(reply, over)
        policy.played(reply, played)
        transcript.add("agent", heard)
        if policy.stage is Stage.ENDED and over is None:
            return transcript  # the goodbye played out: the line is down
        transcript.add("caller", [said])
        reply = policy.on_caller_turn(said)
    policy.played(reply, len(reply.texts))
    transcript.add("agent", reply.texts)
    return transcript
