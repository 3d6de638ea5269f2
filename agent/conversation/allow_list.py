"""The guard's allow-list: what the turn's instruction justifies an LLM sentence in saying.

The deny rules of ``agent.conversation.guard`` block what they recognise; what they do
not recognise would be spoken. So when the guard's context carries the turn's
``Instruction`` (the policy's reference text and the facts its stage allows), a
sentence must also be justified by it (rule ``allow:*``), and a whole response must
carry the reference's required content and add little it does not say. What an
instruction allows is worked out once per turn (``derive``); ``unjustified_sentence``
and ``unjustified_response`` name the first thing it does not allow. The figures of a
text (amounts, percentages, counts, ordinals, digit runs) are read here too
(``extract_figures``): they are what the allow-list compares most.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from pipecat.utils.string import match_endofsentence

from agent.conversation.account import Account, dollars
from agent.conversation.english import FOREIGN_WORDS, GENERIC_WORDS, STOP_WORDS, is_english, stem
from agent.conversation.spoken_numbers import (
    ORDINAL_WORDS,
    TENS_WORDS,
    UNIT_WORDS,
)


def split_sentences(text: str) -> list[str]:
    """``text`` cut where pipecat's sentence aggregation cuts it; the rest, unfinished, last."""
    sentences: list[str] = []
    rest = text
    while (end := match_endofsentence(rest)) > 0:
        if rest[:end].strip():
            sentences.append(rest[:end].strip())
        rest = rest[end:]
    if rest.strip():
        sentences.append(rest.strip())
    return sentences


#: Who the agent is and for whom it calls (rule C1): facts at every stage.
AGENT_NAME = "Riley"
AGENT_ROLE = "automated assistant"
#: The company, a fact only once the right party is verified (C1, C3).
COMPANY = "Northwind Recovery"


@dataclass(frozen=True)
class Instruction:
    """What the policy asked the LLM to say this turn, and what the stage lets it add.

    ``reference`` is the policy's own text (``Reply.phrase``); ``facts`` what the stage
    allows beyond it: before verification who is calling and for whom, after it also the
    balance, the creditor and the company. The envelope's limits are no fact of any
    stage: they are said only where the reference says them (a counter-offer)."""

    reference: str = ""
    facts: tuple[str, ...] = ()
    consumer: str = ""

    @classmethod
    def for_turn(cls, reference: str | None, account: Account, *, verified: bool) -> Instruction:
        facts = [AGENT_NAME, AGENT_ROLE, account.consumer_name]
        if verified:
            facts += [dollars(account.balance_cents), account.creditor, COMPANY]
        return cls(reference or "", tuple(f for f in facts if f.strip()), account.consumer_name)


# -- figures: amounts, percentages, numbers, dates ------------------------------------------


@dataclass(frozen=True)
class Figure:
    """A number in a text: ``money`` (dollars), ``percent`` or a plain ``number``."""

    kind: str
    value: float
    #: A number of something ("one month", "3 payments"): never justified by itself.
    counted: bool = False

    def __str__(self) -> str:
        if self.kind == "money":
            return f"amount ${self.value:,.2f}".replace(".00", "")
        return f"{self.kind} {self.value:g}"

    def satisfied_by(self, other: Figure) -> bool:
        """Whether ``other`` (in a response) states this figure (of the reference)."""
        if abs(other.value - self.value) > 1e-6:
            return False
        if self.kind == "percent":
            return other.kind == "percent"
        if self.kind == "money":
            return other.kind in ("money", "number")
        return True


_UNITS_W = UNIT_WORDS
_TENS_W = TENS_WORDS
_ORDINALS_W = ORDINAL_WORDS
_SCALES_W = {"hundred": 100, "thousand": 1_000, "million": 1_000_000}
_FRACTIONS_W = {"half": ("percent", 50.0), "quarter": ("percent", 25.0), "dozen": ("number", 12)}
_NUMBER_WORDS = frozenset([*_UNITS_W, *_TENS_W, *_ORDINALS_W, *_SCALES_W, *_FRACTIONS_W])
_NUM_WORD_ALT = "|".join(sorted((w for w in _NUMBER_WORDS if w != "second"), key=len, reverse=True))
_WORD_NUMBER_RE = re.compile(
    rf"\b(?:a\s+(?=hundred|thousand|million|half|quarter|dozen))?"
    rf"(?:{_NUM_WORD_ALT}|(?<=the )second|(?<=on )second)"
    rf"(?:(?:\s+and\s+|\s+|-)(?:{_NUM_WORD_ALT}))*\b"
)
_COMPOUND_RE = re.compile(
    r"(?<![\d$.,])\d+(?:\s?[-/:]\s?\d+)+(?!\d)|(?<![\d$.,])\d{3,}(?:[ .]\d{3,})+(?!\d)"
)
_DIGITS_RE = re.compile(
    r"(?P<cur>\$\s?)?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<ord>st|nd|rd|th)?\b"
)
_UNIT_AFTER_RE = re.compile(
    r"\s*(?:(?P<pct>%|percent\b|per\s+cent\b)|(?P<usd>dollars?\b|bucks\b|usd\b)"
    r"|(?P<cents>cents?\b)|(?P<count>(?:more\s+|other\s+|full\s+|monthly\s+|equal\s+)?"
    r"(?:days?|weeks?|months?|years?|payments?|instal+ments?|times)\b))"
)


def _word_number_values(phrase: str) -> list[float]:
    """The numbers a phrase of number words says: "eight hundred and forty" is one,
    "five five five" three."""
    values: list[float] = []
    total = current = 0.0
    last: str | None = None  # "unit", "ten", "scale"
    started = False

    def flush() -> None:
        nonlocal total, current, started, last
        if started:
            values.append(total + current)
        total = current = 0.0
        started, last = False, None

    for word in re.split(r"[\s-]+", phrase):
        if word in ("and", "a", ""):
            continue
        if word in _FRACTIONS_W:
            flush()
            values.append(_FRACTIONS_W[word][1])
            continue
        if word in _SCALES_W:
            scale = _SCALES_W[word]
            if scale == 100:
                current = (current or 1) * 100
            else:
                total += (current or 1) * scale
                current = 0
            started, last = True, "scale"
        elif word in _TENS_W or word in _ORDINALS_W and _ORDINALS_W[word] >= 20:
            value = _TENS_W.get(word) or _ORDINALS_W[word]
            if last in ("unit", "ten"):
                flush()
            current += value
            started, last = True, "ten"
        elif word in _UNITS_W or word in _ORDINALS_W:
            value = _UNITS_W[word] if word in _UNITS_W else _ORDINALS_W[word]
            if last == "unit" or (last == "ten" and value >= 10):
                flush()
            current += value
            started, last = True, "unit"
    flush()
    return values


#: "first" of something ("your first payment") is no date.
_FIRST_OF_RE = re.compile(r"\s+(?!of\b|day\b)[a-z]")


def extract_figures(s: str) -> tuple[list[Figure], list[str]]:
    """Every number in lower-cased ``s``: its figures, and its digit runs (phone
    numbers, "2026-12-05", "12/11") as their digits."""
    compounds = [re.sub(r"\D", "", m[0]) for m in _COMPOUND_RE.finditer(s)]
    s = _COMPOUND_RE.sub(" # ", s)
    figures: list[Figure] = []

    def figure(value: float, end: int, money: bool = False, ordinal: bool = False) -> Figure:
        if ordinal:  # a date ("on the fifth"), unless "first" of something
            first = value == 1 and _FIRST_OF_RE.match(s, end) is not None
            return Figure("ordinal", value, counted=not first)
        m = _UNIT_AFTER_RE.match(s, end)
        if m is not None and m["pct"]:
            return Figure("percent", value)
        if m is not None and m["cents"]:
            return Figure("money", round(value / 100, 2))
        if money or (m is not None and m["usd"]):
            return Figure("money", value)
        return Figure("number", value, counted=m is not None and m["count"] is not None)

    for m in _DIGITS_RE.finditer(s):
        value = float(m["num"].replace(",", ""))
        figures.append(figure(value, m.end(), bool(m["cur"]), ordinal=bool(m["ord"])))
    for m in _WORD_NUMBER_RE.finditer(s):
        values = _word_number_values(m[0])
        if not values:
            continue
        phrase_words = m[0].split()
        if phrase_words and phrase_words[-1] in _FRACTIONS_W:
            kind, _ = _FRACTIONS_W[phrase_words[-1]]
            figures.append(Figure(kind, values[-1]))
            values = values[:-1]
        ordinal = bool(phrase_words) and phrase_words[-1].split("-")[-1] in _ORDINALS_W
        for i, value in enumerate(values):
            last = i == len(values) - 1
            if last:
                figures.append(figure(value, m.end(), ordinal=ordinal))
            else:
                figures.append(Figure("number", value))
    return figures, compounds


# -- the instruction, derived once per turn -------------------------------------------------

#: Date and time words: each must come from the instruction.
_DATE_WORDS = frozenset(
    "january february march april june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow tonight "
    "yesterday weekend noon midnight morning afternoon evening weekly biweekly fortnightly "
    "daily yearly annually quarterly".split()
)
_DATE_PHRASE_RE = re.compile(
    r"\b(?:next|this|coming|following|last)\s+(?:week|month|year|weekend)\b"
    r"|\bmay\s+(?=\d|the\b|first|second|third|[a-z]+th\b)"
    r"|\b(?:a|one|two|three|\d+)\s+(?:day|week)s?\s+(?:from|after)\b"
    r"|\b(?:a\.m\.|p\.m\.|pm|o'clock)"
)
#: Words that end no finished sentence.
_DANGLING_RE = re.compile(
    r"\b(the|a|an|and|or|but|nor|your|my|our|their|his|of|because|if|than|with|to|from|by"
    r"|at|for)\W*$",
    re.I,
)
_TERMINAL_RE = re.compile(r"[.?!][\"'\u201d)]*\s*$")
_WORD_TOKEN_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
#: What a spoken sentence is made of: ASCII letters, digits and the punctuation of prose.
_SPEAKABLE_RE = re.compile(r"[A-Za-z0-9\s.,?!'\"$%:;/&()\-\u2013\u2014\u201c\u201d]")
_CODE_RE = re.compile(
    r"\b[a-z]+_[a-z_]+\b|https?:|www\.|\.(?:com|org|net|io)\b|\b(?:json|api|function|tool"
    r"|tools|arguments?|null)\b|\"\w+\"\s*:|\b(?:call state|your task|what you may say"
    r"|the caller just said|reference|instruction|system prompt)\b"
    r"|^\s*(?:agent|caller|user|assistant|system|riley|model)\s*:|\w\(|\(\s*\)",
    re.I,
)
_I = r"\b(?:i|we)(?:'m|'ll|'d|'ve)?"
_AUX = (
    r"(?:\s+(?:am|are|was|were|will|would|can|could|do|does|did|have|has|had|shall|should"
    r"|must|might|may|just|really|already|never|not|no|longer|don't|didn't|can't|cannot"
    r"|won't|wouldn't|couldn't|shouldn't|haven't|hadn't|isn't|aren't|need|needs|needed"
    r"|want|wanted|got|gotta|wanna|going|gonna|to|be|been|able|unable|trying|try|tried"
    r"|plan|planning|promise|agree|refuse|intend|also|only|still|even|actually|honestly"
    r"|definitely|probably|simply|totally|ever|ready|willing|happy|glad|like|love|prefer"
    r"|rather|hope|wish|expect|decided|decide|afraid|sure|forced|supposed|going|about))*"
)
_CONSUMER_VOICE_RES = (
    re.compile(
        rf"{_I}{_AUX}\s+(?:owe[ds]?|owing|pay|paid|paying|repay\w*|afford|dispute\w*|borrow\w*"
        r"|lost|broke|unemployed|bankrupt|filed|declared|end|hang|leave|quit)\b"
    ),
    re.compile(
        r"\bmy\s+(?:\w+\s+)?(?:balance|debts?|account|bills?|loans?|cards?|bank|payments?"
        r"|money|salary|wages?|paycheck|job|income|lawyer|attorney|wife|husband|spouse"
        r"|kids?|children|family|mother|father|mom|dad|rent|budget|finances|credit|birthday"
        r"|birth|last name|address|ssn|social|phone|number|date)\b"
    ),
    re.compile(r"\bmy name(?:'s| is)\s+(?!riley\b)"),
    re.compile(
        r"\b(?:call|calling|text|texting|email|contact|contacting|bother\w*|harass\w*|send"
        r"|mail|sue|leave)\s+me\b|\bme money\b|\bowe (?:me|us)\b"
    ),
    re.compile(
        r"\bwho (?:is|'s) (?:this|calling|it)\b|\bwho are you\b|\bwhat(?: is|'s) this"
        r" (?:about|regarding)\b|\bare you a (?:robot|bot|machine|computer|real|human|person)\b"
        r"|\bam i (?:talking|speaking) (?:to|with) (?:a|an|the|some|real)\b"
        r"(?! (?:person|member) (?:from|at|of))|\bhow did you get (?:my|this) number\b"
        r"|\b(?:you (?:have|'ve got|got)|this is) (?:the |a )?wrong number\b"
    ),
    re.compile(r"^\W*(?:yes\W+)?(?:speaking|this is (?:he|she|him|her|me))\b"),
)
#: The agent is an automated assistant (C1): never a person, never "not a robot".
_FALSE_IDENTITY_RE = re.compile(
    r"\bi(?:'m| am)\s+(?:not\s+)?(?:an?\s+)?(?:real\s+|live\s+|actual\s+)?(?:human|person"
    r"|man|woman|lady|guy|robot|bot|machine|computer|ai|agent|collector|employee|lawyer"
    r"|attorney)\b|\bnot\s+(?:an?\s+)?(?:robot|bot|machine|computer|automated|recording)\b"
    r"|\b(?:real|live)\s+(?:person|human)\s+(?:here|speaking)\b"
)
_ANSWER_RE = re.compile(
    r"^\W*(?:yes|yeah|yep|yup|no|nope|nah|correct|exactly|indeed|right|true|sure|certainly"
    r"|absolutely|definitely|of course)\b|\b(?:yes|yeah|yep|yup|nope)\b"
    r"|\bthat(?:'s| is) (?:right|correct|true)\b"
)
#: Words that say the same in a reply to the policy's questions: a paraphrase may
#: use any of a group where the reference uses one.
_SYNONYMS = tuple(
    frozenset(group.split())
    for group in (
        "smallest lowest least minimum minimal low small smaller lower",
        "payment payments pay paying amount sum money figure",
        "balance total owed full whole entire",
        "date day days when time",
        "debit card cards",
        "bank transfer",
        "check cheque",
        "spread split divide stretch over",
        "work works suit suits fit okay manageable doable possible workable",
        "call reach ring contact phone back",
        "catch hear heard understand understood get missed",
        "offer provide give set arrange arranged setup deal",
        "method way methods",
        "privacy security protect verify confirm identity",
        "birth birthday born",
        "speak talk speaking talking",
        "like prefer want would",
        "make do",
        "most maximum highest largest up",
    )
)


#: Words that state terms: a plan, a settlement, a charge, a way to pay. Each may be said
#: only where the instruction says a word of its family: a paraphrase of a settlement
#: offer never turns it into a plan, and no payment method is offered that was not.
_TERM_FAMILIES = tuple(
    frozenset(family.split())
    for family in (
        "installment installments instalment instalments plan plans monthly month months "
        "weekly week weeks biweekly",
        "settlement settlements settle settled settling discount discounted lump reduced "
        "reduce reduction forgive forgiven forgiveness waive waived",
        "interest fee fees charge charges penalty penalties surcharge",
        "debit",
        "credit",
        "card cards",
        "transfer transfers wire ach",
        "check checks cheque cheques",
        "cash",
        "paypal venmo zelle bitcoin crypto cryptocurrency autopay",
    )
)
_TERM_WORDS = {word: i for i, family in enumerate(_TERM_FAMILIES) for word in family}


@dataclass(frozen=True)
class Allowed:
    """What one instruction justifies, and what it requires of the response."""

    figures: frozenset[tuple[str, float]]
    text: str
    compounds: frozenset[str]
    words: frozenset[str]
    stems: frozenset[str]
    names: frozenset[str]
    required_figures: tuple[Figure, ...]
    reference_money: frozenset[float]
    required_compounds: tuple[str, ...]
    asks: bool
    key_terms: tuple[tuple[str, re.Pattern[str]], ...]
    answers: bool
    negations: int
    identity: tuple[re.Pattern[str], ...]
    families: frozenset[int]
    max_sentences: int
    max_words: int
    max_sentence_words: int

    def justifies(self, figure: Figure) -> bool:
        trivial = figure.value in (0.0, 1.0) and not figure.counted  # "no one", "one of"
        if figure.kind == "number":
            return trivial or any(abs(v - figure.value) < 1e-6 for _, v in self.figures)
        if figure.kind == "ordinal":  # a date: from a date or a count, not from an amount
            return trivial or any(
                abs(v - figure.value) < 1e-6 and k in ("number", "ordinal") for k, v in self.figures
            )
        return (figure.kind, figure.value) in self.figures


_NEGATION = r"n't\b|\bnot\b|\bcannot\b|\bnever\b|\bno\b"
#: A negation turns a sentence into its opposite: one the reference does not make is
#: never added ("you don't have to pay").
_NEGATION_RE = re.compile(_NEGATION)
#: Terms the reference's question turns on; a paraphrase that drops one asks something else.
_KEY_TERMS = (
    ("date of birth", r"\bdate of birth\b", r"\b(?:date of birth|birth ?date|birthday|born)\b"),
    ("last four", r"\blast (?:four|4)\b", r"\blast (?:four|4)\b"),
    ("debit card", r"\bdebit\b", r"\bdebit\b"),
    ("bank transfer", r"\bbank transfer\b", r"\b(?:bank|transfer)\b"),
    ("check", r"\bcheck\b(?! (?:in|on|out|with))", r"\bche(?:ck|que)s?\b"),
    ("date", r"\b(?:what|which) (?:date|day)\b", r"\b(?:date|day|when)\b"),
    ("time", r"\bgood time\b", r"\b(?:time|when)\b"),
    ("call back", r"\bcall you back\b", r"\b(?:call|reach|contact)\b"),
    ("how much", r"\bhow much\b", r"\b(?:how much|amount|what)\b"),
    ("one payment", r"\bone payment\b", r"\b(?:one|single|once|lump)\b"),
    ("monthly", r"\b(?:monthly|each month|a month|per month)\b", r"\bmonth(?:ly|s)?\b"),
    ("in full", r"\bin full\b", r"\b(?:full|whole|entire|all of it)\b"),
    ("payment plan", r"\bpayment plan\b", r"\b(?:plan|instal+ments?|monthly)\b"),
    # A refusal stays one: "I can't accept $300" never becomes "I can accept $300".
    ("the refusal", _NEGATION, _NEGATION + r"|\bunable\b|\btoo low\b"),
)


@lru_cache(maxsize=256)
def derive(instruction: Instruction) -> Allowed:
    """Everything the checks need from an instruction, worked out once per turn."""
    reference = instruction.reference.replace("\u2019", "'")
    texts = [reference, *instruction.facts]
    figures: set[tuple[str, float]] = set()
    compounds: set[str] = set()
    words: set[str] = set()
    for text in texts:
        found, runs = extract_figures(text.lower())
        figures.update(("count" if f.counted else f.kind, f.value) for f in found)
        compounds.update(runs)
        words.update(w.lower() for w in _WORD_TOKEN_RE.findall(text))
    stems = {stem(w) for w in words}
    families = frozenset(_TERM_WORDS[w] for w in words if w in _TERM_WORDS)
    for family in families:
        stems |= {stem(w) for w in _TERM_FAMILIES[family]}
    for group in _SYNONYMS:
        group_stems = {stem(w) for w in group}
        if stems & group_stems:
            stems |= group_stems
    ref = reference.lower()
    required, required_runs = extract_figures(ref)
    key_terms = [
        (label, re.compile(response))
        for label, in_reference, response in _KEY_TERMS
        if re.search(in_reference, ref)
    ]
    identity: list[re.Pattern[str]] = []
    names = [n for n in instruction.consumer.lower().split() if n]
    if names:
        first = re.escape(names[0])
        if re.search(rf"\b{first}\b", ref):
            key_terms.append((names[0], re.compile(rf"\b{first}\b")))
        alternatives = "|".join(re.escape(n) for n in names)
        identity.append(
            re.compile(
                rf"\b(?:i am|i'm|this is|it's|it is|here is|here's)\s+(?:{alternatives})\b"
                rf"|\b(?:{alternatives})\s+(?:here|speaking)\b"
            )
        )
    sentences = split_sentences(reference) if reference.strip() else []
    ref_words = len(_WORD_TOKEN_RE.findall(reference))
    longest = max((len(_WORD_TOKEN_RE.findall(s)) for s in sentences), default=0)
    capitalised = {w.lower() for t in texts for w in _WORD_TOKEN_RE.findall(t) if w[0].isupper()}
    return Allowed(
        figures=frozenset(figures),
        text=" | ".join(" ".join(t.lower().split()) for t in texts),
        compounds=frozenset(compounds),
        words=frozenset(words),
        stems=frozenset(stems),
        names=frozenset(capitalised),
        required_figures=tuple(dict.fromkeys(required)),
        reference_money=frozenset(f.value for f in required if f.kind == "money"),
        required_compounds=tuple(dict.fromkeys(required_runs)),
        asks="?" in reference,
        key_terms=tuple(key_terms),
        answers=_ANSWER_RE.search(ref) is not None,
        negations=len(_NEGATION_RE.findall(ref)),
        identity=tuple(identity),
        families=families,
        max_sentences=max(2, len(sentences) + 1),
        max_words=max(40, ref_words + 15),
        max_sentence_words=max(30, longest + 10),
    )


_ALWAYS_CAPITAL = frozenset({"i", "i'm", "i'll", "i'd", "i've", "ok", "okay"})


_CAPITAL_RUN_RE = re.compile(r"\b[A-Z][A-Za-z']*(?:[ \t]+[A-Z][A-Za-z']*)*")


def _unjustified_name(text: str, allowed: Allowed) -> str | None:
    """A capitalised name or organisation the instruction does not give.

    Capitalised words in a row are one name, which the instruction must give as such
    ("Capital One" is no "one"); the first word of a sentence is capitalised anyway,
    and is a name only if it is no English word."""
    for m in _CAPITAL_RUN_RE.finditer(text):
        initial = not text[: m.start()].strip(" \"'\u201c(")
        runs: list[list[str]] = [[]]
        for word in m[0].split():
            if word.lower() in _ALWAYS_CAPITAL:
                runs.append([])
            else:
                runs[-1].append(word)
        for i, run in enumerate(runs):
            if i == 0 and initial and run and _plain_word(run[0].lower(), allowed):
                run = run[1:]
            if len(run) == 1 and not _name_word(run[0].lower(), allowed):
                return run[0]
            if len(run) > 1 and " ".join(run).lower() not in allowed.text:
                return " ".join(run)
    return None


def _plain_word(word: str, allowed: Allowed) -> bool:
    """A sentence's first word that is capitalised only for being first."""
    return is_english(word) or word in allowed.words


def _name_word(word: str, allowed: Allowed) -> bool:
    """A capitalised word, alone, that the instruction gives (not as a number)."""
    if word in _ALWAYS_CAPITAL or word in _DATE_WORDS:  # dates are judged as dates
        return True
    return word in allowed.names or (word in allowed.words and word not in _NUMBER_WORDS)


def _unjustified_date(s: str, lower: list[str], allowed: Allowed) -> str | None:
    """A date or time word or phrase the instruction does not give."""
    for word in lower:
        if word in _DATE_WORDS and word not in allowed.words:
            return word
        if word.endswith("s") and word[:-1] in _DATE_WORDS and word[:-1] not in allowed.words:
            return word
    for m in _DATE_PHRASE_RE.finditer(s):
        phrase = m[0].strip()
        if not all(w in allowed.words for w in _WORD_TOKEN_RE.findall(phrase)):
            return phrase
    return None


_NOT_CONTENT = (
    STOP_WORDS
    | GENERIC_WORDS
    | _NUMBER_WORDS
    | {
        "dollar",
        "dollars",
        "bucks",
        "percent",
        "cents",
        "cent",
    }
)


def _is_content(word: str) -> bool:
    return word not in _NOT_CONTENT and not word.endswith("'s") and len(word) > 1


def unjustified_sentence(sentence: str, allowed: Allowed) -> tuple[str, str] | None:
    """What in ``sentence`` the turn's instruction does not justify: the rule and why;
    None when it justifies everything."""
    text = sentence.strip().replace("\u2019", "'").replace("\u2018", "'")
    if m := _CODE_RE.search(text):
        return ("code", f"code, markup or a tool name ({m.group(0)})")
    for ch in text:
        if not _SPEAKABLE_RE.match(ch):
            if ch.isalpha():
                return ("script", f"not English script ({ch!r})")
            return ("code", f"a character not spoken ({ch!r})")
    if not _TERMINAL_RE.search(text) or "..." in text or "\u2026" in text:
        return ("truncated", "the sentence does not end")
    tokens = _WORD_TOKEN_RE.findall(text)
    lower = [t.lower() for t in tokens]
    if m := _DANGLING_RE.search(text):
        return ("truncated", f"the sentence ends on {m[1]!r}")
    if len(tokens) > allowed.max_sentence_words:
        reason = f"{len(tokens)} words in one sentence (at most {allowed.max_sentence_words})"
        return ("length", reason)
    s = text.lower()
    for pattern in (*_CONSUMER_VOICE_RES, *allowed.identity):
        if (m := pattern.search(s)) and m[0] not in allowed.text:
            return ("consumer-voice", f"speaks as the consumer ({m[0]})")
    if (m := _FALSE_IDENTITY_RE.search(s)) and m[0] not in allowed.text:
        reason = f"says it is not an automated assistant ({m[0]})"
        return ("identity", reason)
    if (m := _ANSWER_RE.search(s)) and not allowed.answers:
        reason = f"an answer the reference does not give ({m[0].strip()})"
        return ("answer", reason)
    for word in lower:
        if word in FOREIGN_WORDS:
            return ("language", f"not English ({word})")
    if (name := _unjustified_name(text, allowed)) is not None:
        return ("name", f"a name not in the instruction ({name})")
    for word in lower:
        if word not in allowed.words and not is_english(word):
            return ("language", f"not an English word ({word})")
    for word in lower:
        family = _TERM_WORDS.get(word)
        if family is not None and family not in allowed.families:
            return ("term", f"a term not in the instruction ({word})")
    if (date := _unjustified_date(s, lower, allowed)) is not None:
        return ("figure", f"a date not in the instruction ({date})")
    figures, compounds = extract_figures(s)
    for compound in compounds:
        if compound not in allowed.compounds:
            return ("figure", f"a number not given ({compound})")
    for figure in figures:
        if not allowed.justifies(figure):
            return ("figure", f"{figure} is not in the instruction")
    return None


def unjustified_response(sentences: list[str], allowed: Allowed) -> tuple[str, str] | None:
    """What the response as a whole breaks (its length, the reference's required content,
    how much it adds that the reference does not say): the rule and why, or None."""
    text = " ".join(sentences)
    words = _WORD_TOKEN_RE.findall(text)
    if len(sentences) > allowed.max_sentences or len(words) > allowed.max_words:
        reason = (
            f"{len(sentences)} sentences, {len(words)} words "
            f"(at most {allowed.max_sentences}, {allowed.max_words})"
        )
        return ("length", reason)
    s = text.lower().replace("\u2019", "'")
    figures, compounds = extract_figures(s)
    for need in allowed.required_figures:
        if not any(need.satisfied_by(f) for f in figures):
            return ("required", f"the reference's {need} is missing")
    for compound in allowed.required_compounds:
        if compound not in compounds:
            return ("required", f"the reference's {compound} is missing")
    if allowed.asks and "?" not in text:
        return ("required", "the reference's question is not asked")
    for label, pattern in allowed.key_terms:
        if not pattern.search(s):
            return ("required", f"the reference's {label!r} is missing")
    negations = _NEGATION_RE.findall(s)
    if len(negations) > allowed.negations:
        reason = f"a negation the reference does not make ({negations[-1].strip()})"
        return ("unsupported", reason)
    content = [w for w in (t.lower() for t in words) if _is_content(w)]
    novel = sorted({w for w in content if stem(w) not in allowed.stems})
    if len(novel) > max(1, len(content) // 3):
        reason = f"adds what the reference does not say ({', '.join(novel[:6])})"
        return ("unsupported", reason)
    for sentence in sentences:  # nor any one sentence of its own
        own = [w.lower() for w in _WORD_TOKEN_RE.findall(sentence) if _is_content(w.lower())]
        new = [w for w in own if stem(w) not in allowed.stems]
        if len(own) >= 2 and 2 * len(new) > len(own):
            reason = f"a sentence the reference does not say ({sentence})"
            return ("unsupported", reason)
    return None
