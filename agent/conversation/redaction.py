"""Card data out of a transcript (rule C11): card numbers, expiry dates, security codes.

Its own module because it is the one rule every path applies before anything else: the
caller's turn (``intents.understand``), the STT stream, the dialogue, the store and the
logs all call ``redact_card_numbers``, and the card guard uses its markers, so none of them
needs the intent rules to keep card data out.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agent.conversation.spoken_numbers import DIGIT_RUN, DIGIT_RUN_RE, digit_groups

CARD_REMOVED = "[card number removed]"
EXPIRY_REMOVED = "[expiry removed]"
CODE_REMOVED = "[security code removed]"


_CARD_CUE_RE = re.compile(
    r"\b(?:card|visa|master ?card|amex|american express|discover|credit|debit)\b", re.I
)
_MONTH_NAMES = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|apr|jun|jul|aug|sept|sep|oct|nov|dec"
)
_EXPIRY_RE = re.compile(
    r"\b(?:expir\w*|exp|valid (?:thru|through|until)|good (?:thru|through))\b"
    r"(?:[\s,:.]+(?:date|is|on|in|it|the|card|of|at|uh|um|would be)\b)*[\s,:.]*"
    rf"(?P<value>\d{{1,2}}\s*[/\-]\s*\d{{2,4}}|(?:{_MONTH_NAMES})\s+(?:of\s+)?{DIGIT_RUN}"
    rf"|{DIGIT_RUN})",
    re.I,
)
_CODE_RE = re.compile(
    r"\b(?:security code|c\.?\s?v\.?\s?v\.?\s?2?|c\.?\s?v\.?\s?c\.?\s?2?|cv2|csc"
    r"|card verification(?: value| code| number)?|(?:three|four|3|4)[\s-]digit code"
    r"|code on the back|digits on the back)"
    r"(?:[\s,:.]+(?:number|is|are|it|the|code|uh|um|would be)\b)*[\s,:.]*"
    rf"(?P<value>{DIGIT_RUN})",
    re.I,
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _looks_like_card(groups: list[str]) -> bool:
    """Some stretch of whole groups is 13-19 digits that pass the Luhn check."""
    for start in range(len(groups)):
        acc = ""
        for g in groups[start:]:
            acc += g
            if len(acc) > 19:
                break
            if len(acc) >= 13 and _luhn(acc):
                return True
    return False


def _remove_cards(text: str) -> tuple[str, bool]:
    removed = False

    def replace(m: re.Match[str]) -> str:
        nonlocal removed
        groups = digit_groups(m.group(0))
        count = sum(len(g) for g in groups)
        if count < 13:
            return m.group(0)
        cued = _CARD_CUE_RE.search(text, max(0, m.start() - 60), m.start()) is not None
        if cued or _looks_like_card(groups):
            removed = True
            return CARD_REMOVED
        return m.group(0)

    return DIGIT_RUN_RE.sub(replace, text), removed


def _remove_cued(
    text: str, pattern: re.Pattern[str], marker: str, accept: Callable[[str], bool]
) -> tuple[str, bool]:
    removed = False

    def replace(m: re.Match[str]) -> str:
        nonlocal removed
        if not accept(m.group("value")):
            return m.group(0)
        removed = True
        start = m.start("value") - m.start()
        return m.group(0)[:start] + marker

    return pattern.sub(replace, text), removed


def _expiry_like(value: str) -> bool:
    if re.search(_MONTH_NAMES, value, re.I) or "/" in value or "-" in value:
        return True
    return 3 <= sum(len(g) for g in digit_groups(value)) <= 6


def _code_like(value: str) -> bool:
    return 3 <= sum(len(g) for g in digit_groups(value)) <= 4


def redact_card_numbers(text: str) -> tuple[str, bool]:
    """``text`` with card numbers, expiry dates and security codes replaced by markers.

    A card number is a run of 13-19 digits (written or spoken, in groups) that
    passes the Luhn check, or any run of 13 or more digits after a card word.
    An expiry is what follows "expires"/"expiration"; a security code, the
    3-4 digits after "security code"/"CVV". Returns whether anything was removed.
    """
    if not text:
        return text, False
    text, card = _remove_cards(text)
    text, expiry = _remove_cued(text, _EXPIRY_RE, EXPIRY_REMOVED, _expiry_like)
    text, code = _remove_cued(text, _CODE_RE, CODE_REMOVED, _code_like)
    return text, card or expiry or code
