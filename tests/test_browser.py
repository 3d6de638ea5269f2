"""Acceptance: the README's run command, and a real browser placing a real WebRTC call.

Headless Chromium, its microphone fed from a WAV file, presses Call on the page
the server serves; the test checks that the caller's words reach the stored
transcript and that the agent's audio came back. Then the server is killed
mid-call, and the call row and its finished turns must still be there. All of
it runs in a network namespace of its own (see tests/netns.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import wave
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from agent.store.database import create_engine_for, mark_abandoned_calls
from agent.store.tables import Call
from tests.audio import silence_pcm, speech_pcm, words
from tests.netns import network_namespace

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
PORT = 8765
CALLER_SAYS = "Hello, this is Jordan Smith. Please call me back tomorrow morning."

pytestmark = [pytest.mark.browser, pytest.mark.models]


def _caller_wav(path: Path) -> Path:
    rate = 48000
    # The caller lets the greeting finish, speaks, then leaves the agent time to answer
    # (Chromium loops the file).
    audio = silence_pcm(9.0, rate) + speech_pcm(CALLER_SAYS, rate) + silence_pcm(20.0, rate)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(audio)
    return path


def _wait_for(predicate, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}; server log:\n{log.read_text()[-4000:]}")


def _stored_call(engine, call_id: str) -> Call | None:
    with Session(engine) as session:
        return session.scalar(
            select(Call).where(Call.id == call_id).options(selectinload(Call.turns))
        )


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (make test installs it)")
def test_browser_call_reaches_the_database_and_survives_a_server_crash(tmp_path):
    from playwright.sync_api import sync_playwright

    db_url = f"sqlite:///{tmp_path / 'agent.db'}"
    wav = _caller_wav(tmp_path / "caller.wav")
    log = tmp_path / "server.log"
    env = {
        **os.environ,
        "PORT": str(PORT),
        "DATABASE_URL": db_url,
        "DATA_DIR": str(tmp_path / "data"),
        "LOG_LEVEL": "DEBUG",
    }
    for name in ("STT_URL", "LLM_URL", "TTS_URL"):
        env.pop(name, None)

    with network_namespace() as ns:
        # The README's run command, word for word.
        server = subprocess.Popen(
            ns.command("make", "run"),
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_for(lambda: "agent ready" in log.read_text(), 300, "the server", log)
            chromium = tmp_path / "chromium-in-namespace"
            chromium.write_text(f'#!/bin/sh\nexec {" ".join(ns.command(str(CHROMIUM)))} "$@"\n')
            chromium.chmod(0o755)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(chromium),
                    headless=True,
                    args=[
                        "--use-fake-ui-for-media-stream",
                        "--use-fake-device-for-media-stream",
                        f"--use-file-for-fake-audio-capture={wav}",
                        "--allow-loopback-in-peer-connection",
                        "--disable-features=WebRtcHideLocalIpsWithMdns",
                        "--autoplay-policy=no-user-gesture-required",
                        "--disable-gpu",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                        "--no-first-run",
                    ],
                )
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{PORT}/")
                page.click("#call")
                page.wait_for_selector(".line.caller", timeout=120_000)
                # A locator, not wait_for_function: the page's CSP (no eval) holds for the test.
                page.locator(".line.agent").nth(1).wait_for(timeout=120_000)
                call_id = page.evaluate("window.agentCall.callId()")
                energy = page.evaluate("window.agentCall.agentAudioEnergy()")
                page.screenshot(path=str(tmp_path / "call.png"))
                assert energy > 0, "no agent audio reached the browser"

                engine = create_engine_for(db_url)
                call = _wait_for(
                    lambda: (c := _stored_call(engine, call_id)) and c.turns and c,
                    60,
                    "a finished turn in the database",
                    log,
                )
                heard = words(" ".join(t.user_text or "" for t in call.turns))
                assert {"jordan", "tomorrow"} & set(heard), heard
                assert any(t.agent_text for t in call.turns)

                # The server dies mid-call: nothing it had finished is lost.
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)
                browser.close()
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)

    call = _stored_call(engine, call_id)
    assert call is not None and call.status == "active" and call.turns
    assert mark_abandoned_calls(engine, socket.gethostname()) == 1
    assert _stored_call(engine, call_id).status == "abnormal"
    engine.dispose()
