"""Outbound dialing: a campaign of (debt, number) entries, placed through the SIP trunk.

Every entry asks the pre-dial gate first (``agent.campaigns.predial.reserve_attempt``): a
denial is reported with its rule and never dialed; an allowed entry holds a
counted attempt, is dialed at ``sip:{number}@{trunk}``, and its outcome is
recorded on that attempt (D3 decides which outcomes count; a trunk that answered
nothing at all placed no call, and its ``failed`` attempt does not count). An
answered call is handed to the caller's ``converse`` with the debt's own account,
and a conversation that reached a voicemail box is recorded as voicemail.

Dials are paced (at most ``rate_per_s`` a second, evenly spaced) and bounded
(``concurrency`` entries in flight). The gate judges each call at the moment
it will be placed, so a wait for the pace never carries a call past the end of
the calling hours. A campaign file with a bad row is refused whole, with every
bad row's line and reasons, so that fixing and re-running it never re-dials
half of it. The format is in docs/dialing.md.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import heapq
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.campaigns import csvfile
from agent.campaigns.contact_history import record_outcome
from agent.campaigns.contact_rules import masked
from agent.campaigns.portfolio import RowError, account_for, to_e164
from agent.campaigns.predial import Decision, DialRequest, reserve_attempt
from agent.conversation.account import Account
from agent.store.tables import AttemptOutcome, Debt
from telephony.sip.call import SipCall
from telephony.sip.message import uri_host_port
from telephony.sip.ua import DialResult, SipEndpoint

logger = logging.getLogger(__name__)

#: Columns every campaign file has.
REQUIRED_COLUMNS = ("account_ref", "number")
DEFAULT_RATE_PER_S = 1.0
DEFAULT_CONCURRENCY = 4
#: How long a call may ring before it is cancelled as unanswered: long enough for a
#: voicemail box to pick up.
DEFAULT_RING_TIMEOUT_S = 30.0

#: An entry the gate refused: not dialed, nothing recorded.
DENIED = "denied"
#: Dialed, but the trunk or the network failed the call. It counts (the gate fails closed)
#: unless the trunk answered nothing at all: then no phone rang (``DialResult.reached``).
FAILED = AttemptOutcome.FAILED.value

#: Final statuses that say the number does not exist (any more): not counted (D3).
NOT_IN_SERVICE_STATUSES = frozenset({404, 410, 484, 604})
#: The policy's dispositions of a call that reached a voicemail box (docs/compliance.md,
#: "Dispositions").
VOICEMAIL_DISPOSITIONS = frozenset({"voicemail_lcm_left", "voicemail_no_message"})
#: How the UA's unanswered outcomes are recorded; anything else is ``failed``.
_DIAL_OUTCOMES = {"busy": AttemptOutcome.BUSY.value, "no_answer": AttemptOutcome.NO_ANSWER.value}


class CampaignError(ValueError):
    """A campaign that cannot be dialed as given; nothing of it is dialed.

    ``rejected`` lists the bad rows (empty when the file as a whole is wrong).
    """

    def __init__(self, message: str, rejected: Sequence[RowError] = ()) -> None:
        super().__init__(message)
        self.rejected = tuple(rejected)


@dataclass(frozen=True)
class CampaignEntry:
    """One call to place: a debt of the portfolio, and the number to call about it."""

    line: int
    account_ref: str
    debt_id: int
    #: E.164.
    number: str


@dataclass(frozen=True)
class Campaign:
    name: str
    entries: tuple[CampaignEntry, ...]


def load_campaign(engine: Engine, path: str | Path) -> Campaign:
    """The campaign CSV at ``path``, checked against the portfolio; see ``read_campaign``."""
    path = Path(path)
    return read_campaign(engine, csvfile.read_text(path, "campaign", CampaignError), path.name)


def read_campaign(engine: Engine, text: str, name: str) -> Campaign:
    """Parse a campaign CSV (``account_ref,number``) and resolve its debts in the store.

    Raises ``CampaignError`` when the file is not a campaign, is empty, or has
    any bad row (every reason of every bad row is in ``rejected``).
    """
    rows: list[tuple[int, str, str]] = []
    rejected: list[RowError] = []
    seen: dict[tuple[str, str], int] = {}
    for line, raw, problem in csvfile.rows(text, name, "campaign", CampaignError, REQUIRED_COLUMNS):
        reasons = [problem] if problem else []
        account_ref, number = raw.get("account_ref", ""), raw.get("number", "")
        number_e164 = None
        if not problem:
            if not account_ref:
                reasons.append("account_ref is empty")
            number_e164 = to_e164(number) if number else None
            if not number:
                reasons.append("number is empty")
            elif number_e164 is None:
                reasons.append(f"number {number!r} is not a valid number in E.164 (+1...)")
        if number_e164 is not None and (account_ref, number_e164) in seen:
            reasons.append(
                f"{account_ref} {number} is already on line {seen[account_ref, number_e164]}"
            )
        if reasons or number_e164 is None:
            rejected.append(RowError(line, tuple(reasons)))
            continue
        seen[account_ref, number_e164] = line
        rows.append((line, account_ref, number_e164))

    debts = _debt_ids(engine, {ref for _line, ref, _number in rows})
    entries = []
    for line, account_ref, number in rows:
        if account_ref not in debts:
            rejected.append(
                RowError(line, (f"account_ref {account_ref!r} is not in the portfolio",))
            )
        else:
            entries.append(CampaignEntry(line, account_ref, debts[account_ref], number))
    if rejected:
        rejected.sort(key=lambda error: error.line)
        lines = ", ".join(str(error.line) for error in rejected)
        raise CampaignError(f"{name}: bad row(s) on line(s) {lines}; nothing dialed", rejected)
    if not entries:
        raise CampaignError(f"{name}: no entries to dial")
    return Campaign(name, tuple(entries))


def _debt_ids(engine: Engine, refs: set[str]) -> dict[str, int]:
    """Debt ids by ``account_ref``, for the refs the store holds."""
    found: dict[str, int] = {}
    ordered = sorted(refs)
    with Session(engine) as session:
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            query = select(Debt.account_ref, Debt.id).where(Debt.account_ref.in_(chunk))
            found.update({ref: id_ for ref, id_ in session.execute(query)})
    return found


# -- what a campaign run reports ---------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """What became of one entry: denied (with the gate's rule) or dialed, and how it ended.

    ``outcome`` is ``denied``, an ``AttemptOutcome`` value or ``failed``;
    ``rule`` is the gate's (``ok`` when dialed).
    """

    entry: CampaignEntry
    outcome: str
    rule: str
    reason: str
    attempt_id: int | None = None
    call_id: str | None = None
    sip_status: int | None = None
    next_allowed_at: dt.datetime | None = None

    @property
    def detail(self) -> str:
        """The rule and when it lifts for a denial; the SIP status and the call otherwise."""
        if self.outcome == DENIED:
            lifts = self.next_allowed_at
            return f"{self.rule}: {self.reason}" + (
                f", next allowed {lifts.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC" if lifts else ""
            )
        parts = [f"SIP {self.sip_status}" if self.sip_status else self.reason]
        if self.call_id:
            parts.append(f"call {self.call_id}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.entry.line,
            "account_ref": self.entry.account_ref,
            "number": masked(self.entry.number),
            "outcome": self.outcome,
            "rule": self.rule,
            "reason": self.reason,
            "attempt_id": self.attempt_id,
            "call_id": self.call_id,
            "sip_status": self.sip_status,
            "next_allowed_at": self.next_allowed_at.isoformat() if self.next_allowed_at else None,
        }


@dataclass
class CampaignReport:
    """A campaign run so far: its attempts in the order they finished, and the tallies."""

    campaign: str
    entries: int
    attempts: list[Attempt] = field(default_factory=list)
    finished: bool = False

    def outcomes(self) -> Counter[str]:
        return Counter(attempt.outcome for attempt in self.attempts)

    def denials(self) -> Counter[str]:
        """Denied entries by the rule that denied them."""
        return Counter(a.rule for a in self.attempts if a.outcome == DENIED)

    def summary(self) -> str:
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.outcomes().items()))
        rules = ", ".join(f"{rule} {n}" for rule, n in sorted(self.denials().items()))
        done = "" if self.finished else f" ({len(self.attempts)} done so far)"
        denied = f"; denied by {rules}" if rules else ""
        return f"{self.campaign}: {self.entries} entries{done}: {counts or 'none yet'}{denied}"

    def table(self) -> str:
        """One line per attempt in file order; numbers masked to their last four digits."""
        rows = [("line", "account", "number", "outcome", "detail")]
        for a in sorted(self.attempts, key=lambda attempt: attempt.entry.line):
            row = (str(a.entry.line), a.entry.account_ref, masked(a.entry.number), a.outcome)
            rows.append((*row, a.detail))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[4]
            for row in rows
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "entries": self.entries,
            "finished": self.finished,
            "outcomes": dict(self.outcomes()),
            "denials": dict(self.denials()),
            "attempts": [attempt.to_json() for attempt in self.attempts],
        }


# -- pacing ------------------------------------------------------------------


class Pacer:
    """Fixed spacing of dials: at most ``rate_per_s`` a second, one every ``1/rate_per_s`` s.

    ``book()`` reserves a start time without waiting, so the gate can judge a
    call at the time it will be placed; ``wait(slot)`` sleeps until then;
    ``release(slot)`` gives back a slot the gate denied, and the next ``book()``
    takes it while it is still ahead, so denials do not slow a campaign down.
    Every slot ever handed out lies on one grid spaced by the interval, so
    reusing one never brings two dials closer. ``clock`` and ``sleep`` are for tests.
    """

    def __init__(
        self,
        rate_per_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not 0 < rate_per_s < math.inf:
            raise ValueError(f"the dialing rate must be above 0 per second, got {rate_per_s}")
        self.interval = 1.0 / rate_per_s
        self.clock, self._sleep = clock, sleep
        self._last: float | None = None
        #: Slots given back, earliest first.
        self._free: list[float] = []

    def book(self) -> float:
        now = self.clock()
        while self._free and self._free[0] < now:
            heapq.heappop(self._free)  # passed unused
        if self._free:
            return heapq.heappop(self._free)
        slot = now if self._last is None else max(now, self._last + self.interval)
        self._last = slot
        return slot

    def release(self, slot: float) -> None:
        heapq.heappush(self._free, slot)

    def delay(self, slot: float) -> float:
        return max(0.0, slot - self.clock())

    async def wait(self, slot: float) -> None:
        delay = self.delay(slot)
        if delay > 0:
            await self._sleep(delay)


# -- dialing -----------------------------------------------------------------


@dataclass(frozen=True)
class Conversation:
    """What an answered call's conversation leaves for its attempt's record."""

    #: The stored call (``calls.id``), linked from the attempt; None if none was stored.
    call_id: str | None = None
    #: The policy's disposition; a voicemail disposition makes the attempt ``voicemail``.
    disposition: str | None = None


#: Holds the conversation on an answered call about the account's debt; the dialer hangs
#: the call up afterwards if it is still up.
Converse = Callable[[SipCall, Account], Awaitable[Conversation]]


def trunk_address(trunk: str) -> str:
    """``host:port`` of a trunk's ``sip:`` URI, where the calls go; ValueError if it has none."""
    host, port = uri_host_port(trunk)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Dialer:
    """Places a campaign's calls through ``endpoint`` to ``trunk``, each cleared by the gate."""

    def __init__(
        self,
        engine: Engine,
        endpoint: SipEndpoint,
        trunk: str,
        *,
        converse: Converse,
        rate_per_s: float = DEFAULT_RATE_PER_S,
        concurrency: int = DEFAULT_CONCURRENCY,
        ring_timeout_s: float = DEFAULT_RING_TIMEOUT_S,
        pacer: Pacer | None = None,
        now: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self._trunk = trunk_address(trunk)
        self._engine, self._endpoint, self._converse = engine, endpoint, converse
        self._pacer = pacer or Pacer(rate_per_s)
        self._concurrency = concurrency
        self._ring_timeout_s = ring_timeout_s
        self._now = now

    def uri(self, number: str) -> str:
        return f"sip:{number}@{self._trunk}"

    async def run(self, campaign: Campaign, report: CampaignReport | None = None) -> CampaignReport:
        """Attempt every entry (in file order, ``concurrency`` at a time); the report as it ends.

        ``report`` is filled in as attempts finish, for whoever watches progress.
        """
        report = report or CampaignReport(campaign.name, len(campaign.entries))
        entries = iter(campaign.entries)

        async def worker() -> None:
            for entry in entries:
                attempt = await self._attempt(entry, campaign.name)
                report.attempts.append(attempt)
                logger.info(
                    "campaign %s line %d: debt %s, %s: %s (%s)",
                    campaign.name,
                    entry.line,
                    entry.debt_id,
                    masked(entry.number),
                    attempt.outcome,
                    attempt.rule if attempt.outcome == DENIED else attempt.detail,
                )

        workers = min(self._concurrency, len(campaign.entries))
        logger.info(
            "campaign %s: %d entries via %s, %.2f/s, %d at a time",
            campaign.name,
            len(campaign.entries),
            self._trunk,
            1.0 / self._pacer.interval,
            workers,
        )
        try:
            await asyncio.gather(*(worker() for _ in range(workers)))
        finally:
            report.finished = True
            logger.info("campaign %s", report.summary())
        return report

    async def _attempt(self, entry: CampaignEntry, campaign: str) -> Attempt:
        slot = self._pacer.book()
        at = self._now() + dt.timedelta(seconds=self._pacer.delay(slot))
        try:
            request = DialRequest(entry.debt_id, entry.number, at)
            decision = await asyncio.to_thread(reserve_attempt, self._engine, request)
        except Exception as exc:
            # The gate could not answer (the database is down, say): fail closed.
            logger.exception("pre-dial gate failed on debt %s", entry.debt_id)
            decision = Decision(False, "error", f"the gate could not be asked ({exc})")
        if not decision.allowed or decision.attempt_id is None:
            self._pacer.release(slot)
            return Attempt(
                entry,
                DENIED,
                decision.rule,
                decision.reason,
                next_allowed_at=decision.next_allowed_at,
            )

        await self._pacer.wait(slot)
        try:
            result = await self._endpoint.invite(
                self.uri(entry.number), ring_timeout=self._ring_timeout_s
            )
        except Exception as exc:
            logger.exception("dialing debt %s failed", entry.debt_id)
            result = DialResult("failed", reason=f"{type(exc).__name__}: {exc}")
        conversation = Conversation()
        if result.call is not None:
            conversation = await self._hold(result.call, entry, campaign)
        outcome = _outcome(result, conversation)
        try:
            await asyncio.to_thread(
                record_outcome,
                self._engine,
                decision.attempt_id,
                outcome,
                conversation.call_id,
                reached=result.reached,
            )
        except Exception:
            # The attempt stays ``dialing``, which counts: the gate errs on the safe side.
            logger.exception("attempt %s: %s not recorded", decision.attempt_id, outcome)
        return Attempt(
            entry,
            outcome,
            decision.rule,
            result.reason,
            attempt_id=decision.attempt_id,
            call_id=conversation.call_id,
            sip_status=result.status,
        )

    async def _hold(self, call: SipCall, entry: CampaignEntry, campaign: str) -> Conversation:
        """The conversation on an answered call, with the debt's own account; the call's
        record names the campaign."""
        call.info = replace(call.info, campaign=campaign)
        try:
            account = await asyncio.to_thread(self._account, entry.debt_id)
            return await self._converse(call, account)
        except Exception:
            logger.exception("the conversation on debt %s failed", entry.debt_id)
            return Conversation()
        finally:
            await call.hang_up()

    def _account(self, debt_id: int) -> Account:
        with Session(self._engine) as session:
            return account_for(session, debt_id)


def _outcome(result: DialResult, conversation: Conversation) -> str:
    if result.outcome == "answered":
        if conversation.disposition in VOICEMAIL_DISPOSITIONS:
            return AttemptOutcome.VOICEMAIL.value
        return AttemptOutcome.ANSWERED.value
    if result.status in NOT_IN_SERVICE_STATUSES:
        return AttemptOutcome.NOT_IN_SERVICE.value
    return _DIAL_OUTCOMES.get(result.outcome, FAILED)
