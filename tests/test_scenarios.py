"""Caller scripts: loading, checking, and every built-in one held at text level."""

import datetime as dt

import pytest

from agent.conversation.prompts import PromptSet
from agent.conversation.scenarios import (
    ScriptError,
    builtin_scenarios,
    converse,
    load_script,
    outcome_of,
)

TODAY = dt.date(2026, 12, 2)  # a Wednesday
PROMPTS = PromptSet.load("collections-v3")


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_ends_as_its_script_expects(name):
    scenario = builtin_scenarios()[name]
    transcript = converse(scenario, PROMPTS, TODAY)
    got = outcome_of(transcript.policy)
    for key, want in scenario.expect.items():
        assert got[key] == want, "\n".join(f"{who}: {text}" for who, text in transcript.lines)


def test_a_script_overrides_the_demo_account(tmp_path):
    script = tmp_path / "mine.yaml"
    script.write_text(
        "description: mine\n"
        "account: {balance: 99.5, statute_status: time_barred, state: ny}\n"
        "caller: [Hello]\n"
    )
    scenario = load_script(script)
    assert scenario.account.balance_cents == 9950
    assert scenario.account.time_barred and scenario.account.state == "NY"
    assert scenario.account.consumer_name == "Jordan Smith"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("caller: hello\n", "'caller' must be a list"),
        ("caller: []\n", "'caller' must be a list"),
        ("caller: [hi]\naccount: {balanse: 3}\n", "unknown field(s) balanse"),
        ("caller: [hi]\naccount: {statute_status: old}\n", "'within' or 'time_barred'"),
        ("caller: [hi]\naccount: {date_of_birth: yesterday}\n", "account"),
        ("caller: [hi]\nexpect: {mood: happy}\n", "'expect' may name only"),
        ("caller: [hi]\nextra: 1\n", "unknown key(s) extra"),
        ("caller: [hi\n", "not valid YAML"),
    ],
)
def test_a_bad_script_says_what_is_wrong(tmp_path, text, message):
    script = tmp_path / "bad.yaml"
    script.write_text(text)
    with pytest.raises(ScriptError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_script(script)


def test_a_missing_script_is_a_clear_error(tmp_path):
    with pytest.raises(ScriptError, match="cannot read it"):
        load_script(tmp_path / "nope.yaml")
