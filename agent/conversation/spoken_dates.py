"""Dates and times as Whisper writes them, resolved against the consumer's local today.

Split from the intent rules so that reading a date is one thing with one set of rules: a
promise's date, a callback's day and time, and a date of birth are all read here, from the
tokens and numbers of ``spoken_numbers``.

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
- A clock time ("after six", "at 7 pm", "tonight") is the consumer's local time.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass, field

from agent.conversation.spoken_numbers import (
    DIGITISH,
    MONTHS,
    ORDINAL_WORDS,
    Num,
    Tok,
    digit_groups,
)

WEEKDAYS = {
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
BIRTH_CUES = {"born", "birth", "birthday", "dob", "birthdate"}


@dataclass(frozen=True, slots=True)
class Date:
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
    toks: list[Tok], num_at: dict[int, Num], j: int, today: dt.date
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


@dataclass
class _DateScan:
    """The dates found so far in ``toks``, and the tokens they took."""

    toks: list[Tok]
    num_at: dict[int, Num]
    today: dt.date
    found: list[Date] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    def day_num(self, j: int) -> Num | None:
        num = self.num_at.get(j)
        if num is None or num.dollar or num.value != int(num.value) or not 1 <= num.value <= 31:
            return None
        return num

    def add(self, day: dt.date | None, at: int, end: int, has_year: bool) -> None:
        if day is not None:
            span = tuple(range(at, end))
            self.found.append(Date(day, at, has_year, span))
            self.used.update(span)

    def calendar_at(self, i: int) -> None:
        """A calendar date at ``toks[i]``: "12/20", "December 20th", "the 5th of March 1980"."""
        toks, today, n = self.toks, self.today, len(self.toks)
        t = toks[i]
        w = t.text
        if t.kind == "date":
            day, has_year = _numeric_date(w, today)
            self.add(day, i, i + 1, has_year)
        elif w in MONTHS and t.kind == "word":
            j = i + 1 + (i + 1 < n and toks[i + 1].text == "the")
            num = self.day_num(j)
            if num is None:
                return
            year = _year_at(toks, self.num_at, num.end, today)
            end = year[1] if year else num.end
            self.add(
                _calendar_date(year[0] if year else None, MONTHS[w], int(num.value), today),
                i,
                end,
                year is not None,
            )
        elif (num := self.day_num(i)) is not None and num.end < n:
            # "the 5th of March 1980", "20th of December", "5th March"
            j = num.end + (toks[num.end].text == "of")
            if j < n and toks[j].text in MONTHS and (j > num.end or num.ordinal):
                year = _year_at(toks, self.num_at, j + 1, today)
                end = year[1] if year else j + 1
                month = MONTHS[toks[j].text]
                start = i - 1 if i > 0 and toks[i - 1].text == "the" else i
                self.add(
                    _calendar_date(year[0] if year else None, month, int(num.value), today),
                    start,
                    end,
                    year is not None,
                )

    def relative_at(self, i: int, expect_date: bool) -> None:
        """A day named at ``toks[i]`` relative to today: "the 15th", "tomorrow", "next Friday"."""
        toks, today, n = self.toks, self.today, len(self.toks)
        w = toks[i].text
        if w in ("the", "on", "by") and (num := self.day_num(i + 1)) is not None:
            follows = toks[num.end].text if num.end < n else ""
            if (num.ordinal or not num.spoken) and follows not in _NOT_A_DAY_AFTER:
                if follows == "of" and num.end + 1 < n and toks[num.end + 1].text in MONTHS:
                    return
                self.add(_next_day_of_month(today, int(num.value)), i, num.end, False)
        elif expect_date and (num := self.day_num(i)) is not None and num.ordinal:
            self.add(_next_day_of_month(today, int(num.value)), i, num.end, False)
        elif w in ("today", "tonight"):
            self.add(today, i, i + 1, False)
        elif w == "tomorrow":
            after = i >= 2 and toks[i - 1].text == "after" and toks[i - 2].text == "day"
            self.add(today + dt.timedelta(days=2 if after else 1), i, i + 1, False)
        elif w in WEEKDAYS:
            prev = toks[i - 1].text if i else ""
            if prev == "coming" and i >= 2 and toks[i - 2].text == "this":
                prev = "this"
            self.add(_weekday(today, WEEKDAYS[w], prev), i, i + 1, False)
        elif w == "in" and i + 2 < n:
            self.in_count_at(i)
        elif w == "week" and i + 2 < n and toks[i + 1].text == "from":
            if toks[i + 2].text in ("today", "now"):
                count = self.num_at.get(i - 1)
                weeks = count.value if count is not None else 1
                self.add(today + dt.timedelta(weeks=int(weeks)), i, i + 3, False)
        elif w == "end" and i + 2 < n and toks[i + 1].text == "of":
            self.end_of_month_at(i)

    def in_count_at(self, i: int) -> None:
        """ "in three days", "in a couple of weeks", "in a month"."""
        toks, today, n = self.toks, self.today, len(self.toks)
        count = self.num_at.get(i + 1)
        amount = count.value if count is not None else None
        j = count.end if count is not None else i + 2
        if toks[i + 1].text in ("a", "an"):
            amount = 1
        elif toks[i + 1].text == "couple":
            amount, j = 2, i + 2 + (i + 2 < n and toks[i + 2].text == "of")
        if amount is not None and j < n and amount == int(amount):
            unit = toks[j].text
            if unit in ("day", "days"):
                self.add(today + dt.timedelta(days=int(amount)), i, j + 1, False)
            elif unit in ("week", "weeks"):
                self.add(today + dt.timedelta(weeks=int(amount)), i, j + 1, False)
            elif unit in ("month", "months"):
                self.add(_add_months(today, int(amount)), i, j + 1, False)

    def end_of_month_at(self, i: int) -> None:
        """ "the end of the month", "the end of next month"."""
        toks, today, n = self.toks, self.today, len(self.toks)
        j = i + 2 + (toks[i + 2].text in ("the", "this"))
        if j < n and toks[j].text == "month":
            last = calendar.monthrange(today.year, today.month)[1]
            self.add(today.replace(day=last), i, j + 1, False)
        elif j + 1 < n and toks[j].text == "next" and toks[j + 1].text == "month":
            nxt = _add_months(today.replace(day=1), 1)
            last = calendar.monthrange(nxt.year, nxt.month)[1]
            self.add(nxt.replace(day=last), i, j + 2, False)


def read_dates(toks: list[Tok], nums: list[Num], today: dt.date, expect_date: bool) -> list[Date]:
    """Every date ``toks`` say, in order; a bare ordinal ("15th", "fifteenth") only
    when the agent just asked for a date (``expect_date``)."""
    scan = _DateScan(toks, {num.first: num for num in nums}, today)
    for i in range(len(toks)):
        if i not in scan.used:
            scan.calendar_at(i)
        if i not in scan.used:
            scan.relative_at(i, expect_date)
    scan.found.sort(key=lambda d: d.position)
    return scan.found


# -- dates of birth --------------------------------------------------------------------


def _two_digit_year(value: int, today: dt.date) -> int:
    """A year said in two digits, for a date of birth: the latest that makes an adult."""
    year = 2000 + value
    return year if year <= today.year - 16 else 1900 + value


def spoken_birth_date(toks: list[Tok], today: dt.date) -> tuple[dt.date | None, bool]:
    """A date of birth said as digits or numbers ("oh three twelve eighty four",
    "three five eighty", "March 5th 80"); and whether only part of one was given."""
    month = next((MONTHS[t.text] for t in toks if t.kind == "word" and t.text in MONTHS), None)
    said: list[str] = []
    for t in toks:
        if t.kind == "num" and "." not in t.text:
            said.append(t.text.replace(",", ""))
        elif t.kind == "word" and t.text in ORDINAL_WORDS:
            said.append(str(ORDINAL_WORDS[t.text]))
        elif t.kind == "word" and t.text in DIGITISH:
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


# -- clock times -----------------------------------------------------------------------

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


_EVENING_RE = re.compile(r"\b(?:tonight|this evening|in the evening|at night|this afternoon)\b")


def _hour(raw: str) -> int | None:
    value = int(raw) if raw.isdigit() else _HOUR_WORDS.get(raw)
    return value if value is not None and 0 <= value <= 23 else None


def time_named(normalized: str) -> tuple[dt.time | None, str | None]:
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
