"""agent.conversation.spoken_numbers: numbers and money as Whisper writes them, read the same
way for the caller's turns and the agent's sentences."""

from __future__ import annotations

import pytest

from agent.conversation.spoken_numbers import find_money, parse_number

# -- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("two hundred and fifty", 250),
        ("one thousand two hundred", 1200),
        ("a hundred", 100),
        ("a thousand", 1000),
        ("twenty-five", 25),
        ("twelve hundred", 1200),
        ("ninety nine thousand nine hundred ninety nine", 99999),
        ("one million two hundred thousand", 1_200_000),
        ("zero", 0),
        ("15", 15),
        ("1,200.50", 1200.5),
        ("fifteenth", 15),
    ],
)
def test_parse_number(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["", "hello", "two three", "one two three four", "a", "the 15"])
def test_parse_number_not_one_number(text: str) -> None:
    assert parse_number(text) is None


def test_find_money_in_agent_text() -> None:
    found = find_money("You have a balance of $1,200.50; you could pay $300 a month.")
    assert [(m.cents, m.marked, m.per) for m in found] == [
        (120050, True, None),
        (30000, True, "month"),
    ]
    assert "balance of" in found[0].lead
    assert find_money("Call me on the 5th at 3.") == []
