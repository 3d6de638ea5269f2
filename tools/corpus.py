"""The adversarial corpus: caller scripts by family, and what each must end as.

Each file of ``agent/conversation/scripts/corpus/`` is one family (third parties, verification,
signals, offers, refusals, card data, dates and times, talking over the agent) and
holds a list of scripts in the caller-script form of ``agent.conversation.scenarios``, with two
short-hands so one line can be tried at every point of a call:

    - name: bankruptcy
      say: I filed for bankruptcy last year.
      at: [greeting, identity, negotiation, commitment, read_back]
      expect: {disposition: bankruptcy, signals: [bankruptcy]}

``at`` puts ``say`` after the lines that reach that point (``STAGE_PREFIXES``), one
script per point; ``over`` (seconds) says it over the agent's reply instead of after
it. ``clock`` (an ISO instant, UTC) fixes when the call happens. Besides the fields
of a script's ``expect``, a corpus script may expect ``verified``, ``signals`` (kinds
that must be recorded), ``events`` (kinds that must be noted), ``absent`` (kinds that
must not be) and ``says`` (words some agent line must hold). Every script is also held
to the invariants of ``agent.conversation.invariants``, whatever it expects.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.conversation.invariants import Line, check_conversation
from agent.conversation.prompts import PromptSet
from agent.conversation.scenarios import (
    SCENARIO_DIR,
    Scenario,
    ScriptError,
    Transcript,
    account_from,
    converse,
    outcome_of,
)

CORPUS_DIR = SCENARIO_DIR / "corpus"
#: The corpus's calls happen on Wednesday, December 2, 2026, 10:00 in Chicago.
DEFAULT_CLOCK = dt.datetime(2026, 12, 2, 16, 0, tzinfo=dt.UTC)
#: The caller's lines that bring a call with the demo account to each point.
STAGE_PREFIXES: dict[str, tuple[str, ...]] = {
    "greeting": (),
    "identity": ("Yes, speaking.",),
    "negotiation": ("Yes, speaking.", "March 5th 1980."),
    "commitment": ("Yes, speaking.", "March 5th 1980.", "I'll pay it in full."),
    "read_back": (
        "Yes, speaking.",
        "March 5th 1980.",
        "I'll pay it in full.",
        "Friday, by check.",
    ),
}
SCRIPT_KEYS = frozenset(
    {"name", "description", "account", "caller", "say", "at", "over", "expect", "clock"}
)
EXPECT_KEYS = frozenset(
    {"disposition", "party", "promise", "verified", "signals", "events", "absent", "says"}
)


@dataclass(frozen=True)
class CorpusScript:
    """One script of the corpus, ready to hold."""

    family: str
    name: str
    scenario: Scenario
    expect: dict[str, Any]
    clock: dt.datetime = DEFAULT_CLOCK

    def clock_fn(self) -> Callable[[], dt.datetime]:
        return lambda: self.clock


@dataclass
class Outcome:
    """How a script went: the problems found (none: passed) and its conversation."""

    script: CorpusScript
    problems: list[str]
    transcript: Transcript
    said: tuple[str, ...] = ()  # the caller's lines as heard (through audio: transcribed)

    @property
    def passed(self) -> bool:
        return not self.problems

    def lines(self) -> list[Line]:
        t = self.transcript
        return [Line(who, text, v) for (who, text), v in zip(t.lines, t.verified, strict=True)]


def load_family(path: Path) -> list[CorpusScript]:
    """The scripts of one family file, expanded."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ScriptError(f"{path}: cannot read it: {e}") from None
    if not isinstance(raw, list):
        raise ScriptError(f"{path}: expected a list of scripts")
    family = path.stem
    scripts: list[CorpusScript] = []
    for number, entry in enumerate(raw, 1):
        where = f"{path}: script {number}"
        if not isinstance(entry, dict) or "name" not in entry:
            raise ScriptError(f"{where}: a mapping with a 'name'")
        unknown = set(entry) - SCRIPT_KEYS
        if unknown:
            raise ScriptError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        scripts.extend(_expand(family, entry, where))
    names = [s.name for s in scripts]
    twice = {n for n in names if names.count(n) > 1}
    if twice:
        raise ScriptError(f"{path}: script names used twice: {', '.join(sorted(twice))}")
    return scripts


def _expand(family: str, entry: dict[str, Any], where: str) -> list[CorpusScript]:
    expect = entry.get("expect") or {}
    if not isinstance(expect, dict) or set(expect) - EXPECT_KEYS:
        raise ScriptError(f"{where}: 'expect' may name only {', '.join(sorted(EXPECT_KEYS))}")
    account = account_from(entry.get("account") or {}, f"{where}: account")
    clock = DEFAULT_CLOCK
    if "clock" in entry:
        try:
            clock = dt.datetime.fromisoformat(str(entry["clock"])).astimezone(dt.UTC)
        except ValueError:
            raise ScriptError(f"{where}: 'clock' must be an ISO instant") from None
    if "say" in entry:
        stages = entry.get("at") or ["greeting"]
        overs = entry.get("over") or [None]
        if not all(s in STAGE_PREFIXES for s in stages):
            raise ScriptError(f"{where}: 'at' may name only {', '.join(STAGE_PREFIXES)}")
        variants = [
            (
                f"{entry['name']}@{stage}" + (f"+{over:g}s" if over is not None else ""),
                [*STAGE_PREFIXES[stage], entry["say"]],
                [None] * len(STAGE_PREFIXES[stage]) + [over],
            )
            for stage in stages
            for over in overs
        ]
        tail, tail_barge = _lines(entry.get("caller") or [], where)
        variants = [
            (name, [*lines, *tail], [*barge, *tail_barge]) for name, lines, barge in variants
        ]
    else:
        caller = entry.get("caller")
        if not isinstance(caller, list) or not caller:
            raise ScriptError(f"{where}: 'caller' lines or a 'say' line")
        lines, barge = _lines(caller, where)
        variants = [(str(entry["name"]), lines, barge)]
    return [
        CorpusScript(
            family,
            name,
            Scenario(
                name,
                str(entry.get("description", "")),
                account,
                tuple(lines),
                {},
                tuple(barge),
            ),
            expect,
            clock,
        )
        for name, lines, barge in variants
    ]


def _lines(caller: list[Any], where: str) -> tuple[list[str], list[float | None]]:
    lines: list[str] = []
    barge: list[float | None] = []
    for item in caller:
        if isinstance(item, str):
            lines.append(item)
            barge.append(None)
        elif isinstance(item, dict) and "say" in item:
            lines.append(str(item["say"]))
            barge.append(float(item["after_s"]) if item.get("after_s") is not None else None)
        else:
            raise ScriptError(f"{where}: a caller line is a string or {{say:, after_s:}}")
    return lines, barge


def load_corpus(directory: Path = CORPUS_DIR) -> list[CorpusScript]:
    """Every family of the corpus, in file order."""
    return [s for path in sorted(directory.glob("*.yaml")) for s in load_family(path)]


def hold(script: CorpusScript, prompts: PromptSet, said: Sequence[str] | None = None) -> Outcome:
    """Hold ``script`` at text level (``said``: the caller's lines as heard, if not as
    written) and check it against its expectations and the invariants."""
    scenario = script.scenario
    if said is not None:
        scenario = Scenario(
            scenario.name,
            scenario.description,
            scenario.account,
            tuple(said),
            {},
            scenario.barge_in,
        )
    transcript = converse(scenario, prompts, clock=script.clock_fn())
    outcome = Outcome(script, [], transcript, tuple(scenario.lines))
    templates = [*prompts.templates.values(), prompts.greeting]
    outcome.problems = [
        *check_conversation(outcome.lines(), transcript.policy, templates),
        *_unmet(script.expect, transcript),
    ]
    return outcome


def _unmet(expect: dict[str, Any], transcript: Transcript) -> list[str]:
    policy = transcript.policy
    got = outcome_of(policy)
    problems = []
    for key in ("disposition", "party"):
        want = expect.get(key)
        if key in expect and got[key] != (None if want is None else str(want)):
            problems.append(f"{key}: {got[key]!r}, expected {expect[key]!r}")
    if "promise" in expect:
        want = None if expect["promise"] in (None, "none") else f"{float(expect['promise']):g}"
        if got["promise"] != want:
            problems.append(f"promise: {got['promise']!r}, expected {want!r}")
    if "verified" in expect and policy.verified != bool(expect["verified"]):
        problems.append(f"verified: {policy.verified}, expected {expect['verified']}")
    recorded = {e.detail.get("kind") for e in policy.events if e.kind == "signal"}
    for kind in expect.get("signals", []):
        if kind not in recorded:
            problems.append(f"signal {kind!r} not recorded")
    kinds = {e.kind for e in policy.events}
    for kind in expect.get("events", []):
        if kind not in kinds:
            problems.append(f"event {kind!r} not noted")
    for kind in expect.get("absent", []):
        if kind in kinds:
            problems.append(f"event {kind!r} noted, and must not be")
    agent = " ".join(text for who, text in transcript.lines if who == "agent")
    for words in expect.get("says", []):
        if words not in agent:
            problems.append(f"the agent never said {words!r}")
    return problems


@dataclass
class FamilyScore:
    """Scripts run, passed and failed in one family."""

    family: str
    run: int = 0
    passed: int = 0
    failures: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.run - self.passed


def score(outcomes: Sequence[Outcome]) -> list[FamilyScore]:
    """Outcomes by family, in corpus order."""
    families: dict[str, FamilyScore] = {}
    for outcome in outcomes:
        family = families.setdefault(outcome.script.family, FamilyScore(outcome.script.family))
        family.run += 1
        if outcome.passed:
            family.passed += 1
        else:
            family.failures.append(outcome)
    return list(families.values())
