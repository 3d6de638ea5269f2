"""The phrase-mode audit (``tools.bench_phrase``) against scripted LLM servers."""

from __future__ import annotations

from aiohttp import web

from agent.conversation.scenarios import builtin_scenarios
from infra.stub_server import create_app
from tools.bench_phrase import phrase_audit, report_section


async def audit_with(reply: str):
    """The audit of two negotiating scenarios, the LLM always answering ``reply``."""
    runner = web.AppRunner(create_app(reply=reply), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    scenarios = [builtin_scenarios()[name] for name in ("pays_in_full", "wrong_number")]
    try:
        return await phrase_audit(f"http://127.0.0.1:{port}/v1", scenarios, model="stub")
    finally:
        await runner.cleanup()


async def test_an_llm_that_says_what_it_likes_is_never_spoken():
    audit = await audit_with("I do not owe it. Call 1026-12-05 and ask for Wells Fargo.")
    totals = audit.totals()
    assert totals["phrased turns"] >= 1 and totals["sentences generated"] >= 2
    assert totals["sentences spoken"] == 0 and totals["violations"] == 0
    assert totals["sentences blocked"] == totals["sentences generated"]
    [turn] = audit.scenarios[0].turns
    assert turn.fallback == (turn.reference,)  # the policy's own text spoke
    assert turn.blocked[0][1] == "allow:consumer-voice"
    assert audit.scenarios[1].turns == []  # a wrong number is never phrased
    section = report_section(audit, "test")
    assert "Spoken sentences failing the allow-list: 0" in section
    assert "I do not owe it." in section  # kept for review


async def test_a_faithful_llm_is_spoken_and_nothing_spoken_fails():
    audit = await audit_with(
        "Thank you. What date works for you, and would you pay by debit card, "
        "bank transfer or check?"
    )
    [turn] = audit.scenarios[0].turns
    assert turn.spoken == turn.sentences and not turn.blocked, turn
    assert audit.totals()["sentences spoken"] == 2 and audit.violations == []
