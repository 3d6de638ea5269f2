"""Understanding a caller's turn: what they asked for, and the facts they gave.

Rules, not a model. The input is Whisper's text of one caller turn: mixed case,
punctuation, numbers as digits or as words. The output is an ``Understanding``:
the caller's intents (a dispute, "stop calling", a lawyer, a payment offer...)
and the facts the policy needs (an amount, a date, a name, a date of birth, the
last four digits, a payment method). The policy acts on these, never on the
LLM's reading of the call, so a compliance signal (rule C8, C12) cannot be
missed because a model phrased it differently.

Card data never gets past this module (rule C11): ``redact_card_numbers``
removes card numbers, expiry dates and security codes from a transcript, and
``understand`` reads only the redacted text, which it hands back in
``Understanding.text`` for the LLM, the store and the logs.

Numbers, read the same way everywhere (``parse_number``, ``find_money``):

- Words follow the usual grammar: "two hundred and fifty" = 250, "twelve
  hundred" = 1,200, "a thousand" = 1,000, "twenty-five" = 25; digits may carry
  separators and cents ("$1,200.50"), an ordinal suffix ("15th") or "k" ("2k").
- An amount is money when it is marked ("$200", "200 dollars", "fifty bucks",
  "two grand", "fifty cents") or said where a payment is being offered ("I can
  pay 200", "how about 150", "100 a month"), or whenever the agent just asked
  for an amount (``Expectation.AMOUNT``).
- Two spoken numbers back to back, the first 1-99 and the second a two-digit
  10-99, are read the way Americans say rent and car payments: the first is
  hundreds. "two fifty" is $250, "twelve fifty" is $1,250, "nineteen ninety
  nine" is $1,999. Balances and offers in collections are tens to thousands of
  dollars, so this reading is right far more often than the price-tag one
  ($12.50); cents are heard when they are said: "twelve dollars fifty", "twelve
  fifty cents", "$12.50". The agent reads every amount back before a promise is
  recorded, which catches the rare caller who meant otherwise.
- Three or more spoken numbers back to back ("one two three four") are digits,
  never an amount.

Dates are resolved against ``today`` (the consumer's local date):

- "today", "tomorrow", "the day after tomorrow", "in three days", "in two
  weeks", "a week from today", "the end of the month".
- A weekday alone or with "this"/"on" is the next such day after today ("this
  Friday" said on a Friday is today). "next Friday" is the Friday of next
  calendar week (weeks start on Monday).
- "the fifteenth", "on the 15th": that day this month, or next month when it
  has passed (a month without that day is skipped).
- "December 20th", "the 20th of December", "12/20": the next such date; with a
  year ("March 5th 1980", "3/5/1980", "the fifth of March nineteen eighty") the
  date itself. Numeric dates are month first (US), unless the first part
  cannot be a month.
- A date with a year is a date of birth when the agent asked for one, when the
  caller says "born"/"birth", or when the year is ten or more years back.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

# -- what the caller may mean --------------------------------------------------------


class Intent(StrEnum):
    """What a caller's turn asks for or tells us; several may hold at once."""

    YES = "yes"
    NO = "no"
    DISPUTE = "dispute"
    STOP_CALLING = "stop_calling"
    CEASE = "cease"
    ATTORNEY = "attorney"
    BANKRUPTCY = "bankruptcy"
    DECEASED = "deceased"
    HARDSHIP = "hardship"
    WRONG_NUMBER = "wrong_number"
    ROBOT_QUESTION = "robot_question"
    HUMAN_REQUEST = "human_request"
    CALLBACK = "callback"
    PAY_IN_FULL = "pay_in_full"
    PAYMENT_OFFER = "payment_offer"
    THIRD_PARTY = "third_party"
    RECORDING_OBJECTION = "recording_objection"
    ARREST_OR_SUIT_QUESTION = "arrest_or_suit_question"
    CARD_NUMBER = "card_number"
    REFUSAL = "refusal"
    WHO_IS_CALLING = "who_is_calling"
    WHAT_ABOUT = "what_about"
    AT_WORK = "at_work"
    WORKPLACE_FORBIDS_CALLS = "workplace_forbids_calls"


class Expectation(StrEnum):
    """The question the agent just asked, so a short answer can be read against it."""

    IDENTITY = "identity"  # "Am I speaking with Jordan Smith?"
    NAME = "name"  # "Who am I speaking with?"
    CONFIRM = "confirm"  # any yes/no question: "Does Friday work?"
    DATE_OF_BIRTH = "date_of_birth"
    LAST4 = "last4"
    AMOUNT = "amount"  # "How much can you pay?"
    DATE = "date"  # "On what date?", "When should we call back?"
    METHOD = "method"
    RECORDING_CONSENT = "recording_consent"  # "Is it all right that this call is recorded?"
    EXPLICIT_YES = "explicit_yes"  # a read-back: only a clear "yes" confirms, never "okay"
    ONE_OR_MONTHLY = "one_or_monthly"  # "one payment of $100, or $100 a month?"
    MONTHLY_AMOUNT = "monthly_amount"  # "How much could you pay each month?"


class PaymentMethod(StrEnum):
    """How the consumer says they will pay, as the agent can read it back."""

    DEBIT_CARD = "debit card"
    CREDIT_CARD = "credit card"
    CARD = "card"
    BANK_TRANSFER = "bank transfer"  # ACH
    CHECK = "check"
    MONEY_ORDER = "money order"


@dataclass(frozen=True)
class Understanding:
    """One caller turn, read.

    ``amount_cents`` is the amount the caller offered or named; ``monthly`` says it
    is a monthly amount ("100 a month"), ``per`` the period of any recurring one
    ("month", "week", "two weeks"); ``voicemail`` says the line is an answering
    machine's greeting, not a person (rule C10); ``discount_pct`` is a discount the
    caller asked for ("can you take 40 percent off", "settle for half": 50).
    ``text`` is the transcript with card data removed: the only form of it that
    may reach the LLM, the store or a log.
    """

    intents: frozenset[Intent] = frozenset()
    amount_cents: int | None = None
    date: dt.date | None = None
    name: str | None = None
    date_of_birth: dt.date | None = None
    last4: str | None = None
    method: str | None = None
    discount_pct: float | None = None
    monthly: bool = False
    per: str | None = None
    voicemail: bool = False
    text: str = ""
    #: The speaker talks of the consumer, or of themselves as someone else (C3): "she",
    #: "her husband", "I handle his bills". Before verification this makes a third party.
    third_person: bool = False
    #: A dispute of part of the debt only ("the rest is fees I never agreed to").
    partial_dispute: bool = False
    #: The amount is said to be paid once ("just once", "one payment", "lump sum").
    once: bool = False
    #: A number of payments or months named ("in three payments", "over six months").
    installments: int | None = None
    #: Several different amounts, or a range: which one is meant must be asked.
    amounts_ambiguous: bool = False
    #: A clock time named ("after six", "at 7 pm") and how: "after", "before" or "at".
    time: dt.time | None = None
    time_relation: str | None = None
    #: A phone number said (digits only), and a lawyer's name, for the attorney signal.
    phone_number: str | None = None
    attorney_name: str | None = None
    #: Part of a date of birth was given (a month and year, a day without a year).
    partial_date: bool = False


# -- card data (rule C11) ----------------------------------------------------------

CARD_REMOVED = "[card number removed]"
EXPIRY_REMOVED = "[expiry removed]"
CODE_REMOVED = "[security code removed]"

_UNITS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine".split())}
_TEENS = {
    w: i + 10
    for i, w in enumerate(
        "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
    )
}
_TENS = {
    w: (i + 2) * 10
    for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())
}
_ORD_UNITS = {
    w: i + 1
    for i, w in enumerate("first second third fourth fifth sixth seventh eighth ninth".split())
}
_ORD_TEENS = {
    w: i + 10
    for i, w in enumerate(
        "tenth eleventh twelfth thirteenth fourteenth fifteenth sixteenth seventeenth "
        "eighteenth nineteenth".split()
    )
}
_ORD_TENS = {
    w: (i + 2) * 10
    for i, w in enumerate(
        "twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split()
    )
}
_SCALES = {"thousand": 1_000, "million": 1_000_000}
#: The number words by value, for the output guard, which reads the agent's side.
UNIT_WORDS = {**_UNITS, **_TEENS}  # zero .. nineteen
TENS_WORDS = dict(_TENS)  # twenty .. ninety
ORDINAL_WORDS = {**_ORD_UNITS, **_ORD_TEENS, **_ORD_TENS}  # first .. ninetieth

# A run of spoken number words, for regexes elsewhere (the output guard's terms).
NUMBER_PATTERN = (
    r"\b(?:an?\s+(?=hundred|thousand))?(?:(?:and\s+)?(?:hundred|thousand|"
    + "|".join([*_UNITS, *_TEENS, *_TENS])
    + r")\b[\s-]*)+"
)

_DIGIT_WORDS = "oh|double|triple|" + "|".join([*_UNITS, *_TEENS, *_TENS])
DIGIT_ITEM = rf"(?:\d+|(?:{_DIGIT_WORDS})\b)"
# Digits read out one group after another: "4111 1111 ...", "four one one one,
# one one ...", "4111-1111-...", with the odd "uh" between groups.
_DIGIT_RUN = rf"{DIGIT_ITEM}(?:[\s,.\-/]+(?:(?:uh|um|and)[\s,.\-]+)?{DIGIT_ITEM})*"
_DIGIT_RUN_RE = re.compile(rf"(?<![\w$]){_DIGIT_RUN}", re.I)
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
    rf"(?P<value>\d{{1,2}}\s*[/\-]\s*\d{{2,4}}|(?:{_MONTH_NAMES})\s+(?:of\s+)?{_DIGIT_RUN}"
    rf"|{_DIGIT_RUN})",
    re.I,
)
_CODE_RE = re.compile(
    r"\b(?:security code|c\.?\s?v\.?\s?v\.?\s?2?|c\.?\s?v\.?\s?c\.?\s?2?|cv2|csc"
    r"|card verification(?: value| code| number)?|(?:three|four|3|4)[\s-]digit code"
    r"|code on the back|digits on the back)"
    r"(?:[\s,:.]+(?:number|is|are|it|the|code|uh|um|would be)\b)*[\s,:.]*"
    rf"(?P<value>{_DIGIT_RUN})",
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


def digit_groups(text: str) -> list[str]:
    """The digits of a read-out run, one string per group: "forty one, 11" -> ["41", "11"]."""
    groups: list[str] = []
    repeat = 1
    words = re.findall(r"\d+|[a-z]+", text.lower())
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w.isdigit():
            groups.append(w * repeat)
        elif w in ("double", "triple"):
            repeat = 2 if w == "double" else 3
            continue
        elif w in ("oh", "zero"):
            groups.append("0" * repeat)
        elif w in _UNITS:
            groups.append(str(_UNITS[w]) * repeat)
        elif w in _TEENS:
            groups.append(str(_TEENS[w]))
        elif w in _TENS:
            if i < len(words) and words[i] in _UNITS and words[i] != "zero":
                groups.append(str(_TENS[w] + _UNITS[words[i]]))
                i += 1
            else:
                groups.append(str(_TENS[w]))
        else:
            continue  # "uh", "and"
        repeat = 1
    return groups


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

    return _DIGIT_RUN_RE.sub(replace, text), removed


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


# -- normalising the text --------------------------------------------------------------

_APOSTROPHE_WORD_RE = re.compile(r"\b[a-z]+'[a-z]+\b")
_SPECIAL_CONTRACTIONS = {
    "won't": "will not",
    "can't": "can not",
    "ain't": "is not",
    "shan't": "shall not",
    "let's": "let us",
}
_IS_SUBJECTS = {"he", "she", "it", "that", "there", "what", "who", "where", "here", "how"}
_BARE_CONTRACTIONS = {
    **{
        f"{w}nt": f"{w} not"
        for w in "do does did is was are were have has could would should".split()
    },
    "cant": "can not",
    "cannot": "can not",
    "wont": "will not",
    "im": "i am",
    "youre": "you are",
    "thats": "that is",
    "gonna": "going to",
    "wanna": "want to",
    "gotta": "got to",
    "mhm": "mm hmm",
}
_BARE_RE = re.compile(r"\b(?:" + "|".join(_BARE_CONTRACTIONS) + r")\b")
_ACRONYM_RE = re.compile(r"\b(?:[a-z]\.){2,}")
_WORD_HYPHEN_RE = re.compile(r"(?<=[a-z0-9])-(?=[a-z])")
_SPACES_RE = re.compile(r"\s+")


def _expand(m: re.Match[str]) -> str:
    word = m.group(0)
    if word in _SPECIAL_CONTRACTIONS:
        return _SPECIAL_CONTRACTIONS[word]
    stem, _, tail = word.partition("'")
    if tail == "t" and stem.endswith("n"):
        return stem[:-1] + " not"
    if tail == "s":
        return f"{stem} is" if stem in _IS_SUBJECTS else word
    return stem + {"m": " am", "re": " are", "ll": " will", "ve": " have", "d": " would"}.get(
        tail, "'" + tail
    )


def _normalize(text: str) -> str:
    """Lowercase, contractions spelled out ("don't" -> "do not"), acronyms closed up."""
    s = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    s = s.replace("\u2014", ", ").replace("\u2013", ", ").replace("\u2026", ". ")
    s = _ACRONYM_RE.sub(lambda m: m.group(0).replace(".", "") + " ", s)
    s = _APOSTROPHE_WORD_RE.sub(_expand, s)
    s = _BARE_RE.sub(lambda m: _BARE_CONTRACTIONS[m.group(0)], s)
    s = _WORD_HYPHEN_RE.sub(" ", s)
    return _SPACES_RE.sub(" ", s).strip()


# Clauses: negation does not reach across them ("I can't pay, so stop calling").
_CLAUSE_SPLIT_RE = re.compile(
    r"[.,!?;:]+(?:\s|$)|\s-\s|\b(?:but|however|although|though|except|so(?=\s+\w))\b"
)
_NEGATORS = {"not", "never", "neither", "nor", "hardly"}
_SCOPE_BREAKS = {"and", "or", "then", "please"}
_PRONOUNS = {"i", "he", "she", "they", "we", "you", "it", "this", "that", "my", "his", "her"}
_NEGATION_WINDOW = 6


def _negated(clause: str, start: int) -> bool:
    """Whether a negation governs the phrase at ``start`` ("I don't dispute it")."""
    following = clause[start:].split()[:1]
    return _negated_words(clause[:start].split(), following[0] if following else None)


def _negated_words(before: list[str], following: str | None) -> bool:
    words = before[-_NEGATION_WINDOW:]
    for i in range(len(words) - 1, -1, -1):
        w = words[i]
        if w in _SCOPE_BREAKS:
            return False
        if w in _NEGATORS:
            return True
        if w == "no" and i == len(words) - 1:
            # "no dispute" negates; "no, I'm his wife" / "no I have a lawyer" answers.
            return following is None or following not in _PRONOUNS
    return False


# -- intents -------------------------------------------------------------------------

_REL = (
    r"(?:wife|husband|spouse|partner|mother|mom|mum|father|dad|son|daughter|brother|sister"
    r"|roommate|room mate|girlfriend|boyfriend|fiance|fiancee|friend|aunt|uncle|grandmother"
    r"|grandma|grandfather|grandpa|niece|nephew|cousin|caretaker|caregiver|neighbor"
    r"|neighbour|landlord|landlady|assistant|coworker|boss|child|kid|stepson|stepdaughter"
    r"|stepmother|stepfather|mother in law|father in law|sister in law|brother in law)"
)
_PERSON = (
    r"(?:person|human|agent|representative|rep|supervisor|manager|operator|someone|somebody"
    r"|anybody|anyone|people|human being|live person|real person|customer service)"
)
_ROBOT = (
    r"(?:robot|bot|computer|machine|recording|ai|artificial intelligence|automated\w*|real"
    r"|human|real person|live person|person|actual person|recorded message)"
)
_FILLERS = r"(?:(?:uh|um|oh|ah|well|hmm|er|okay so|so)\s+)*"
_NUMBER_WORD = "|".join([*_UNITS, *_TEENS, *_TENS, "a hundred", "a thousand"])


@dataclass(frozen=True)
class _Rule:
    intent: Intent
    pattern: re.Pattern[str]
    negatable: bool = True


def _rules(intent: Intent, *patterns: str, negatable: bool = True) -> list[_Rule]:
    return [_Rule(intent, re.compile("|".join(f"(?:{p})" for p in patterns)), negatable)]


_INTENT_RULES: list[_Rule] = [
    *_rules(
        Intent.DISPUTE,
        r"\bdisput\w*",
        r"\b(?:do|does|did) not (?:really )?owe\b",
        r"\bowe (?:you |them |anybody |anyone )?nothing\b",
        r"\b(?:this|that|it) is not (?:mine|my (?:debt|account|bill|card|loan|signature))\b",
        r"\bnot (?:my|our) (?:debt|account|bill|loan|card)\b",
        r"\bnever (?:had|opened|signed up for|took out|applied for|used)"
        r" (?:an?|that|this|the|any)\b",
        r"\b(?:already|previously) (?:paid|settled|took care of)\b",
        r"\b(?:paid|settled) (?:it|this|that) (?:off|already)\b",
        r"\bidentity (?:theft|was stolen|stolen)\b|\bstole my identity\b|\bfraud\w*\b",
        r"\b(?:do|did) not recogni[sz]e\b",
        r"\b(?:amount|balance|that|this|it) is (?:wrong|incorrect|not right|too high|a mistake)\b",
        r"\b(?:wrong|incorrect) (?:amount|balance)\b",
        r"\bprove (?:it|that|this|i owe)\b|\b(?:proof|validation|verification) (?:of|that)\b",
        r"\bvalidat\w* (?:the|this|that) (?:debt|account)\b",
        r"\bsend me (?:proof|something in writing|a validation|the paperwork|documentation)\b",
        r"\bnot responsible for (?:this|that|it|the)\b",
        r"\bonly owe\b|\bnever agreed to\b|\b(?:did|do) not agree to (?:th\w+ )?(?:fees|charges)\b",
        r"\b(?:part|some|most|half) of (?:it|this|that|the (?:balance|amount|debt)) (?:is|are) "
        r"(?:not mine|wrong|fees|made up|bogus|interest)\b",
        r"\b(?:fees|charges|interest) (?:that )?(?:i|we) (?:never|did not)\b",
        r"\b(?:bogus|illegal|unauthori[sz]ed|junk) (?:fees|charges)\b",
    ),
    *_rules(
        Intent.STOP_CALLING,
        r"\b(?:stop|quit|cease)"
        r" (?:calling|phoning|ringing|contacting|harassing|bothering|texting)\b",
        r"\b(?:do not|never|no more) (?:ever )?(?:call|contact|phone|ring|text)(?:ing)? "
        r"(?:me|us|here|this number|my (?:phone|number|cell)|again|anymore|back)\b"
        r"(?! (?:at|before|after|during|on|in the|when|while|until|between|around|till)\b)",
        r"\bno more (?:phone )?calls\b",
        r"\b(?:take|remove|delete|put) (?:me|my number|this number|my name|us)(?: off| from| on)? "
        r"(?:of )?(?:your|the|this) (?:\w+ )?(?:list|system|records)\b",
        r"\bdo not call list\b|\blose (?:my|this) number\b",
        r"\bleave (?:me|us) (?:the (?:hell|heck|fuck) )?alone\b",
        r"\bi do not want (?:any more |anymore |more |these |your |any )?(?:phone )?calls\b",
        r"\bi do not want you (?:to )?(?:call|contact)(?:ing)? (?:me|here|this number)\b",
    ),
    *_rules(
        Intent.CEASE,
        r"\bcease and desist\b|\bcease (?:all )?(?:communication|contact|correspondence)s?\b",
        r"\b(?:do not|never|stop|no more) (?:contact\w*|communicat\w*)(?: with)? (?:me |us )?"
        r"(?:at all|in any way|ever again|by any (?:means|method)|whatsoever|period)\b",
        r"\bstop all (?:contact|communication|correspondence)s?\b",
        r"\ball (?:contact|communication|correspondence)s? (?:to )?stop\b",
        r"\bno (?:more )?(?:contact|communication)s? (?:at all|of any kind|whatsoever)\b",
        r"\b(?:do not|never) (?:write|mail|email|send) (?:me|to me|anything)\b",
        r"\b(?:letter|in writing|written (?:request|notice))\b.*\b(?:stop|cease)\b",
        r"\b(?:stop|cease)\b.*\b(?:letter|in writing|written (?:request|notice))\b",
    ),
    *_rules(
        Intent.ATTORNEY,
        r"\bmy (?:\w+ )?(?:lawyer|attorney|counsel|legal representative|legal aid)s?\b",
        r"\bi (?:have |had |just |already |recently )*"
        r"(?:have|got|gotten|hired|retained|am working with) (?:an? |my )?(?:\w+ )?"
        r"(?:lawyer|attorney|counsel|legal representation)\b",
        r"\b(?:i am|we are) represented\b|\brepresented by\b",
        r"\b(?:lawyer|attorney) is (?:handling|dealing with|taking care of)\b",
    ),
    *_rules(
        Intent.BANKRUPTCY,
        r"\bbankrupt\w*",
        r"\bchapter (?:7|13|11|seven|thirteen|eleven)\b",
        r"\b(?:it|debt|this|that) (?:was|got|has been) discharged\b",
    ),
    *_rules(
        Intent.DECEASED,
        r"\bpassed (?:away|on)\b",
        r"\b(?:he|she|they|who|husband|wife|mother|father|son|daughter|brother|sister|mom|dad)"
        r" (?:has |had |recently |just )?(?:passed|died)\b",
        r"\b(?:is|are|was) (?:dead|deceased)\b|\bdeceased\b|\bdied\b",
        r"\b(?:his|her|their) (?:death|passing|funeral|estate)\b",
        r"\bno longer (?:living|alive|with us)\b",
    ),
    *_rules(
        Intent.HARDSHIP,
        r"\blost (?:my|his|her|our) (?:job|work|income|house|home)\b|\blaid off\b|\bgot fired\b",
        r"\bout of (?:work|a job)\b|\bunemploy\w*|\bbetween jobs\b",
        r"\b(?:can not|could not|unable to|not able to) (?:afford|pay|make (?:the )?payments?)\b"
        r"(?! (?:\w+ ){0,2}(?:in full|full|whole|entire|all of|that much|everything|the total))"
        rf"(?! (?:\$|\d|that|this much|so much|more|{_NUMBER_WORD}))",
        r"\b(?:do not|does not) have (?:the |any |enough )?(?:money|income|funds|cash)\b",
        r"\bno (?:money|income|job)\b",
        r"\bmedical (?:bills|expenses|debt|issues|problems|condition)\b",
        r"\b(?:in|out of) the hospital\b|\bcancer\b|\bchemo\w*|\bsurgery\b|\billness\b",
        r"\bon (?:disability|unemployment|welfare|food stamps|social security|a fixed income)\b",
        r"\bfixed income\b|\bhardship\b|\bstruggling\b|\b(?:hard|tough|difficult) times?\b",
        r"\bi am (?:flat |totally |completely )?broke\b|\bi am (?:sick|ill)\b(?! of)",
        r"\bbehind on (?:my |the )?(?:bills|rent|mortgage)\b|\bevict\w*|\bdivorce\w*",
    ),
    *_rules(
        Intent.WRONG_NUMBER,
        r"\bwrong (?:number|person|guy|lady|house|phone|name)\b",
        r"\bno ?(?:one|body) (?:here )?(?:by|with|named|called|goes by) (?:that|this|the) name\b",
        r"\bno ?(?:one|body) (?:here |lives here )?(?:named|called|by that name)\b",
        r"\bnever heard of (?:him|her|them|that (?:person|name)|this (?:person|name))\b",
        r"\b(?:do not|never) know (?:anyone|anybody|who that is|who this is|a|that person|"
        r"this person|who you are talking about)\b",
        r"\b(?:does|do) not live here\b|\bno longer (?:lives|living) here\b",
        r"\bnot (?:his|her|their) (?:number|phone)\b",
        r"\b(?:he|she|they) (?:does|do) not have this number\b",
        negatable=False,
    ),
    *_rules(
        Intent.ROBOT_QUESTION,
        rf"\b(?:am i|are we) (?:talking|speaking) (?:to|with) (?:an? )?{_ROBOT}\b",
        rf"\bare you (?:an? |even )?(?:actual |real )?{_ROBOT}\b",
        rf"\bis this (?:an? )?(?:actual |real )?{_ROBOT}\b",
        r"\b(?:you are|you sound like|this is) (?:not )?(?:an? )?"
        r"(?:robot|bot|computer|machine|ai)\b",
        r"\b(?:is|are) (?:this|you) (?:a )?(?:real|human|live)\b|\bare you real\b",
        r"\bis (?:this|that) (?:a )?(?:recording|recorded)\b",
        negatable=False,
    ),
    *_rules(
        Intent.HUMAN_REQUEST,
        r"\b(?:talk|speak|chat) (?:to|with) (?:an? |the |your |some |one of your )?"
        rf"(?:real |live |actual |human )?{_PERSON}\b",
        r"\b(?:get|give|put|transfer|connect|pass) me (?:to |with |through to )?"
        rf"(?:an? |the |your )?(?:real |live |actual )?{_PERSON}\b",
        r"\btransfer me\b",
        r"\b(?:want|need|like) (?:an? |to have an? )?(?:real |live |actual )?"
        r"(?:person|human|agent|representative|supervisor|manager|operator)\b",
        rf"^{_FILLERS}(?:an? )?(?:representative|operator|agent|human|real person|live person"
        r"|supervisor|manager)(?: please)?$",
    ),
    *_rules(
        Intent.CALLBACK,
        r"\bcall (?:me |us )?(?:back|again|later|another time|tomorrow|tonight|next week"
        r"|in the (?:morning|afternoon|evening))\b",
        r"\bcall (?:me|us) (?:on|after|around|this|next|in|at) (?!work\b)",
        r"\b(?:not a good|bad|inconvenient|busy) time\b",
        r"^(?:i am|i am actually) (?:busy|driving|at work|in a meeting|working|on the road|"
        r"in the middle of)",
        r"\b(?:try|reach) (?:me )?(?:again )?(?:later|tomorrow|another time)\b",
        r"\b(?:i will|let me|can i|could i|i can|i could) call (?:you )?back\b",
        r"\b(?:can|could) we (?:talk|do this) (?:later|another time|tomorrow)\b",
    ),
    *_rules(
        Intent.PAY_IN_FULL,
        r"\b(?:pay|settle|clear) (?:\w+ ){0,4}in full\b",
        r"\bpay (?:\w+ ){0,3}(?:the )?(?:full|whole|entire|total)"
        r" (?:amount|balance|thing|debt|bill)\b",
        r"\bpay (?:\w+ ){0,3}(?:all of it|everything|it all|the balance|the whole thing)\b",
        r"\bpay (?:it|this|that|the whole thing|everything|all of it) off\b",
        r"\bpay off (?:the|my|this|that) (?:whole |entire |full )?"
        r"(?:balance|debt|amount|bill|account|thing)\b",
        r"\b(?:all|everything|all of it) (?:at once|in one (?:go|payment|shot))\b",
    ),
    *_rules(
        Intent.PAYMENT_OFFER,
        r"\bi (?:can|could|will|would|might|am able to|am going to|want to|would like to|"
        r"would be able to|should be able to|can probably|could probably|will probably) "
        r"(?:pay|afford|manage|put down|make (?:a |the )?payments?|set up (?:a )?(?:payment|plan)"
        r"|start paying|(?:send|give) (?:you )?(?:a |the |some )?(?:payment|money|check|something"
        rf"|\$|\d|{_NUMBER_WORD})|do (?:\$|\d|about|around|maybe|{_NUMBER_WORD}))\b",
        rf"\b(?:how|what) about (?:\$|\d|{_NUMBER_WORD})",
        r"\bpayment plan\b|\binstal{1,2}ments?\b|\bper month\b",
        r"\blet me pay\b|\b(?:can|could|may) i (?:pay|make (?:a )?payments?|set up)\b",
        r"\bi want to (?:pay|make a payment|settle)\b|\bsettle (?:for|it)\b",
        r"\b(?:i will|i would like to|i want to) (?:take care of|settle) (?:it|this|that)\b",
    ),
    *_rules(
        Intent.THIRD_PARTY,
        rf"\b(?:this is|i am|it is|speaking is|you have|you got) (?:the|a|an|his|her|their"
        rf"|[a-z]+'s) {_REL}\b",
        r"\bi (?:handle|manage|take care of|pay|look after|deal with|help with|do)"
        r" (?:his|her|their|all (?:his|her|their)) (?:bills|finances|affairs|mail|accounts|money"
        r"|paperwork|calls)\b",
        r"\bon (?:his|her|their) behalf\b|\bon behalf of\b|\bpower of attorney\b",
        r"\b(?:calling|answering|speaking) for (?:him|her|them)\b",
        r"\bfor (?:him|her) (?:today|now)\b",
        r"\bi am not (?:him|her|the one|that person)\b",
        r"\b(?:he|she|they) (?:is|are) (?:just |actually |currently |still |not )?"
        r"(?:not (?:here|home|in|available|around)|out|away|"
        r"at work|at school|sleeping|asleep|busy|unavailable|in the shower|working|"
        r"out of town|on vacation|at the store)\b",
        r"\b(?:can|may) i take a message\b|\bi can take a message\b",
        r"\b(?:he|she|they) (?:will|should) be (?:back|home)\b",
        r"\bi will (?:tell|let) (?:him|her|them)\b|\bi will give (?:him|her|them) the message\b",
    ),
    *_rules(
        Intent.RECORDING_OBJECTION,
        r"\b(?:do not|stop|quit|no|please do not) (?:record|recording|transcrib)\w*",
        r"\b(?:do not|not) (?:consent|agree|want|like)\w* (?:to )?"
        r"(?:be |being |this |it |the call |this call |this conversation )?(?:being |to be )?"
        r"(?:recorded|record|recording|transcribed|transcription|transcribing)\b",
        r"\b(?:turn|switch|shut) off (?:the )?(?:recording|recorder|transcri\w*)\b",
        r"\bobject to (?:the |being |this |this being )?(?:record|transcri)\w*",
        r"\b(?:without|do not give you|not give you) (?:my )?(?:consent|permission)\b",
    ),
    *_rules(
        Intent.ARREST_OR_SUIT_QUESTION,
        r"\barrest\w*|\bjail\b|\bprison\b|\bpolice\b|\bwarrant\b|\block(?:ed)? (?:me )?up\b",
        r"\bcriminal\b|\bprosecut\w*|\blawsuit\b|\blegal action\b|\bcourt\b|\bgarnish\w*",
        r"(?<!this is )(?<!it is )(?<!i am )(?<!name is )\bsue\b|\bsued\b|\bsuing\b",
        r"\bseize\w*|\brepossess\w*|\btake my (?:house|car|wages|paycheck|home)\b",
        negatable=False,
    ),
    *_rules(
        Intent.REFUSAL,
        r"\bi (?:am not|will not|refuse to|am never|will never|do not want to|am not going to"
        r"|have no intention of|do not intend to) (?:going to )?(?:pay|paying|give you)\b",
        r"\bnot (?:paying|going to pay)(?: (?:you|that|this|it|anything|a (?:dime|cent|penny)))?\b",
        r"\bi refuse\b|\bforget it\b|\bno way (?:i am|am i|i will)\b|\bnot a (?:dime|cent|penny)\b",
        r"\bnot (?:getting|seeing|paying|giving you) (?:a|one) (?:single )?(?:dime|cent|penny)\b",
        r"\bi (?:said|told you) no\b",
        r"\bi do not want to (?:pay|make (?:a|any) payments?|settle)\b",
        negatable=False,
    ),
    *_rules(
        Intent.WHO_IS_CALLING,
        r"\bwho (?:is|are) (?:this|you|calling|it|speaking)\b|\bwho am i (?:talking|speaking) to\b",
        r"\b(?:what|which) (?:company|business|firm|organi[sz]ation)\b",
        r"\bwhere (?:are you|is this) (?:calling )?from\b|\bwho do you (?:work for|represent)\b",
        r"\bwho is on the (?:line|phone)\b|\bwhat is your name\b",
        negatable=False,
    ),
    *_rules(
        Intent.WHAT_ABOUT,
        r"\bwhat (?:is|was) (?:this|it|that|the call) (?:about|regarding|for|concerning)\b",
        r"\bwhat (?:do|did) you want\b|\bwhy (?:are|were) you calling\b|\bwhat is this\b",
        r"\bwhat (?:is|was) (?:this|it) in (?:regards?|reference) to\b",
        r"\bwhat (?:are|were) you calling about\b|\bwhat is the call about\b",
        negatable=False,
    ),
    *_rules(
        Intent.AT_WORK,
        r"\bi am (?:currently |still |actually )?(?:at|in) (?:work|the office|my job)\b",
        r"\b(?:i am|i am currently) working\b(?! on)",
        negatable=False,
    ),
    *_rules(
        Intent.WORKPLACE_FORBIDS_CALLS,
        r"\b(?:can not|am not allowed to|am not supposed to|not allowed to|may not|do not)"
        r" (?:take|have|answer|get) (?:personal |phone |these )?(?:calls?|phone calls?)"
        r" (?:at|during|while at|from) (?:work|my job|the office)\b",
        r"\b(?:my )?(?:employer|boss|job|work|company|manager)"
        r" (?:does not|do not|will not|won't) (?:allow|let|permit)\b",
        r"\b(?:do not|never|stop|no) (?:call|calling|contact\w*) (?:me )?"
        r"(?:at|during|while i am at)"
        r" (?:work|my job|the office|my work)\b",
        r"\b(?:not|no) (?:allowed|permitted) (?:calls|phone calls|personal calls) at work\b",
        negatable=False,
    ),
]

# An answering machine's greeting (rule C10): only a limited-content message may follow.
_VOICEMAIL_RE = re.compile(
    r"\b(?:after|at) the (?:tone|beep)\b|\byou (?:have|ve) reached\b"
    r"|\bleave (?:me |us )?(?:a |your )?(?:brief |short )?(?:message|name and number)\b"
    r"|\b(?:not available|unable|can not|not able) to (?:take|answer|come to) (?:your|the|my) "
    r"(?:call|phone)\b|\bthe (?:person|number|party|subscriber|customer|wireless customer) you "
    r"(?:are calling|are trying to reach|have dialed|have called|dialed|called)\b"
    r"|\bmailbox\b|\bvoice ?mail ?box\b|\brecord your message\b"
)
_STOP_ALONE_RE = re.compile(r"^(?:(?:please|just|now|stop|it|ok|okay)\s*)*$")
_CARD_MARKERS = (CARD_REMOVED, EXPIRY_REMOVED, CODE_REMOVED)
#: The markers as they read once normalised: their words ("card") are not the caller's.
_MARKERS_RE = re.compile("|".join(re.escape(m.lower()) for m in _CARD_MARKERS))

_YES_RE = re.compile(
    rf"^{_FILLERS}(?:yes|yeah|yep|yup|yea|ya|yah|sure|correct|absolutely|definitely|certainly"
    r"|of course(?! not)|uh huh|mm hmm|affirmative|indeed|exactly|you bet|right(?! now| away)"
    r"|(?:that )?sounds (?:good|great|fair|fine|ok|okay|right)|that is fair"
    r"|that is (?:right|correct|true|fine)|that works|that would work|perfect"
    r"|no problem|that is me|it is me|(?:speaking|this is (?:he|she|him|her))(?=\s*$))\b"
)
_EXPLICIT_YES_RE = re.compile(
    rf"^{_FILLERS}(?:yes|yeah|yep|yup|correct|that is (?:right|correct)|that is correct"
    r"|(?:yes )?that is right|right|exactly|absolutely|i confirm|confirmed|affirmative)(?:\W|$)"
    r"(?!.*\b(?:but|not|no|wait|actually|change)\b)"
)
_YES_CONFIRM_RE = re.compile(
    rf"^{_FILLERS}(?:okay|ok|alright|all right|fine|i do|i will|i can|i am|i did|i have|go ahead"
    r"|please do|do it|let us do it|works for me|that is good|good|great)(?! not)\b"
)
_YES_IDENTITY_RE = re.compile(
    rf"^{_FILLERS}(?:speaking|this is (?:he|she|him|her|me)|that is me|it is me|that would be me"
    r"|you got (?:him|her|me|it|the right person)|you found (?:him|her|me)"
    r"|you are (?:speaking|talking) (?:to|with) (?:him|her|me)|i am (?:he|she|him|her)"
    r"|(?:i am|this is|it is) (?:the )?account holder)\b"
)
_NO_RE = re.compile(
    rf"^{_FILLERS}(?:(?:yeah|yes|yep|ok|okay) )?"
    r"(?:no(?! problem| worries| doubt| one| body)|nope|nah|negative|not really"
    r"|absolutely not|of course not|definitely not|i do not think so|not at all|no way"
    r"|i would rather not|not me)\b"
)


def _clauses(normalized: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_SPLIT_RE.split(normalized) if c and c.strip()]


def _intents(clauses: list[str], whole: str) -> set[Intent]:
    found: set[Intent] = set()
    for clause in clauses:
        for rule in _INTENT_RULES:
            if rule.intent in found:
                continue
            for m in rule.pattern.finditer(clause):
                if not rule.negatable or not _negated(clause, m.start()):
                    found.add(rule.intent)
                    break
    bare = re.sub(r"[^a-z ]", "", whole).strip()
    if bare and _STOP_ALONE_RE.match(bare) and "stop" in bare:
        found.add(Intent.STOP_CALLING)
    if Intent.CEASE in found:
        # A request to stop all contact is at least a request to stop calling.
        found.add(Intent.STOP_CALLING)
    if Intent.PAY_IN_FULL in found:
        found.discard(Intent.PAYMENT_OFFER)
    return found


def _yes_no(clauses: list[str], expecting: Expectation | None) -> Intent | None:
    """The last yes or no in the turn ("yeah, no" is a no). To a read-back only a
    clear yes counts: "okay", "uh huh" or "sure" may only mean "I hear you"."""
    answer: Intent | None = None
    for clause in clauses:
        if _NO_RE.match(clause):
            answer = Intent.NO
        elif expecting is Expectation.EXPLICIT_YES:
            if _EXPLICIT_YES_RE.match(clause):
                answer = Intent.YES
        elif _YES_RE.match(clause):
            answer = Intent.YES
        elif expecting is Expectation.IDENTITY and _YES_IDENTITY_RE.match(clause):
            answer = Intent.YES
        elif expecting in (Expectation.CONFIRM, Expectation.RECORDING_CONSENT) and (
            _YES_CONFIRM_RE.match(clause)
        ):
            answer = Intent.YES
    return answer


# -- tokens and numbers -------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"(?P<date>(?<![\d/])\d{1,4}[/-]\d{1,2}(?:[/-]\d{2,4})?(?![\d/]))"
    r"|(?P<dollar>\$\s?)?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<suffix>st|nd|rd|th|k)?\b"
    r"|(?P<word>[a-z]+(?:'[a-z]+)*|\[[a-z ]+\])"
    r"|(?P<sym>[$%])"
    r"|(?P<punct>[.,!?;:])"
)


@dataclass(frozen=True, slots=True)
class _Tok:
    text: str
    kind: str  # "word", "num", "date", "sym", "punct"
    value: float | None = None
    ordinal: bool = False
    dollar: bool = False


def _tokens(normalized: str) -> list[_Tok]:
    out: list[_Tok] = []
    for m in _TOKEN_RE.finditer(normalized):
        kind = m.lastgroup or ""
        if m.group("num") is not None:
            raw = m.group("num")
            value = float(raw.replace(",", ""))
            suffix = m.group("suffix") or ""
            if suffix == "k":
                value *= 1000
            ordinal = suffix in ("st", "nd", "rd", "th")
            out.append(_Tok(raw, "num", value, ordinal, dollar=bool(m.group("dollar"))))
        elif m.group("date") is not None:
            out.append(_Tok(m.group("date"), "date"))
        elif m.group("word") is not None:
            out.append(_Tok(m.group("word"), "word"))
        elif m.group("sym") is not None:
            out.append(_Tok(m.group("sym"), "sym"))
        else:
            out.append(_Tok(m.group(0), kind))
    return out


@dataclass(frozen=True, slots=True)
class _Num:
    """A number in the token stream: tokens [first, end)."""

    value: float
    first: int
    end: int
    ordinal: bool = False
    spoken: bool = False
    two_digit: bool = False  # spoken as one teen or tens word (+ unit): "fifty", "twenty-five"
    dollar: bool = False


def _read_spoken(toks: list[_Tok], i: int) -> _Num | None:
    """One spoken cardinal or ordinal at ``toks[i]``, by the usual grammar."""
    n = len(toks)
    total = current = 0
    last: str | None = None  # unit, teen, tens, hundred, scale
    min_scale = 10**12
    ordinal = False
    kinds: list[str] = []
    j = i
    while j < n and toks[j].kind == "word":
        w = toks[j].text
        nxt = toks[j + 1].text if j + 1 < n else ""
        if w in ("a", "an") and last is None and nxt in ("hundred", "thousand", "million", "grand"):
            current, last = 1, "unit"
        elif (
            w == "and"
            and last in ("hundred", "scale")
            and (
                nxt in _UNITS
                or nxt in _TEENS
                or nxt in _TENS
                or nxt in _ORD_UNITS
                or nxt in _ORD_TENS
            )
        ):
            pass
        elif w in _UNITS or w in _ORD_UNITS:
            if last not in (None, "hundred", "scale", "tens"):
                break
            if last == "tens" and (w == "zero"):
                break
            current += _UNITS.get(w, _ORD_UNITS.get(w, 0))
            last, ordinal = "unit", w in _ORD_UNITS
        elif w in _TEENS or w in _ORD_TEENS:
            if last not in (None, "hundred", "scale"):
                break
            current += _TEENS.get(w, _ORD_TEENS.get(w, 0))
            last, ordinal = "teen", w in _ORD_TEENS
        elif w in _TENS or w in _ORD_TENS:
            if last not in (None, "hundred", "scale"):
                break
            current += _TENS.get(w, _ORD_TENS.get(w, 0))
            last, ordinal = "tens", w in _ORD_TENS
        elif w == "hundred":
            if last not in ("unit", "teen", "tens") or current >= 100:
                break
            current *= 100
            last = "hundred"
        elif w in _SCALES:
            scale = _SCALES[w]
            if last in (None, "scale") or scale >= min_scale:
                break
            total += current * scale
            current, last, min_scale = 0, "scale", scale
        else:
            break
        kinds.append(last or "")
        j += 1
        if ordinal:
            break
    if last is None or j == i:
        return None
    two_digit = kinds[0] in ("teen", "tens") and all(k in ("teen", "tens", "unit") for k in kinds)
    return _Num(float(total + current), i, j, ordinal, spoken=True, two_digit=two_digit)


def _numbers(toks: list[_Tok]) -> list[_Num]:
    nums: list[_Num] = []
    i, n = 0, len(toks)
    while i < n:
        t = toks[i]
        if t.kind == "num" and t.value is not None:
            value, end = t.value, i + 1
            if not t.ordinal and end < n and toks[end].text in ("hundred", *_SCALES):
                value *= 100 if toks[end].text == "hundred" else _SCALES[toks[end].text]
                end += 1
            dollar = t.dollar or (i > 0 and toks[i - 1].text == "$")
            nums.append(_Num(value, i, end, t.ordinal, dollar=dollar))
            i = end
            continue
        if t.kind == "word":
            num = _read_spoken(toks, i)
            if num is not None:
                nums.append(num)
                i = num.end
                continue
        i += 1
    return nums


def parse_number(text: str) -> float | None:
    """The number ``text`` says, if it is exactly one: "two hundred and fifty" -> 250."""
    toks = _tokens(_normalize(text))
    nums = _numbers(toks)
    if len(nums) == 1 and nums[0].first == 0 and nums[0].end == len(toks):
        return nums[0].value
    return None


# -- money ---------------------------------------------------------------------------

_CURRENCY_WORDS = {"dollars", "dollar", "bucks", "buck", "usd"}
_PAY_WORDS = set(
    "pay paying send sending give giving offer afford manage put make do about maybe only just "
    "around roughly approximately least payment payments settle".split()
)
_PER_PHRASES = {
    tuple(phrase.split()): per
    for per, phrases in (
        ("month", ("a month", "per month", "each month", "every month", "monthly")),
        ("week", ("a week", "per week", "each week", "every week", "weekly")),
        ("two weeks", ("every two weeks", "every other week", "biweekly", "a paycheck")),
    )
    for phrase in phrases
}
_NOT_MONEY_AFTER = set(
    "am pm o'clock oclock day days week weeks month months year years hour hours minute minutes "
    "times percent kids children people % of payment payments time go shot installment "
    "installments".split()
)


@dataclass(frozen=True)
class Money:
    """An amount of money said in a text."""

    cents: int
    marked: bool  # "$", "dollars", "bucks", "grand", "cents"
    per: str | None = None  # "month", "week", "two weeks" for a recurring amount
    offered: bool = False  # said in a paying context: "I can pay ...", "how about ..."
    negated: bool = False  # "I can't pay 200"
    lead: str = ""  # the few words before it, within its clause: "a balance of"
    first: int = 0  # token span, to tell it from dates and digits
    end: int = 0


def _per(toks: list[_Tok], j: int) -> tuple[str | None, int]:
    for phrase, per in _PER_PHRASES.items():
        if tuple(t.text for t in toks[j : j + len(phrase)]) == phrase:
            return per, j + len(phrase)
    return None, j


def _clause_start(toks: list[_Tok], i: int) -> int:
    """Where the clause holding ``toks[i]`` starts, looking back no further than needed."""
    floor = max(0, i - _NEGATION_WINDOW - 2)
    while i > floor and toks[i - 1].kind != "punct" and toks[i - 1].text not in ("but", "so"):
        i -= 1
    return i


def _money_at(
    toks: list[_Tok], nums: list[_Num], k: int, expect_amount: bool
) -> tuple[Money, int] | None:
    """Money starting at ``nums[k]``, and how many numbers it used."""
    num = nums[k]
    if num.ordinal:
        return None
    value, end, used = num.value, num.end, 1
    nxt = nums[k + 1] if k + 1 < len(nums) else None
    pair = (
        nxt is not None
        and nxt.first == num.end
        and num.spoken
        and nxt.spoken
        and not nxt.ordinal
        and 1 <= num.value <= 99
        and nxt.two_digit
        and 10 <= nxt.value <= 99
    )
    if pair and nxt is not None:
        after = nums[k + 2] if k + 2 < len(nums) else None
        if after is not None and after.first == nxt.end:
            return None  # "one two three four": digits
        value, end, used = num.value * 100 + nxt.value, nxt.end, 2
    elif nxt is not None and nxt.first == num.end and num.spoken and nxt.spoken:
        return None  # a run of spoken numbers that is not an amount
    marked = num.dollar
    word = toks[end].text if end < len(toks) else ""
    if word in _CURRENCY_WORDS:
        marked, end = True, end + 1
        # "fifty dollars and twenty five cents", "twelve dollars fifty"
        j = end + 1 if end < len(toks) and toks[end].text == "and" else end
        cents = next((c for c in nums[k + used :] if c.first == j), None)
        if cents is not None and not cents.ordinal and cents.value < 100:
            after_cents = toks[cents.end].text if cents.end < len(toks) else ""
            if after_cents in ("cents", "cent") or (j == end and cents.spoken):
                value += cents.value / 100
                end = cents.end + (after_cents in ("cents", "cent"))
                used += 1
    elif word == "grand":
        value, marked, end = value * 1000, True, end + 1
    elif word in ("cents", "cent"):
        value, marked, end = value / 100, True, end + 1
    per, end_per = _per(toks, end)
    start = _clause_start(toks, num.first)
    before = [t.text for t in toks[max(start, num.first - 3) : num.first]]
    prev = before[-1] if before else ""
    offered = per is not None or any(w in _PAY_WORDS for w in before)
    if not marked:
        if word in _NOT_MONEY_AFTER or prev in ("the", "at", "in", "on", "last", "ending"):
            return None
        if prev in _MONTHS or not (offered or expect_amount):
            return None
    if value <= 0:
        return None
    negated = _negated_words([t.text for t in toks[start : num.first]], toks[num.first].text)
    money = Money(
        cents=round(value * 100),
        marked=marked,
        per=per,
        offered=offered or expect_amount,
        negated=negated,
        lead=" ".join(t.text for t in toks[max(start, num.first - 4) : num.first]),
        first=num.first,
        end=end_per,
    )
    return money, used


def _find_money(
    toks: list[_Tok], nums: list[_Num], expect_amount: bool, taken: set[int]
) -> list[Money]:
    found: list[Money] = []
    k = 0
    while k < len(nums):
        if nums[k].first in taken:
            k += 1
            continue
        got = _money_at(toks, nums, k, expect_amount)
        if got is None:
            k += 1
            continue
        money, used = got
        found.append(money)
        k += used
    return found


def find_money(text: str) -> list[Money]:
    """Every amount of money ``text`` says, in order (see the module's rules)."""
    toks = _tokens(_normalize(text))
    return _find_money(toks, _numbers(toks), False, set())


# -- dates ---------------------------------------------------------------------------

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        "january/jan february/feb march april/apr may june july august/aug september/sept "
        "october/oct november/nov december/dec".split()
    )
    for name in names.split("/")
}
_WEEKDAYS = {
    name: i
    for i, names in enumerate(
        "monday/mondays tuesday/tuesdays/tues wednesday/wednesdays thursday/thursdays/thurs "
        "friday/fridays saturday/saturdays sunday/sundays".split()
    )
    for name in names.split("/")
}
_NOT_A_DAY_AFTER = set(
    "payment payments time times thing things one step installment installments month months "
    "week weeks year years person call option place % percent dollars bucks".split()
)
_BIRTH_CUES = {"born", "birth", "birthday", "dob", "birthdate"}


@dataclass(frozen=True, slots=True)
class _Date:
    day: dt.date
    position: int
    has_year: bool
    tokens: tuple[int, ...]


def _add_months(day: dt.date, months: int) -> dt.date:
    month0 = day.month - 1 + months
    year, month = day.year + month0 // 12, month0 % 12 + 1
    return dt.date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _next_day_of_month(today: dt.date, dom: int) -> dt.date | None:
    if not 1 <= dom <= 31:
        return None
    for ahead in range(13):
        first = _add_months(today.replace(day=1), ahead)
        if dom <= calendar.monthrange(first.year, first.month)[1]:
            candidate = first.replace(day=dom)
            if candidate >= today:
                return candidate
    return None


def _next_month_day(today: dt.date, month: int, dom: int) -> dt.date | None:
    for year in range(today.year, today.year + 9):
        try:
            candidate = dt.date(year, month, dom)
        except ValueError:
            continue
        if candidate >= today:
            return candidate
    return None


def _calendar_date(year: int | None, month: int, dom: int, today: dt.date) -> dt.date | None:
    if year is None:
        return _next_month_day(today, month, dom)
    try:
        return dt.date(year, month, dom)
    except ValueError:
        return None


def _year_at(
    toks: list[_Tok], num_at: dict[int, _Num], j: int, today: dt.date
) -> tuple[int, int] | None:
    """A year at ``toks[j]``: "1980", "nineteen eighty", "two thousand five", "twenty oh five"."""
    while j < len(toks) and (toks[j].kind == "punct" and toks[j].text == ","):
        j += 1
    num = num_at.get(j)
    if num is None or num.ordinal:
        return None
    year: int | None = None
    end = num.end
    if not num.spoken:
        if len(toks[j].text) == 4 or 1900 <= num.value:
            year = int(num.value)
    elif 10 <= num.value <= 99 and num.two_digit:
        nxt = num_at.get(num.end)
        if nxt is not None and nxt.spoken and not nxt.ordinal and nxt.value < 100:
            year, end = int(num.value * 100 + nxt.value), nxt.end
        elif num.end + 1 < len(toks) and toks[num.end].text in ("oh", "o"):
            unit = num_at.get(num.end + 1)
            if unit is not None and unit.value < 10:
                year, end = int(num.value * 100 + unit.value), unit.end
    elif 1900 <= num.value <= 2100:
        year = int(num.value)
    if year is None or not 1900 <= year <= today.year + 5:
        return None
    return year, end


def _numeric_date(text: str, today: dt.date) -> tuple[dt.date | None, bool]:
    raw = re.split(r"[/-]", text)
    parts = [int(p) for p in raw]
    year: int | None = None
    if len(raw[0]) == 4 or parts[0] > 31:
        if len(parts) != 3:
            return None, False
        year, month, dom = parts
    else:
        month, dom = parts[0], parts[1]
        if month > 12 and dom <= 12:
            month, dom = dom, month
        if len(parts) == 3:
            year = parts[2]
            if year < 100:
                year += 1900 if year > today.year % 100 else 2000
    if year is not None and not 1900 <= year <= today.year + 5:
        return None, False
    return _calendar_date(year, month, dom, today), year is not None


def _weekday(today: dt.date, weekday: int, qualifier: str) -> dt.date:
    ahead = (weekday - today.weekday()) % 7
    if qualifier == "this":
        return today + dt.timedelta(days=ahead)
    target = today + dt.timedelta(days=ahead or 7)
    if qualifier == "next" and target.isocalendar()[:2] == today.isocalendar()[:2]:
        target += dt.timedelta(days=7)
    return target


def _dates(
    toks: list[_Tok], nums: list[_Num], today: dt.date, expecting: Expectation | None
) -> list[_Date]:
    num_at = {num.first: num for num in nums}
    found: list[_Date] = []
    used: set[int] = set()
    n = len(toks)

    def day_num(j: int) -> _Num | None:
        num = num_at.get(j)
        if num is None or num.dollar or num.value != int(num.value) or not 1 <= num.value <= 31:
            return None
        return num

    def add(day: dt.date | None, at: int, end: int, has_year: bool) -> None:
        if day is not None:
            span = tuple(range(at, end))
            found.append(_Date(day, at, has_year, span))
            used.update(span)

    for i, t in enumerate(toks):
        if i in used:
            continue
        w = t.text
        if t.kind == "date":
            day, has_year = _numeric_date(w, today)
            add(day, i, i + 1, has_year)
        elif w in _MONTHS and t.kind == "word":
            j = i + 1 + (i + 1 < n and toks[i + 1].text == "the")
            num = day_num(j)
            if num is None:
                continue
            year = _year_at(toks, num_at, num.end, today)
            end = year[1] if year else num.end
            add(
                _calendar_date(year[0] if year else None, _MONTHS[w], int(num.value), today),
                i,
                end,
                year is not None,
            )
        elif (num := day_num(i)) is not None and num.end < n:
            # "the 5th of March 1980", "20th of December", "5th March"
            j = num.end + (toks[num.end].text == "of")
            if j < n and toks[j].text in _MONTHS and (j > num.end or num.ordinal):
                year = _year_at(toks, num_at, j + 1, today)
                end = year[1] if year else j + 1
                month = _MONTHS[toks[j].text]
                start = i - 1 if i > 0 and toks[i - 1].text == "the" else i
                add(
                    _calendar_date(year[0] if year else None, month, int(num.value), today),
                    start,
                    end,
                    year is not None,
                )
        if i in used:
            continue
        if w in ("the", "on", "by") and (num := day_num(i + 1)) is not None:
            follows = toks[num.end].text if num.end < n else ""
            if (num.ordinal or not num.spoken) and follows not in _NOT_A_DAY_AFTER:
                if follows == "of" and num.end + 1 < n and toks[num.end + 1].text in _MONTHS:
                    continue
                add(_next_day_of_month(today, int(num.value)), i, num.end, False)
        elif expecting is Expectation.DATE and (num := day_num(i)) is not None and num.ordinal:
            add(_next_day_of_month(today, int(num.value)), i, num.end, False)
        elif w in ("today", "tonight"):
            add(today, i, i + 1, False)
        elif w == "tomorrow":
            after = i >= 2 and toks[i - 1].text == "after" and toks[i - 2].text == "day"
            add(today + dt.timedelta(days=2 if after else 1), i, i + 1, False)
        elif w in _WEEKDAYS:
            prev = toks[i - 1].text if i else ""
            if prev == "coming" and i >= 2 and toks[i - 2].text == "this":
                prev = "this"
            add(_weekday(today, _WEEKDAYS[w], prev), i, i + 1, False)
        elif w == "in" and i + 2 < n:
            count = num_at.get(i + 1)
            amount = count.value if count is not None else None
            j = count.end if count is not None else i + 2
            if toks[i + 1].text in ("a", "an"):
                amount = 1
            elif toks[i + 1].text == "couple":
                amount, j = 2, i + 2 + (i + 2 < n and toks[i + 2].text == "of")
            if amount is not None and j < n and amount == int(amount):
                unit = toks[j].text
                if unit in ("day", "days"):
                    add(today + dt.timedelta(days=int(amount)), i, j + 1, False)
                elif unit in ("week", "weeks"):
                    add(today + dt.timedelta(weeks=int(amount)), i, j + 1, False)
                elif unit in ("month", "months"):
                    add(_add_months(today, int(amount)), i, j + 1, False)
        elif w == "week" and i + 2 < n and toks[i + 1].text == "from":
            if toks[i + 2].text in ("today", "now"):
                count = num_at.get(i - 1)
                weeks = count.value if count is not None else 1
                add(today + dt.timedelta(weeks=int(weeks)), i, i + 3, False)
        elif w == "end" and i + 2 < n and toks[i + 1].text == "of":
            j = i + 2 + (toks[i + 2].text in ("the", "this"))
            if j < n and toks[j].text == "month":
                last = calendar.monthrange(today.year, today.month)[1]
                add(today.replace(day=last), i, j + 1, False)
            elif j + 1 < n and toks[j].text == "next" and toks[j + 1].text == "month":
                nxt = _add_months(today.replace(day=1), 1)
                last = calendar.monthrange(nxt.year, nxt.month)[1]
                add(nxt.replace(day=last), i, j + 2, False)
    found.sort(key=lambda d: d.position)
    return found


# -- last four, name, method -----------------------------------------------------------

_DIGITISH = {"oh", "double", "triple", *_UNITS, *_TEENS, *_TENS}


def _digits_at(toks: list[_Tok], j: int) -> tuple[str, int]:
    """The digits read out from ``toks[j]`` on, and where they stop."""
    parts: list[str] = []
    end = j
    while j < len(toks):
        t = toks[j]
        if t.kind == "num" and t.value is not None and "." not in t.text and not t.ordinal:
            parts.append(t.text.replace(",", ""))
        elif t.kind == "word" and t.text in _DIGITISH:
            parts.append(t.text)
        elif t.kind == "punct" and t.text in (",", ".") and parts:
            j += 1
            continue
        elif t.text in ("uh", "um") and parts:
            j += 1
            continue
        else:
            break
        j += 1
        end = j
    return "".join(digit_groups(" ".join(parts))), end


def _last4(toks: list[_Tok], expecting: Expectation | None) -> tuple[str | None, set[int]]:
    n = len(toks)
    for i, t in enumerate(toks):
        j: int | None = None
        if t.text == "last" and i + 1 < n and toks[i + 1].text in ("four", "4"):
            j = i + 2
        elif (
            t.text in ("ending", "ends", "end")
            and i + 1 < n
            and toks[i + 1].text
            in (
                "in",
                "with",
            )
        ):
            j = i + 2
        if j is None:
            continue
        for k in range(j, min(j + 8, n)):
            tk = toks[k]
            if tk.kind == "num" or tk.text in _DIGITISH and tk.text != "oh":
                digits, end = _digits_at(toks, k)
                if len(digits) == 4:
                    return digits, set(range(i, end))
                break
    if expecting is Expectation.LAST4:
        for k, tk in enumerate(toks):
            if tk.kind == "num" or tk.text in _DIGITISH:
                digits, end = _digits_at(toks, k)
                if len(digits) == 4:
                    return digits, set(range(k, end))
    return None, set()


_NAME_WORD = r"[A-Z][a-zA-Z'\-]+"
_TITLES = r"(?:(?:Mr|Mrs|Ms|Miss|Dr|Mister)\.?\s+)?"
_NAME_STOP = {
    *"""Yes Yeah Yep No Nope Hi Hello Hey Speaking This It I Sir Ma'am Okay Ok Well Oh The He She
    His Her Here Sure Um Uh Who What Why Speak And But Not Just Is Correct Right Thanks Thank
    Please Sorry Good Fine Calling Jr Sr Robot Busy Driving Available Home Out AI Am Are
    You Wait Hmm Hm Huh Mm Eh Ah Uh Um Pardon Excuse Hang Hold Yo Nah What Who Where When How
    Why Listen Look See Alright Maybe Perhaps Again Me Him""".split(),
    *(m.capitalize() for m in _MONTHS),
    *(d.capitalize() for d in _WEEKDAYS),
}
_NAME_AFTER_RE = re.compile(
    r"(?i:\b(?:my name is|my name's|the name is|name's|you are speaking with|you're speaking with"
    r"|you are talking to|you're talking to|this is|it is|it's|i am|i'm))\s+"
    rf"{_TITLES}(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})"
)
_NAME_LOWER_RE = re.compile(
    r"(?i:\b(?:my name is|my name's|the name is))\s+(?P<name>[a-z][a-z'\-]+(?:\s+[a-z][a-z'\-]+)?)"
)
_NAME_BEFORE_RE = re.compile(
    rf"{_TITLES}(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}}),?\s+(?i:speaking|here)\b"
)
_NAME_ALONE_RE = re.compile(
    rf"^\W*(?:(?i:yes|yeah|yep|this is|it's|it is)\W+)?{_TITLES}"
    rf"(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})\W*$"
)
_NOT_NAMES_LOWER = set("not sorry busy driving here his her their the a an he she him me".split())


def _clean_name(raw: str, *, lower_ok: bool = False) -> str | None:
    words = raw.split()
    while words and words[0] in _NAME_STOP:
        words.pop(0)
    cut = next((i for i, w in enumerate(words) if w in _NAME_STOP), len(words))
    words = words[:cut]
    if not words or any(w.endswith("'s") for w in words):
        return None
    if lower_ok and words[0].lower() in _NOT_NAMES_LOWER:
        return None
    if lower_ok:
        words = [w[:1].upper() + w[1:] for w in words if w.lower() not in _NOT_NAMES_LOWER]
    return " ".join(words) or None


def _name(text: str, expecting: Expectation | None) -> str | None:
    for pattern, lower_ok in (
        (_NAME_AFTER_RE, False),
        (_NAME_LOWER_RE, True),
        (_NAME_BEFORE_RE, False),
    ):
        for m in pattern.finditer(text):
            tail = text[m.end() :].lstrip()
            if tail.startswith("'s"):
                continue
            name = _clean_name(m.group("name"), lower_ok=lower_ok)
            if name:
                return name
    if expecting in (Expectation.IDENTITY, Expectation.NAME):
        alone = _NAME_ALONE_RE.match(text.strip())
        if alone:
            return _clean_name(alone.group("name"))
    return None


_METHOD_RULES: list[tuple[re.Pattern[str], PaymentMethod]] = [
    (re.compile(r"\bdebit card\b"), PaymentMethod.DEBIT_CARD),
    (
        re.compile(
            r"\bcredit card\b|\b(?:visa|master ?card|amex|american express|discover card)\b"
        ),
        PaymentMethod.CREDIT_CARD,
    ),
    (
        re.compile(
            r"\bach\b|\bbank (?:transfer|account|draft|wire)\b|\bchecking(?: account)?\b"
            r"|\bsavings account\b|\brouting number\b|\be ?check\b|\bdirect debit\b"
            r"|\belectronic (?:check|transfer)\b|\bfrom my bank\b|\bwire transfer\b"
        ),
        PaymentMethod.BANK_TRANSFER,
    ),
    (
        re.compile(
            r"\b(?:a|by|with|personal|paper|mail|send|write|cashier's|certified)"
            r" (?:a )?(?:check|cheque)s?\b"
            r"|^(?:a )?(?:check|cheque)\W*$"
        ),
        PaymentMethod.CHECK,
    ),
    (re.compile(r"\bmoney order\b"), PaymentMethod.MONEY_ORDER),
    (re.compile(r"\bcard\b"), PaymentMethod.CARD),
    (re.compile(r"\bdebit\b"), PaymentMethod.DEBIT_CARD),
]


#: "check" alone, as an answer to how one will pay ("Friday, check."), not "let me check".
_BARE_CHECK_RE = re.compile(
    r"(?<!let me )(?<!i will )(?<!i have to )(?<!to )\b(?:check|cheque)\b"
    r"(?! (?:on|with|my|that|if|it|and see|back))"
)


def _method(normalized: str, expecting: Expectation | None) -> PaymentMethod | None:
    for pattern, method in _METHOD_RULES:
        if pattern.search(normalized):
            return method
    if expecting in (Expectation.METHOD, Expectation.DATE) and _BARE_CHECK_RE.search(normalized):
        return PaymentMethod.CHECK
    return None


# -- discounts -----------------------------------------------------------------------

_PERCENT_RE = re.compile(
    rf"(?P<n>\d+(?:\.\d+)?|{NUMBER_PATTERN})\s*(?:%|percent\b|per cent\b)(?P<after>[^.,;!?]*)"
)
_HALF_RE = re.compile(
    r"\b(?:settle for|pay|do|accept|take|give you|offer) (?:you )?half\b|\bhalf (?:off|of it|"
    r"the (?:balance|amount|debt))\b"
)
_PAY_PERCENT_RE = re.compile(r"\b(?:pay|settle for|offer|give you|do|accept|only)\s*(?:you\s+)?$")


def _discount(normalized: str) -> float | None:
    for m in _PERCENT_RE.finditer(normalized):
        value = parse_number(m.group("n"))
        if value is None:
            continue
        after = m.group("after")
        if re.match(r"\s*(?:off|discount|less|reduction)\b", after):
            return value
        before = normalized[max(0, m.start() - 20) : m.start()]
        if _PAY_PERCENT_RE.search(before):
            return max(0.0, 100.0 - value)
        return value
    if _HALF_RE.search(normalized):
        return 50.0
    return None


# -- who is speaking, terms, times, numbers said (the policy's C3, C8, C13 inputs) -----

_BENIGN_THIRD_PERSON_RE = re.compile(
    r"\b(?:this is|it is|that is|yes|yeah) (?:he|she|him|her)\b|\b(?:he|she) speaking\b"
)
_THIRD_PERSON_RE = re.compile(
    rf"\b(?:he|she|him|his|hers|himself|herself)\b|\bher\b|\b(?:their|your) {_REL}\b"
    rf"|\b{_REL}'s\b|\b[a-z]+'s (?:phone|number|cell|account|bill|bills|debt|loan|card|mail)\b"
)
_PARTIAL_RE = re.compile(
    r"\b(?:part|parts|some|rest|portion|fees?|interest|charges?|only|all of it|the whole"
    r"|too high|extra|that much|not all)\b"
)
_ONCE_RE = re.compile(
    r"\b(?:just |only )?once\b|\bone[- ]?time\b|\bone (?:single )?payment\b|\bsingle payment\b"
    r"|\blump sum\b|\ball at once\b|\bin one (?:go|shot|payment)\b|\bone[- ]off\b"
)
_COUNT_RE = re.compile(
    rf"\b(?:in|over|across|for|within)\s+(?:the next\s+)?(?P<n>\d+|{NUMBER_PATTERN}|a)\s*"
    r"(?P<unit>payments|installments|instalments|months|month|years|year)\b"
    rf"|\b(?P<n2>\d+|{NUMBER_PATTERN})\s*(?:monthly\s+)?(?P<unit2>payments|installments|instalments)\b"
)
_HOUR_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve".split()
    )
}
_TIME_RE = re.compile(
    r"\b(?P<rel>after|before|at|around|about|by|past|until|till|from)\s+"
    r"(?P<h>\d{1,2}|" + "|".join(list(_HOUR_WORDS)[1:]) + r")"
    r"(?::(?P<m>\d{2})|\s+(?P<mw>thirty|fifteen|forty five))?"
    r"(?:\s*(?P<o>o'clock|oclock))?"
    r"(?:\s*(?P<ap>am|pm|a m|p m|in the morning|in the evening|in the afternoon|at night|tonight))?"
    r"|\b(?P<rel2>after|before|at|around|by|until)\s+(?P<named>noon|midnight|lunch|dinner)\b"
)
_PART_OF_DAY_RE = re.compile(
    r"\b(?P<part>tonight|this evening|in the evening|evenings|at night|in the morning|mornings"
    r"|this afternoon|in the afternoon)\b"
)
_ATTORNEY_NAME_RE = re.compile(
    r"(?i:\b(?:lawyer|attorney|counsel)(?:'s name)?(?:\s+is|\s+named|\s+called|,)?)\s+"
    rf"{_TITLES}(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD})?)"
    r"|(?P<name2>" + _NAME_WORD + r"(?:\s+" + _NAME_WORD + r")?),?\s+(?i:is my (?:lawyer|attorney))"
)


_EVENING_RE = re.compile(r"\b(?:tonight|this evening|in the evening|at night|this afternoon)\b")


def _third_person(normalized: str) -> bool:
    """Whether the speaker talks of another person or as one (C3 fails closed on it)."""
    return _THIRD_PERSON_RE.search(_BENIGN_THIRD_PERSON_RE.sub(" ", normalized)) is not None


def _installments(normalized: str) -> int | None:
    for m in _COUNT_RE.finditer(normalized):
        raw = m.group("n") or m.group("n2")
        unit = m.group("unit") or m.group("unit2") or ""
        value = 1.0 if raw == "a" else parse_number(raw)
        if value is None or value != int(value) or value <= 0:
            continue
        return int(value) * (12 if unit.startswith("year") else 1)
    return None


def _hour(raw: str) -> int | None:
    value = int(raw) if raw.isdigit() else _HOUR_WORDS.get(raw)
    return value if value is not None and 0 <= value <= 23 else None


def _time_named(normalized: str) -> tuple[dt.time | None, str | None]:
    """A clock time the caller named, as their local time: "after six" is 18:00.

    Without "am"/"pm" an hour from 1 to 7 is read as the afternoon or evening and
    8 to 11 as the morning, the way people name calling times."""
    for m in _TIME_RE.finditer(normalized):
        if m.group("named"):
            named = {"noon": 12, "lunch": 12, "midnight": 0, "dinner": 18}[m.group("named")]
            return dt.time(named), _relation(m.group("rel2"))
        said = _hour(m.group("h"))
        if said is None:
            continue
        hour = said
        minute = int(m.group("m") or 0)
        if m.group("mw"):
            minute = {"thirty": 30, "fifteen": 15, "forty five": 45}[m.group("mw")]
        ap = (m.group("ap") or "").replace(" ", "")
        if hour <= 12 and ap in ("pm", "intheevening", "intheafternoon", "atnight", "tonight"):
            hour = hour % 12 + 12
        elif hour <= 12 and ap in ("am", "inthemorning"):
            hour %= 12
        elif hour <= 7 and not m.group("o") and m.group("rel") in ("at", "around", "about"):
            if not m.group("m") and not ap:
                # "at two" may be a date ("at two hundred"); only with a time context.
                if not _PART_OF_DAY_RE.search(normalized) and "call" not in normalized:
                    continue
            hour += 12
        elif 1 <= hour <= 7:
            hour += 12
        elif hour <= 11 and _EVENING_RE.search(normalized):
            hour += 12  # "tonight at eight"
        if minute >= 60:
            continue
        return dt.time(hour, minute), _relation(m.group("rel"))
    part = _PART_OF_DAY_RE.search(normalized)
    if part is not None:
        word = part.group("part")
        if "morning" in word:
            return dt.time(12), "before"
        if "afternoon" in word:
            return dt.time(12), "after"
        return dt.time(18), "after"
    return None, None


def _relation(word: str | None) -> str:
    if word in ("after", "past", "from"):
        return "after"
    if word in ("before", "by", "until", "till"):
        return "before"
    return "at"


def _phone_number(redacted: str) -> str | None:
    """A US phone number read out (7, 10 or 11 digits, in groups)."""
    for m in _DIGIT_RUN_RE.finditer(redacted.lower()):
        digits = "".join(digit_groups(m.group(0)))
        if len(digits) in (7, 10) or (len(digits) == 11 and digits.startswith("1")):
            return digits
    return None


def _attorney_name(redacted: str) -> str | None:
    for m in _ATTORNEY_NAME_RE.finditer(redacted):
        name = _clean_name(m.group("name") or m.group("name2") or "")
        if name:
            return name
    return None


_NUMBERISH = rf"(?:\$?\d[\d,.]*|{NUMBER_PATTERN})"
_RANGE_RE = re.compile(
    rf"\bbetween\s+{_NUMBERISH}.*\band\b|{_NUMBERISH}\s*(?:or|to|-)\s*\$?{_NUMBERISH}"
    r"|\b(?:or so|or more|or less|give or take|more or less|something like that)\b"
)


def _amounts_ambiguous(found: list[Money], normalized: str) -> bool:
    """Two different amounts offered, or a range: which is meant must be asked."""
    said = {m.cents for m in found if (m.offered or m.marked) and not m.negated}
    return len(said) > 1 or (bool(said) and _RANGE_RE.search(normalized) is not None)


def _two_digit_year(value: int, today: dt.date) -> int:
    """A year said in two digits, for a date of birth: the latest that makes an adult."""
    year = 2000 + value
    return year if year <= today.year - 16 else 1900 + value


def _spoken_birth_date(toks: list[_Tok], today: dt.date) -> tuple[dt.date | None, bool]:
    """A date of birth said as digits or numbers ("oh three twelve eighty four",
    "three five eighty", "March 5th 80"); and whether only part of one was given."""
    month = next((_MONTHS[t.text] for t in toks if t.kind == "word" and t.text in _MONTHS), None)
    ordinals = {**_ORD_UNITS, **_ORD_TEENS, **_ORD_TENS}
    said: list[str] = []
    for t in toks:
        if t.kind == "num" and "." not in t.text:
            said.append(t.text.replace(",", ""))
        elif t.kind == "word" and t.text in ordinals:
            said.append(str(ordinals[t.text]))
        elif t.kind == "word" and t.text in _DIGITISH:
            said.append(t.text)
    groups = digit_groups(" ".join(said))
    for i in range(len(groups) - 1):  # "nineteen eighty": one year, not two groups
        if groups[i] in ("19", "20") and len(groups[i + 1]) == 2:
            groups[i : i + 2] = [groups[i] + groups[i + 1]]
            break
    if month is not None:
        groups = [g for g in groups if g]
        if len(groups) >= 2 and len(groups[-1]) in (2, 4):
            dom, year = int(groups[0]), int(groups[-1])
            year = _two_digit_year(year, today) if year < 100 else year
            return _birth(year, month, dom, today), False
        return None, bool(groups)
    digits = "".join(groups)
    parts: tuple[int, int, int] | None = None
    if len(groups) == 3 and all(groups) and len(groups[2]) in (2, 4):
        parts = int(groups[0]), int(groups[1]), int(groups[2])
    elif len(digits) == 6:
        parts = int(digits[:2]), int(digits[2:4]), int(digits[4:])
    elif len(digits) == 8:
        parts = int(digits[:2]), int(digits[2:4]), int(digits[4:])
    if parts is None:
        return None, len(digits) >= 2
    m, d, y = parts
    y = _two_digit_year(y, today) if y < 100 else y
    return _birth(y, m, d, today), False


def _birth(year: int, month: int, dom: int, today: dt.date) -> dt.date | None:
    try:
        day = dt.date(year, month, dom)
    except ValueError:
        return None
    return day if day.year >= 1900 and day <= today else None


# -- the reading -------------------------------------------------------------------------


def _choose_money(found: Iterable[Money]) -> Money | None:
    found = list(found)
    for rank in (
        lambda m: m.offered and not m.negated,
        lambda m: m.marked and not m.negated,
        lambda m: m.marked,
    ):
        for money in found:
            if rank(money):
                return money
    return None


def understand(
    text: str, *, expecting: Expectation | None = None, today: dt.date | None = None
) -> Understanding:
    """Read one caller turn: intents and facts, with card data removed first."""
    today = today or dt.date.today()
    redacted, removed = redact_card_numbers(text)
    normalized = _normalize(redacted)
    clauses = _clauses(normalized)
    intents = _intents(clauses, normalized)
    if removed or any(marker in redacted for marker in _CARD_MARKERS):
        intents.add(Intent.CARD_NUMBER)

    toks = _tokens(normalized)
    nums = _numbers(toks)
    last4, taken = _last4(toks, expecting)
    dates = [d for d in _dates(toks, nums, today, expecting) if not taken.intersection(d.tokens)]
    date_of_birth: dt.date | None = None
    day: dt.date | None = None
    partial_date = False
    birth_cue = any(t.text in _BIRTH_CUES for t in toks) or expecting is Expectation.DATE_OF_BIRTH
    for found in dates:
        taken.update(found.tokens)
        is_birth = found.has_year and (
            birth_cue or (found.day < today and found.day.year <= today.year - 10)
        )
        if is_birth:
            date_of_birth = found.day  # the last one said: "the fifth, no, the sixth"
        elif expecting is Expectation.DATE_OF_BIRTH:
            partial_date = True
        elif day is None:
            day = found.day
    if date_of_birth is None and birth_cue and last4 is None:
        date_of_birth, partial = _spoken_birth_date(toks, today)
        partial_date = partial_date or partial
        if date_of_birth is not None:
            partial_date = False

    amount_expected = expecting in (
        Expectation.AMOUNT,
        Expectation.MONTHLY_AMOUNT,
        Expectation.ONE_OR_MONTHLY,
    )
    found_money = _find_money(toks, nums, amount_expected, taken)
    money = _choose_money(found_money)
    discount = _discount(normalized)
    offered = money is not None and money.offered and not money.negated
    if (offered or discount is not None) and Intent.PAY_IN_FULL not in intents:
        intents.add(Intent.PAYMENT_OFFER)
    time, relation = _time_named(normalized)

    answer = _yes_no(clauses, expecting)
    if answer is not None:
        intents.add(answer)
    name = _name(redacted, expecting)
    if expecting is Expectation.IDENTITY and intents & {
        Intent.THIRD_PARTY,
        Intent.WRONG_NUMBER,
        Intent.DECEASED,
    }:
        # A name alone is no "yes": the policy compares it with the consumer's (C3).
        intents.discard(Intent.YES)
        intents.add(Intent.NO)
    if expecting is Expectation.RECORDING_CONSENT and Intent.NO in intents:
        intents.add(Intent.RECORDING_OBJECTION)

    return Understanding(
        intents=frozenset(intents),
        amount_cents=money.cents if money else None,
        date=day,
        name=name,
        date_of_birth=date_of_birth,
        last4=last4,
        method=_method(_MARKERS_RE.sub(" ", normalized), expecting),
        discount_pct=discount,
        monthly=money is not None and money.per == "month",
        per=money.per if money else None,
        voicemail=_VOICEMAIL_RE.search(normalized) is not None,
        text=redacted,
        third_person=_third_person(normalized),
        partial_dispute=Intent.DISPUTE in intents and _PARTIAL_RE.search(normalized) is not None,
        once=_ONCE_RE.search(normalized) is not None,
        installments=_installments(normalized),
        amounts_ambiguous=_amounts_ambiguous(found_money, normalized),
        time=time,
        time_relation=relation,
        phone_number=_phone_number(redacted),
        attorney_name=_attorney_name(redacted) if Intent.ATTORNEY in intents else None,
        partial_date=partial_date and date_of_birth is None,
    )
