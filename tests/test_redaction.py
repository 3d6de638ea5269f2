"""agent.conversation.redaction: card numbers, expiry dates and security codes never get past
it (rule C11), and a turn that held them is heard as ``Intent.CARD_NUMBER``."""

from __future__ import annotations

import pytest

from agent.conversation.intents import Intent, Understanding, understand
from agent.conversation.redaction import (
    CARD_REMOVED,
    CODE_REMOVED,
    EXPIRY_REMOVED,
    redact_card_numbers,
)


def heard(text: str) -> Understanding:
    return understand(text)


def intents(text: str) -> frozenset[Intent]:
    return heard(text).intents


# -- C11: card data never gets past redaction ------------------------------------------

C11_CARD_NUMBERS = [
    "My card number is 4111 1111 1111 1111.",
    "4111111111111111",
    "it's 4111-1111-1111-1111",
    "four one one one one one one one one one one one one one one one",
    "Four one one one, one one one one, one one one one, one one one one.",
    "my visa is 4242 4242 4242 4242",
    "uh, 5555 5555 5555 4444",
    "the number is 3782 822463 10005",  # American Express, 15 digits
    "forty one eleven, eleven eleven, eleven eleven, eleven eleven",
    "card number 1234 5678 9012 3456",  # not Luhn-valid, but after a card word
]


@pytest.mark.parametrize("text", C11_CARD_NUMBERS)
def test_c11_card_numbers_are_removed(text: str) -> None:
    redacted, removed = redact_card_numbers(text)
    assert removed
    assert CARD_REMOVED in redacted
    assert sum(ch.isdigit() for ch in redacted) < 4
    got = heard(text)
    assert Intent.CARD_NUMBER in got.intents
    assert got.text == redacted
    assert got.amount_cents is None and got.last4 is None


def test_c11_expiry_and_security_code_are_removed() -> None:
    text = "My card is 4242 4242 4242 4242, expires 12/27, security code 123."
    redacted, removed = redact_card_numbers(text)
    assert removed
    assert redacted == (
        f"My card is {CARD_REMOVED}, expires {EXPIRY_REMOVED}, security code {CODE_REMOVED}."
    )
    assert redact_card_numbers("my visa is 4111-1111-1111-1111 exp 04/29 cvv 987")[0] == (
        f"my visa is {CARD_REMOVED} exp {EXPIRY_REMOVED} cvv {CODE_REMOVED}"
    )


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("The CVV is four five six.", f"The CVV is {CODE_REMOVED}."),
        ("the security code is 1234", f"the security code is {CODE_REMOVED}"),
        ("it expires December 2027", f"it expires {EXPIRY_REMOVED}"),
        ("expiration date is oh four twenty six", f"expiration date is {EXPIRY_REMOVED}"),
        ("exp. 04/2029", f"exp. {EXPIRY_REMOVED}"),
    ],
)
def test_c11_cued_card_data_is_removed(text: str, redacted: str) -> None:
    assert redact_card_numbers(text) == (redacted, True)
    assert Intent.CARD_NUMBER in intents(text)


@pytest.mark.parametrize(
    "text",
    [
        "the card ending in 4242",
        "call me at 555 123 4567",
        "my account number is 1234567890123",  # 13 digits, not Luhn-valid, no card word
        "I can pay $1,200.50 on 12/20.",
        "I was born 3/5/1980.",
        "I'll pay by card.",
        "",
    ],
)
def test_c11_no_card_data_nothing_removed(text: str) -> None:
    assert redact_card_numbers(text) == (text, False)
    assert Intent.CARD_NUMBER not in intents(text)


def test_c11_marker_from_an_earlier_redaction_still_counts() -> None:
    assert Intent.CARD_NUMBER in intents(f"my card is {CARD_REMOVED}")
