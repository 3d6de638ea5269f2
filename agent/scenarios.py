"""Caller scripts: an account, what the caller says, and what the call should end as.

Written in YAML so a compliance officer or QA person can add a case without
code. The built-in ones live in ``agent/scenarios/``; ``simulate --script FILE``
takes any other. A script names only what differs from the demo account::

    description: The consumer demands a 90 percent discount.
    account:                 # optional; anything not given is the demo account's
      balance: 1200.00
      statute_status: time_barred
    caller:
      - Yes, it's me.
      - March 5th 1980.
    expect:                  # optional; the simulator fails if the call ends otherwise
      disposition: promise_to_pay
      promise: 840           # dollars promised (a month, for a plan)
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.policy import Account, ConversationPolicy, Stage, Templates
from agent.prompts import PromptSet

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"

#: The demo portfolio's consumer, used by the call page and every script that
#: does not say otherwise.
DEMO_ACCOUNT: dict[str, Any] = {
    "consumer_name": "Jordan Smith",
    "date_of_birth": "1980-03-05",
    "account_last4": "4821",
    "creditor": "Acme Bank",
    "balance": 1200.00,
    "statute_status": "within",
    "state": "TX",
    "max_discount_pct": 30,
    "min_installment": 50.00,
    "max_term_months": 12,
}
ACCOUNT_FIELDS = frozenset(DEMO_ACCOUNT)
EXPECT_FIELDS = frozenset({"disposition", "party", "promise"})


class ScriptError(ValueError):
    """A caller script that cannot be run; the message names the file and the field."""


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    account: Account
    lines: tuple[str, ...]
    expect: dict[str, str] = field(default_factory=dict)


def account_from(values: dict[str, Any], where: str = "account") -> Account:
    """An ``Account`` from script values (dollars, ISO dates), checked."""
    unknown = set(values) - ACCOUNT_FIELDS
    if unknown:
        raise ScriptError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    merged = {**DEMO_ACCOUNT, **values}
    try:
        dob = merged["date_of_birth"]
        if dob is not None and not isinstance(dob, dt.date):
            dob = dt.date.fromisoformat(str(dob))
        status = merged["statute_status"]
        if status not in ("within", "time_barred"):
            raise ScriptError(f"{where}.statute_status: 'within' or 'time_barred', not {status!r}")
        return Account(
            consumer_name=str(merged["consumer_name"]),
            date_of_birth=dob,
            account_last4=str(merged["account_last4"]) if merged["account_last4"] else None,
            creditor=str(merged["creditor"]),
            balance_cents=round(float(merged["balance"]) * 100),
            time_barred=status == "time_barred",
            state=str(merged["state"]).upper(),
            max_discount_pct=float(merged["max_discount_pct"]),
            min_installment_cents=round(float(merged["min_installment"]) * 100),
            max_term_months=int(merged["max_term_months"]),
        )
    except (TypeError, ValueError) as e:
        if isinstance(e, ScriptError):
            raise
        raise ScriptError(f"{where}: {e}") from None


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
    unknown = set(data) - {"description", "account", "caller", "expect"}
    if unknown:
        raise ScriptError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    lines = data.get("caller")
    if not isinstance(lines, list) or not lines or not all(isinstance(x, str) for x in lines):
        raise ScriptError(f"{path}: 'caller' must be a list of the caller's lines")
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
        lines=tuple(line.strip() for line in lines),
        expect={k: str(v) for k, v in expect.items()},
    )


def builtin_scenarios() -> dict[str, Scenario]:
    """The scripts shipped in ``agent/scenarios/``, by name."""
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
    """A conversation held at text level: who said what, and how it ended."""

    lines: list[tuple[str, str]]
    policy: ConversationPolicy


def converse(scenario: Scenario, prompts: PromptSet, today: dt.date) -> Transcript:
    """Hold ``scenario`` with the policy alone, at text level (no audio, no models)."""
    policy = ConversationPolicy(scenario.account, Templates(prompts.templates), today)
    greeting = prompts.greeting.format(consumer_name=scenario.account.consumer_name)
    lines = [("agent", text) for text in policy.opening(greeting).texts]
    for said in scenario.lines:
        if policy.stage is Stage.ENDED:
            break
        lines.append(("caller", said))
        lines.extend(("agent", text) for text in policy.on_caller_turn(said).texts)
    return Transcript(lines, policy)
