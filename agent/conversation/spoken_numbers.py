"""Numbers and money as Whisper writes them: digits or words, read the same way everywhere.

The caller's side (``agent.conversation.intents``) and the agent's side (the output guard)
both read amounts; this module is the one reading of them, apart from the intent rules, so
the two sides cannot drift. Dates and times are read in ``spoken_dates``, card data is
removed in ``redaction`` (both build on the digits read here).

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

The text is normalised first (``normalize``: lowercase, contractions spelled out) and an
amount said under a negation ("I can't pay 200") is marked ``negated``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# -- number words ----------------------------------------------------------------------

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


#: Month names and their numbers: a number after one is a day, not money.
MONTHS = {
    name: i + 1
    for i, names in enumerate(
        "january/jan february/feb march april/apr may june july august/aug september/sept "
        "october/oct november/nov december/dec".split()
    )
    for name in names.split("/")
}


# -- digits read out one by one ------------------------------------------------------

_DIGIT_WORDS = "oh|double|triple|" + "|".join([*_UNITS, *_TEENS, *_TENS])
DIGIT_ITEM = rf"(?:\d+|(?:{_DIGIT_WORDS})\b)"
# Digits read out one group after another: "4111 1111 ...", "four one one one,
# one one ...", "4111-1111-...", with the odd "uh" between groups.
DIGIT_RUN = rf"{DIGIT_ITEM}(?:[\s,.\-/]+(?:(?:uh|um|and)[\s,.\-]+)?{DIGIT_ITEM})*"
DIGIT_RUN_RE = re.compile(rf"(?<![\w$]){DIGIT_RUN}", re.I)


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


DIGITISH = {"oh", "double", "triple", *_UNITS, *_TEENS, *_TENS}


def digits_at(toks: list[Tok], j: int) -> tuple[str, int]:
    """The digits read out from ``toks[j]`` on, and where they stop."""
    parts: list[str] = []
    end = j
    while j < len(toks):
        t = toks[j]
        if t.kind == "num" and t.value is not None and "." not in t.text and not t.ordinal:
            parts.append(t.text.replace(",", ""))
        elif t.kind == "word" and t.text in DIGITISH:
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


def last_four(toks: list[Tok], expected: bool) -> tuple[str | None, set[int]]:
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
            if tk.kind == "num" or tk.text in DIGITISH and tk.text != "oh":
                digits, end = digits_at(toks, k)
                if len(digits) == 4:
                    return digits, set(range(i, end))
                break
    if expected:
        for k, tk in enumerate(toks):
            if tk.kind == "num" or tk.text in DIGITISH:
                digits, end = digits_at(toks, k)
                if len(digits) == 4:
                    return digits, set(range(k, end))
    return None, set()


def phone_number(redacted: str) -> str | None:
    """A US phone number read out (7, 10 or 11 digits, in groups)."""
    for m in DIGIT_RUN_RE.finditer(redacted.lower()):
        digits = "".join(digit_groups(m.group(0)))
        if len(digits) in (7, 10) or (len(digits) == 11 and digits.startswith("1")):
            return digits
    return None


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


def normalize(text: str) -> str:
    """Lowercase, contractions spelled out ("don't" -> "do not"), acronyms closed up."""
    s = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    s = s.replace("\u2014", ", ").replace("\u2013", ", ").replace("\u2026", ". ")
    s = _ACRONYM_RE.sub(lambda m: m.group(0).replace(".", "") + " ", s)
    s = _APOSTROPHE_WORD_RE.sub(_expand, s)
    s = _BARE_RE.sub(lambda m: _BARE_CONTRACTIONS[m.group(0)], s)
    s = _WORD_HYPHEN_RE.sub(" ", s)
    return _SPACES_RE.sub(" ", s).strip()


# -- negation: what a "not" governs -----------------------------------------------------

# Clauses: negation does not reach across them ("I can't pay, so stop calling").
_CLAUSE_SPLIT_RE = re.compile(
    r"[.,!?;:]+(?:\s|$)|\s-\s|\b(?:but|however|although|though|except|so(?=\s+\w))\b"
)
_NEGATORS = {"not", "never", "neither", "nor", "hardly"}
_SCOPE_BREAKS = {"and", "or", "then", "please"}
_PRONOUNS = {"i", "he", "she", "they", "we", "you", "it", "this", "that", "my", "his", "her"}
_NEGATION_WINDOW = 6


def clauses_of(normalized: str) -> list[str]:
    """``normalized`` cut into the clauses a negation does not reach across."""
    return [c.strip() for c in _CLAUSE_SPLIT_RE.split(normalized) if c and c.strip()]


def negated(clause: str, start: int) -> bool:
    """Whether a negation governs the phrase at ``start`` ("I don't dispute it")."""
    following = clause[start:].split()[:1]
    return negated_words(clause[:start].split(), following[0] if following else None)


def negated_words(before: list[str], following: str | None) -> bool:
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


_TOKEN_RE = re.compile(
    r"(?P<date>(?<![\d/])\d{1,4}[/-]\d{1,2}(?:[/-]\d{2,4})?(?![\d/]))"
    r"|(?P<dollar>\$\s?)?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<suffix>st|nd|rd|th|k)?\b"
    r"|(?P<word>[a-z]+(?:'[a-z]+)*|\[[a-z ]+\])"
    r"|(?P<sym>[$%])"
    r"|(?P<punct>[.,!?;:])"
)


@dataclass(frozen=True, slots=True)
class Tok:
    text: str
    kind: str  # "word", "num", "date", "sym", "punct"
    value: float | None = None
    ordinal: bool = False
    dollar: bool = False


def tokenize(normalized: str) -> list[Tok]:
    out: list[Tok] = []
    for m in _TOKEN_RE.finditer(normalized):
        kind = m.lastgroup or ""
        if m.group("num") is not None:
            raw = m.group("num")
            value = float(raw.replace(",", ""))
            suffix = m.group("suffix") or ""
            if suffix == "k":
                value *= 1000
            ordinal = suffix in ("st", "nd", "rd", "th")
            out.append(Tok(raw, "num", value, ordinal, dollar=bool(m.group("dollar"))))
        elif m.group("date") is not None:
            out.append(Tok(m.group("date"), "date"))
        elif m.group("word") is not None:
            out.append(Tok(m.group("word"), "word"))
        elif m.group("sym") is not None:
            out.append(Tok(m.group("sym"), "sym"))
        else:
            out.append(Tok(m.group(0), kind))
    return out


@dataclass(frozen=True, slots=True)
class Num:
    """A number in the token stream: tokens [first, end)."""

    value: float
    first: int
    end: int
    ordinal: bool = False
    spoken: bool = False
    two_digit: bool = False  # spoken as one teen or tens word (+ unit): "fifty", "twenty-five"
    dollar: bool = False


def _read_spoken(toks: list[Tok], i: int) -> Num | None:
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
    return Num(float(total + current), i, j, ordinal, spoken=True, two_digit=two_digit)


def read_numbers(toks: list[Tok]) -> list[Num]:
    nums: list[Num] = []
    i, n = 0, len(toks)
    while i < n:
        t = toks[i]
        if t.kind == "num" and t.value is not None:
            value, end = t.value, i + 1
            if not t.ordinal and end < n and toks[end].text in ("hundred", *_SCALES):
                value *= 100 if toks[end].text == "hundred" else _SCALES[toks[end].text]
                end += 1
            dollar = t.dollar or (i > 0 and toks[i - 1].text == "$")
            nums.append(Num(value, i, end, t.ordinal, dollar=dollar))
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
    toks = tokenize(normalize(text))
    nums = read_numbers(toks)
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


def _per(toks: list[Tok], j: int) -> tuple[str | None, int]:
    for phrase, per in _PER_PHRASES.items():
        if tuple(t.text for t in toks[j : j + len(phrase)]) == phrase:
            return per, j + len(phrase)
    return None, j


def _clause_start(toks: list[Tok], i: int) -> int:
    """Where the clause holding ``toks[i]`` starts, looking back no further than needed."""
    floor = max(0, i - _NEGATION_WINDOW - 2)
    while i > floor and toks[i - 1].kind != "punct" and toks[i - 1].text not in ("but", "so"):
        i -= 1
    return i


def _money_at(
    toks: list[Tok], nums: list[Num], k: int, expect_amount: bool
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
        if prev in MONTHS or not (offered or expect_amount):
            return None
    if value <= 0:
        return None
    negated = negated_words([t.text for t in toks[start : num.first]], toks[num.first].text)
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


def read_money(
    toks: list[Tok], nums: list[Num], expect_amount: bool, taken: set[int]
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
    toks = tokenize(normalize(text))
    return read_money(toks, read_numbers(toks), False, set())


_NUMBERISH = rf"(?:\$?\d[\d,.]*|{NUMBER_PATTERN})"
_RANGE_RE = re.compile(
    rf"\bbetween\s+{_NUMBERISH}.*\band\b|{_NUMBERISH}\s*(?:or|to|-)\s*\$?{_NUMBERISH}"
    r"|\b(?:or so|or more|or less|give or take|more or less|something like that)\b"
)


def amounts_ambiguous(found: list[Money], normalized: str) -> bool:
    """Two different amounts offered, or a range: which is meant must be asked."""
    said = {m.cents for m in found if (m.offered or m.marked) and not m.negated}
    return len(said) > 1 or (bool(said) and _RANGE_RE.search(normalized) is not None)


def choose_money(found: Iterable[Money]) -> Money | None:
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


_PERCENT_RE = re.compile(
    rf"(?P<n>\d+(?:\.\d+)?|{NUMBER_PATTERN})\s*(?:%|percent\b|per cent\b)(?P<after>[^.,;!?]*)"
)
_HALF_RE = re.compile(
    r"\b(?:settle for|pay|do|accept|take|give you|offer) (?:you )?half\b|\bhalf (?:off|of it|"
    r"the (?:balance|amount|debt))\b"
)
_PAY_PERCENT_RE = re.compile(r"\b(?:pay|settle for|offer|give you|do|accept|only)\s*(?:you\s+)?$")


def discount(normalized: str) -> float | None:
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


# -- a number of payments or months ------------------------------------------------------

_ONCE_RE = re.compile(
    r"\b(?:just |only )?once\b|\bone[- ]?time\b|\bone (?:single )?payment\b|\bsingle payment\b"
    r"|\blump sum\b|\ball at once\b|\bin one (?:go|shot|payment)\b|\bone[- ]off\b"
)
_COUNT_RE = re.compile(
    rf"\b(?:in|over|across|for|within)\s+(?:the next\s+)?(?P<n>\d+|{NUMBER_PATTERN}|a)\s*"
    r"(?P<unit>payments|installments|instalments|months|month|years|year)\b"
    rf"|\b(?P<n2>\d+|{NUMBER_PATTERN})\s*(?:monthly\s+)?(?P<unit2>payments|installments|instalments)\b"
)


def installments(normalized: str) -> int | None:
    for m in _COUNT_RE.finditer(normalized):
        raw = m.group("n") or m.group("n2")
        unit = m.group("unit") or m.group("unit2") or ""
        value = 1.0 if raw == "a" else parse_number(raw)
        if value is None or value != int(value) or value <= 0:
            continue
        return int(value) * (12 if unit.startswith("year") else 1)
    return None


def said_once(normalized: str) -> bool:
    """The amount is to be paid once: "just once", "one payment", "lump sum"."""
    return _ONCE_RE.search(normalized) is not None
