"""agent.campaigns.dialer against a real trunk (sipp as the UAS) and the real gate, on SQLite and
PostgreSQL.

Every dial is cleared by ``agent.campaigns.predial`` on the demo portfolio at a fixed time
(``T``); what the trunk received is read back from sipp's message log, so "not
dialed" means sipp saw no INVITE. Pacing runs on a virtual clock: no assertion
here depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from agent.campaigns.dialer import (
    Campaign,
    CampaignError,
    Conversation,
    Dialer,
    Pacer,
    load_campaign,
    read_campaign,
)
from agent.campaigns.portfolio import import_portfolio
from agent.config import Settings
from agent.console.audit import BY_CODE
from agent.console.tokens import Tokens
from agent.conversation.account import Account
from agent.runtime.context import AgentRuntime
from agent.runtime.embedded import ModelServers
from agent.server.app import converse, make_app
from agent.store.database import create_engine_for, upgrade
from agent.store.tables import Call, CallEvent, ContactAttempt, Debt
from telephony.sip.call import SipCall
from telephony.sip.transaction import Timers
from telephony.sip.ua import DialResult, SipEndpoint
from tests.test_sipp import free_udp_port

pytestmark = pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed")

DATA = Path(__file__).parent / "data"
SCENARIOS = Path(__file__).parent / "sipp"
#: Wednesday 2 December 2026: 13:00 in New York, 12:00 in Chicago, 10:00 in Seattle.
T = dt.datetime(2026, 12, 2, 18, 0, tzinfo=dt.UTC)
FAST = Timers(t1=0.1, t2=0.4, t4=0.5)

BOSTON = ("ACME-0001", "+16175550142")
DALLAS = ("OLDCO-7781", "+12145550199")
CHICAGO_CARD = ("ACME-0005", "+13125550123")
CHICAGO_MEDICAL = ("MEDI-9012", "+13125550123")
REPRESENTED = ("ACME-0006", "+14045550188")  # D6: the consumer has an attorney
SKIP_TRACED = ("ACME-0004", "+17185550144")  # D10: no consent
TOLL_FREE = "+18005550100"


@dataclass
class Trunk:
    """A sipp UAS standing in for the carrier's trunk, and the log of what it received."""

    uri: str
    log: Path

    def invites(self) -> dict[str, str]:
        """Call-ID -> Request-URI of every INVITE the trunk received (retransmissions once)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        found = re.findall(
            r"^\s*INVITE (sip:\S+) SIP/2\.0.*?^\s*Call-ID: *(\S+)", text, re.M | re.S
        )
        return {call_id: uri for uri, call_id in found}


@asynccontextmanager
async def trunk(tmp_path: Path, scenario: str, calls: int = 1, *extra: str) -> AsyncIterator[Trunk]:
    """sipp answering ``calls`` calls with ``scenario``; it must end cleanly after the block."""
    port = free_udp_port()
    log = tmp_path / f"{scenario}.{port}.log"
    command = [
        "timeout", "50", "sipp", "-sf", str(SCENARIOS / scenario),
        "-i", "127.0.0.1", "-p", str(port), "-m", str(calls),
        "-mi", "127.0.0.1", "-mp", str(free_udp_port()),
        "-timeout", "30s", "-timeout_error", "-nostdin", "-nd",
        "-trace_msg", "-message_file", str(log), *extra,
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        yield Trunk(f"sip:127.0.0.1:{port}", log)
    except BaseException:
        process.kill()
        await process.wait()
        raise
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    text = output.decode(errors="replace")
    assert process.returncode == 0, (
        f"sipp {scenario} failed ({process.returncode}):\n{text[-3000:]}"
    )


async def _decline(call: SipCall) -> None:
    await call.hang_up()


@pytest.fixture
async def endpoint() -> AsyncIterator[SipEndpoint]:
    ua = SipEndpoint("127.0.0.1", 0, on_call=_decline, timers=FAST)
    await ua.start()
    yield ua
    await ua.close()


@pytest.fixture
def portfolio(db_engine: Engine) -> Engine:
    """The store with the demo portfolio (tests/data/portfolio.csv) in it."""
    report = import_portfolio(db_engine, DATA / "portfolio.csv")
    assert not report.rejected
    return db_engine


def campaign(engine: Engine, *rows: tuple[str, str]) -> Campaign:
    text = "account_ref,number\n" + "".join(f"{ref},{number}\n" for ref, number in rows)
    return read_campaign(engine, text, "test")


async def hang_up(line: SipCall, account: Account) -> Conversation:
    await line.hang_up()
    return Conversation()


def dialer(engine: Engine, endpoint: SipEndpoint, at: Trunk, **options: Any) -> Dialer:
    defaults = {"converse": hang_up, "rate_per_s": 100.0, "ring_timeout_s": 1.0, "now": lambda: T}
    return Dialer(engine, endpoint, at.uri, **{**defaults, **options})


def attempts(engine: Engine) -> list[tuple[Any, ...]]:
    """(account_ref, number, outcome, counts, call_id) of every stored attempt, by id."""
    with Session(engine) as session:
        rows = session.execute(
            select(
                Debt.account_ref,
                ContactAttempt.number,
                ContactAttempt.outcome,
                ContactAttempt.counts,
                ContactAttempt.call_id,
            )
            .join(Debt, ContactAttempt.debt_id == Debt.id)
            .order_by(ContactAttempt.id)
        )
        return [tuple(row) for row in rows]


# -- outcomes ----------------------------------------------------------------


async def test_an_answered_call_is_conversed_on_with_the_debts_account(
    portfolio: Engine, endpoint: SipEndpoint, tmp_path: Path
) -> None:
    seen: list[tuple[str, str, str, int | None, str | None]] = []

    async def talk(line: SipCall, account: Account) -> Conversation:
        seen.append(
            (line.info.direction, line.state, account.consumer_name, account.debt_id,
             line.info.remote_number)
        )  # fmt: skip
        await asyncio.sleep(0.2)
        await line.hang_up()  # uas_answer.xml waits for our BYE
        return Conversation()

    async with trunk(tmp_path, "uas_answer.xml") as at:
        report = await dialer(portfolio, endpoint, at, converse=talk).run(
            campaign(portfolio, BOSTON)
        )
    with Session(portfolio) as session:
        debt_id = session.scalar(select(Debt.id).where(Debt.account_ref == BOSTON[0]))
    assert seen == [("outbound", "confirmed", "Maria Alvarez", debt_id, BOSTON[1])]
    assert list(at.invites().values()) == [f"sip:{BOSTON[1]}@{at.uri[4:]}"]
    [attempt] = report.attempts
    assert (attempt.outcome, attempt.rule, attempt.sip_status) == ("answered", "ok", 200)
    assert attempts(portfolio) == [(*BOSTON, "answered", True, None)]
    assert report.finished and report.outcomes() == {"answered": 1}


async def test_a_conversation_that_reached_voicemail_is_a_voicemail_attempt(
    portfolio: Engine, endpoint: SipEndpoint, tmp_path: Path
) -> None:
    async def voicemail(line: SipCall, account: Account) -> Conversation:
        return Conversation(disposition="voicemail_lcm_left")  # the dialer hangs up

    async with trunk(tmp_path, "uas_answer.xml") as at:
        report = await dialer(portfolio, endpoint, at, converse=voicemail).run(
            campaign(portfolio, BOSTON)
        )
    assert report.outcomes() == {"voicemail": 1}
    assert attempts(portfolio) == [(*BOSTON, "voicemail", True, None)]


@pytest.mark.parametrize(
    ("scenario", "outcome", "stored", "counts", "status"),
    [
        ("uas_busy.xml", "busy", "busy", False, 486),
        ("uas_ring.xml", "no_answer", "no_answer", True, 487),  # we CANCEL after the ring timeout
        ("uas_not_found.xml", "not_in_service", "not_in_service", False, 404),
        # The trunk failed it: recorded as failed, and it counts (whether it rang is unknown).
        ("uas_unavailable.xml", "failed", "failed", True, 503),
    ],
)
async def test_unanswered_outcomes_are_recorded_on_the_attempt(
    portfolio: Engine,
    endpoint: SipEndpoint,
    tmp_path: Path,
    scenario: str,
    outcome: str,
    stored: str,
    counts: bool,
    status: int,
) -> None:
    async def never(line: SipCall, account: Account) -> Conversation:
        raise AssertionError("an unanswered call has no conversation")

    async with trunk(tmp_path, scenario) as at:
        report = await dialer(portfolio, endpoint, at, converse=never).run(
            campaign(portfolio, BOSTON)
        )
    [attempt] = report.attempts
    assert (attempt.outcome, attempt.sip_status) == (outcome, status)
    assert attempts(portfolio) == [(*BOSTON, stored, counts, None)]


@pytest.mark.parametrize(
    ("timers", "ring_timeout_s"),
    [
        (FAST, 0.5),  # the ring timeout comes first
        (Timers(t1=0.01, t2=0.04, t4=0.05), 5.0),  # timer B (0.64 s) comes first
    ],
)
async def test_a_trunk_that_answers_nothing_fails_the_call_and_it_does_not_count(
    portfolio: Engine, tmp_path: Path, timers: Timers, ring_timeout_s: float
) -> None:
    """Nothing listens at the trunk's address (the ICMP port unreachable is dropped, as a
    lost datagram is): no phone rang, so D1 is not charged (docs/dialing.md)."""
    ua = SipEndpoint("127.0.0.1", 0, on_call=_decline, timers=timers)
    await ua.start()
    dead = Trunk(f"sip:127.0.0.1:{free_udp_port()}", tmp_path / "nothing.log")
    try:
        report = await dialer(portfolio, ua, dead, ring_timeout_s=ring_timeout_s).run(
            campaign(portfolio, BOSTON, DALLAS)
        )
    finally:
        await ua.close()
    assert report.outcomes() == {"failed": 2}
    assert all(
        a.sip_status is None and "no response to INVITE" in a.reason for a in report.attempts
    )
    # the two dials run side by side: either may be stored first
    assert sorted(attempts(portfolio)) == sorted(
        [(*BOSTON, "failed", False, None), (*DALLAS, "failed", False, None)]
    )


async def test_denied_entries_are_not_dialed_and_report_their_rule(
    portfolio: Engine, endpoint: SipEndpoint, tmp_path: Path
) -> None:
    entries = campaign(portfolio, REPRESENTED, SKIP_TRACED, BOSTON)
    async with trunk(tmp_path, "uas_busy.xml") as at:
        report = await dialer(portfolio, endpoint, at).run(entries)
    assert list(at.invites().values()) == [f"sip:{BOSTON[1]}@{at.uri[4:]}"]
    by_line = {a.entry.line: a for a in report.attempts}
    assert (by_line[2].outcome, by_line[2].rule) == ("denied", "D6")
    assert (by_line[3].outcome, by_line[3].rule) == ("denied", "D10")
    assert "attorney" in by_line[2].reason
    assert report.denials() == {"D6": 1, "D10": 1}
    assert report.outcomes() == {"denied": 2, "busy": 1}
    assert "3 entries: 1 busy, 2 denied; denied by D10 1, D6 1" in report.summary()
    assert attempts(portfolio) == [(*BOSTON, "busy", False, None)]  # denials reserve nothing
    table = report.table()
    assert "...0188" in table and REPRESENTED[1] not in table  # numbers masked
    assert "D6: " in table


# -- pace and concurrency ----------------------------------------------------


class VirtualTime:
    """A monotonic clock that only moves when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def wall(self) -> dt.datetime:
        return T + dt.timedelta(seconds=self.now)

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def test_dials_are_spaced_by_the_rate_and_a_denial_gives_its_slot_back(
    portfolio: Engine, tmp_path: Path
) -> None:
    time = VirtualTime()
    dialed: list[float] = []

    class Recording(SipEndpoint):
        async def invite(self, uri: str, **options: Any) -> DialResult:
            dialed.append(time.now)
            return await super().invite(uri, **options)

    ua = Recording("127.0.0.1", 0, on_call=_decline, timers=FAST)
    await ua.start()
    pacer = Pacer(2.0, clock=time.clock, sleep=time.sleep)
    entries = campaign(portfolio, BOSTON, REPRESENTED, DALLAS, CHICAGO_MEDICAL)
    try:
        async with trunk(tmp_path, "uas_busy.xml", 3) as at:
            run = dialer(portfolio, ua, at, pacer=pacer, concurrency=1, now=time.wall)
            report = await run.run(entries)
    finally:
        await ua.close()
    assert dialed == [0.0, 0.5, 1.0]
    assert report.outcomes() == {"busy": 3, "denied": 1}
    # The gate judged each call at the time it was placed, not when it was queued.
    with Session(portfolio) as session:
        stamped = session.scalars(select(ContactAttempt.at).order_by(ContactAttempt.id)).all()
    assert [at - T for at in stamped] == [dt.timedelta(seconds=s) for s in (0, 0.5, 1.0)]


async def test_no_more_calls_are_up_at_once_than_the_concurrency(
    portfolio: Engine, endpoint: SipEndpoint, tmp_path: Path
) -> None:
    live, peak, started = 0, 0, 0
    both_up = asyncio.Event()

    async def hold(line: SipCall, account: Account) -> Conversation:
        nonlocal live, peak, started
        live, started = live + 1, started + 1
        peak = max(peak, live)
        if live == 2:
            both_up.set()
        try:
            if started <= 2:  # the first two wait for each other: proof they overlap
                await asyncio.wait_for(both_up.wait(), 10)
            await asyncio.sleep(0.1)
        finally:
            live -= 1
        return Conversation()

    entries = campaign(portfolio, BOSTON, DALLAS, CHICAGO_CARD, CHICAGO_MEDICAL)
    async with trunk(tmp_path, "uas_answer.xml", 4) as at:
        report = await dialer(portfolio, endpoint, at, converse=hold, concurrency=2).run(entries)
    assert report.outcomes() == {"answered": 4}
    assert len(at.invites()) == 4
    assert peak == 2


def test_slots_given_back_are_reused_while_ahead_and_never_closer_than_the_interval() -> None:
    time = VirtualTime()
    pacer = Pacer(2.0, clock=time.clock, sleep=time.sleep)
    booked = [pacer.book() for _ in range(4)]  # four workers, before any gate answers
    assert booked == [0.0, 0.5, 1.0, 1.5]
    pacer.release(0.0)
    pacer.release(1.0)
    assert [pacer.book(), pacer.book(), pacer.book()] == [0.0, 1.0, 2.0]
    pacer.release(2.0)
    time.now = 2.1  # a slot not taken in time is gone: dialing it late could crowd the next
    assert pacer.book() == 2.5
    for rate in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="above 0"):
            Pacer(rate)


# -- the real agent on the call ----------------------------------------------


async def test_the_agent_holds_an_answered_call_about_the_debt(db_url: str, tmp_path: Path) -> None:
    settings = Settings.from_env({"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path)})
    async with AgentRuntime(settings, stub_models=True) as ctx:
        import_portfolio(ctx.engine, DATA / "portfolio.csv")
        app = make_app(ctx)  # not served: what `python -m agent dial` does
        ua = SipEndpoint("127.0.0.1", 0, on_call=_decline, timers=FAST)
        await ua.start()
        try:
            # The callee listens for 2 s to the greeting and hangs up.
            async with trunk(tmp_path, "uas_answer_bye.xml", 1, "-d", "2000") as at:
                run = dialer(ctx.engine, ua, at, converse=partial(converse, app))
                report = await run.run(campaign(ctx.engine, BOSTON))
        finally:
            await ua.close()
        [attempt] = report.attempts
        assert attempt.outcome == "answered" and attempt.call_id is not None
        assert attempts(ctx.engine) == [(*BOSTON, "answered", True, attempt.call_id)]
        with Session(ctx.engine) as session:
            call = session.get(Call, attempt.call_id)
            assert call is not None
            debt = session.get(Debt, call.debt_id) if call.debt_id else None
            greeting = session.scalar(
                select(CallEvent.detail).where(
                    CallEvent.call_id == call.id, CallEvent.kind == "greeting"
                )
            )
            assert (call.transport, call.direction, call.end_reason) == (
                "sip",
                "outbound",
                "caller_hung_up",
            )
            # The record names the number dialled and the campaign it was dialled for.
            assert (call.number, call.campaign) == (BOSTON[1], "test")
            assert debt is not None and debt.account_ref == BOSTON[0]
        assert greeting is not None and "Maria Alvarez" in greeting["text"]


# -- the campaign file -------------------------------------------------------


def test_the_example_campaign_resolves_against_the_demo_portfolio(portfolio: Engine) -> None:
    example = load_campaign(portfolio, DATA / "campaign.csv")
    assert example.name == "campaign.csv"
    assert [e.line for e in example.entries] == list(range(2, 10))
    assert {e.account_ref for e in example.entries} >= {BOSTON[0], REPRESENTED[0]}


def test_bad_campaign_rows_are_reported_with_their_lines_and_nothing_is_dialed(
    portfolio: Engine,
) -> None:
    text = (
        "Account_Ref,Number,note\n"
        "ACME-0001,+16175550142,fine\n"  # 2
        ",+16175550142,\n"  # 3
        "ACME-0001,617-555-0142,\n"  # 4
        "NOPE-1,+16175550142,\n"  # 5
        "ACME-0001,+1 617 555 0142,the same entry\n"  # 6
        "ACME-0002\n"  # 7
        "\n"
        'ACME-0002,"\n+1206",\n'  # 9-10
        "ACME-0002,,\n"  # 11
    )
    with pytest.raises(CampaignError) as caught:
        read_campaign(portfolio, text, "bad.csv")
    rejected = {row.line: row.reasons for row in caught.value.rejected}
    assert rejected == {
        3: ("account_ref is empty",),
        4: ("number '617-555-0142' is not a valid number in E.164 (+1...)",),
        5: ("account_ref 'NOPE-1' is not in the portfolio",),
        6: ("ACME-0001 +1 617 555 0142 is already on line 2",),
        7: ("the row has 1 fields, the header 3",),
        9: ("number '+1206' is not a valid number in E.164 (+1...)",),
        11: ("number is empty",),
    }
    assert "line(s) 3, 4, 5, 6, 7, 9, 11; nothing dialed" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("debt,phone\n1,+16175550142\n", "lacks the required column(s) account_ref, number"),
        ("account_ref,number\n\n", "no entries"),
        ("account_ref,number\x00\n", "binary file"),
    ],
)
def test_a_file_that_is_no_campaign_says_why(portfolio: Engine, text: str, message: str) -> None:
    with pytest.raises(CampaignError, match=re.escape(message)) as caught:
        read_campaign(portfolio, text, "x.csv")
    assert caught.value.rejected == ()


# -- the command line --------------------------------------------------------


def agent(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_dial_help_explains_the_options() -> None:
    done = agent("dial", "--help", env={})
    assert done.returncode == 0
    for option in ("--campaign FILE", "--rate", "--concurrency", "--trunk", "SIP_TRUNK"):
        assert option in done.stdout
    assert "dial" in agent("--help", env={}).stdout


def test_dial_without_a_trunk_or_with_a_bad_file_says_why(tmp_path: Path) -> None:
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}"}
    done = agent("dial", "--campaign", str(DATA / "campaign.csv"), env=env)
    assert done.returncode == 2
    assert "no trunk to dial through" in done.stderr and "SIP_TRUNK" in done.stderr
    bad = agent("dial", "--campaign", str(DATA / "campaign.csv"), "--trunk", "h:5060", env=env)
    assert bad.returncode == 2 and "not a sip: URI" in bad.stderr
    # The store has no portfolio: every row is reported, nothing is started.
    empty = agent("dial", "--campaign", str(DATA / "campaign.csv"), "--trunk", "sip:h", env=env)
    assert empty.returncode == 2
    assert "line 2: account_ref 'ACME-0001' is not in the portfolio" in empty.stderr


async def test_dial_places_the_campaign_and_prints_its_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    upgrade(url)
    engine = create_engine_for(url)
    import_portfolio(engine, DATA / "portfolio.csv")
    import_portfolio(engine, noon_now(tmp_path))
    engine.dispose()
    file = tmp_path / "campaign.csv"
    file.write_text(f"account_ref,number\n{REPRESENTED[0]},{REPRESENTED[1]}\nNOON-1,{TOLL_FREE}\n")
    async with await ModelServers.start(stub=True, log_dir=tmp_path) as models:
        env = {
            "PATH": "/usr/bin:/bin",
            "DATABASE_URL": url,
            "DATA_DIR": str(tmp_path),
            "STT_URL": models.stt_url,
            "LLM_URL": models.llm_url,
            "TTS_URL": models.tts_url,
        }
        async with trunk(tmp_path, "uas_answer_bye.xml", 1, "-d", "1000") as at:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agent", "dial", "--campaign", str(file), "--trunk", at.uri,
                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = (text.decode() for text in await asyncio.wait_for(process.communicate(), 90))
    assert process.returncode == 0, err[-3000:]
    lines = out.splitlines()
    assert lines[0].split() == ["line", "account", "number", "outcome", "detail"]
    assert lines[1].split()[:5] == ["2", REPRESENTED[0], "...0188", "denied", "D6:"]
    assert lines[2].split()[:5] == ["3", "NOON-1", "...0100", "answered", "SIP"]
    assert "campaign.csv: 2 entries: 1 answered, 1 denied; denied by D6 1" in lines[3]
    assert TOLL_FREE not in out + err  # numbers are masked in the table and the log


# -- the API -----------------------------------------------------------------


@asynccontextmanager
async def api(db_url: str, tmp_path: Path, **env: str) -> AsyncIterator[TestClient]:
    settings = Settings.from_env({"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path), **env})
    async with AgentRuntime(settings, stub_models=True) as ctx:
        import_portfolio(ctx.engine, DATA / "portfolio.csv")
        import_portfolio(ctx.engine, noon_now(tmp_path))
        token, _ = Tokens(ctx.engine).create(
            "tests", ("campaigns:write", "campaigns:read"), dt.datetime.now(dt.UTC), by=BY_CODE
        )
        headers = {"Authorization": f"Bearer {token}"}
        async with TestClient(TestServer(make_app(ctx)), headers=headers) as client:
            yield client


async def post_csv(client: TestClient, path: str, body: str | bytes) -> ClientResponse:
    return await client.post(path, data=body, headers={"Content-Type": "text/csv"})


def noon_now(tmp_path: Path) -> Path:
    """A portfolio of one debt (``NOON-1``) whose consumer it is about noon for right now.

    The server's dialer asks the gate at the real time; this consumer lives in the fixed
    offset zone where it is 12:00 now, on a toll-free number (which adds no zone, D4).
    """
    offset = 12 - dt.datetime.now(dt.UTC).hour
    offset += 24 if offset < -12 else 0
    zone = f"Etc/GMT{-offset:+d}"  # POSIX signs: Etc/GMT-3 is UTC+3
    path = tmp_path / "noon.csv"
    path.write_text(
        "consumer_ref,name,date_of_birth,address,city,state,time_zone,phones,account_ref,"
        "creditor,balance,statute_status,tenant_type,max_discount_pct,min_installment,"
        "max_term_months\n"
        f"C-NOON,Sam Noon,1980-01-01,1 Main St,Springfield,IL,{zone},"
        f"{TOLL_FREE}:personal:creditor_provided:2025-01-01,NOON-1,Acme Card Services,100.00,"
        "within,third_party_collector,30,25.00,6\n"
    )
    return path


async def test_the_api_needs_a_token_or_an_owner_and_a_campaign_type(
    db_url: str, tmp_path: Path
) -> None:
    env = {"SIP_PORT": "0", "SIP_TRUNK": "sip:127.0.0.1:9"}
    async with api(db_url, tmp_path, **env) as client:
        rows = "account_ref,number\nNOPE,+16175550142\n"
        anonymous = await client.post(
            "/api/campaigns", data=rows, headers={"Authorization": "", "Content-Type": "text/csv"}
        )
        assert anonymous.status == 401 and "Bearer" in (await anonymous.json())["error"]
        # A cross-site form can send text/plain without a preflight: never read as a campaign.
        plain = await client.post("/api/campaigns", data=rows)
        assert plain.status == 415
        as_json = await client.post(
            "/api/campaigns", json={"entries": [{"account_ref": "NOPE", "number": "+16175550142"}]}
        )
        assert as_json.status == 400
        assert (await as_json.json())["rejected"] == [
            {"entry": 0, "reasons": ["account_ref 'NOPE' is not in the portfolio"]}
        ]
        not_entries = await client.post("/api/campaigns", json=[1, 2])
        assert not_entries.status == 400 and "entries" in (await not_entries.json())["error"]
        for query, words in (("rate=1000000", "at most 5"), ("concurrency=100000", "MAX_CALLS")):
            bounded = await post_csv(client, f"/api/campaigns?{query}", rows)
            assert bounded.status == 400 and words in (await bounded.json())["error"]


async def test_the_api_needs_sip_and_a_trunk(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as client:
        response = await post_csv(client, "/api/campaigns", "account_ref,number\n")
        assert response.status == 503
        assert "SIP_PORT" in (await response.json())["error"]
        assert (await client.get("/api/campaigns/0123")).status == 404


async def test_the_api_dials_a_campaign_and_reports_progress(db_url: str, tmp_path: Path) -> None:
    port = free_udp_port()
    env = {"SIP_PORT": "0", "SIP_TRUNK": f"sip:127.0.0.1:{port}"}
    async with api(db_url, tmp_path, **env) as client:
        bad = await post_csv(client, "/api/campaigns", "account_ref,number\nNOPE,+16175550142\n")
        assert bad.status == 400
        body = await bad.json()
        assert body["rejected"] == [
            {"line": 2, "reasons": ["account_ref 'NOPE' is not in the portfolio"]}
        ]
        assert "nothing dialed" in body["error"]
        not_csv = await post_csv(client, "/api/campaigns", b"\xff\xfe")
        assert not_csv.status == 400 and "UTF-8" in (await not_csv.json())["error"]
        rate = await post_csv(client, "/api/campaigns?rate=0", "account_ref,number\n")
        assert rate.status == 400 and "above 0" in (await rate.json())["error"]

        command = [
            "timeout", "50", "sipp", "-sf", str(SCENARIOS / "uas_busy.xml"),
            "-i", "127.0.0.1", "-p", str(port), "-m", "1",
            "-timeout", "30s", "-timeout_error", "-nostdin", "-nd",
        ]  # fmt: skip
        sipp = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.DEVNULL)
        try:
            rows = f"account_ref,number\nACME-0006,+14045550188\nNOON-1,{TOLL_FREE}\n"
            created = await post_csv(client, "/api/campaigns?rate=5&concurrency=2", rows)
            assert created.status == 202
            started = await created.json()
            assert started["entries"] == 2
            progress: dict[str, Any] = {}
            for _ in range(300):
                progress = await (await client.get(started["url"])).json()
                if progress["finished"]:
                    break
                await asyncio.sleep(0.1)
            assert progress["finished"] and progress["id"] == started["id"]
            assert progress["outcomes"] == {"denied": 1, "busy": 1}, progress
            assert await asyncio.wait_for(sipp.wait(), 60) == 0
        finally:
            if sipp.returncode is None:
                sipp.kill()
                await sipp.wait()
    assert progress["denials"] == {"D6": 1}
    by_line = {a["line"]: a for a in progress["attempts"]}
    assert by_line[2]["rule"] == "D6" and by_line[2]["number"] == "...0188"
    assert (by_line[3]["outcome"], by_line[3]["sip_status"]) == ("busy", 486)
