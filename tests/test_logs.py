"""Log lines name their call, in text and in JSON, for our loggers and pipecat's."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

import pytest
from loguru import logger as pipecat_logger

from agent import logs


@pytest.fixture
def configured(capsys: pytest.CaptureFixture[str]):
    def setup(fmt: str) -> None:
        logs.configure(fmt=fmt)

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield setup
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    pipecat_logger.remove()
    # Looked up at each write: pytest swaps sys.stderr per test, and closes the old one.
    pipecat_logger.add(lambda message: sys.stderr.write(message))


async def _a_call(call_id: str) -> None:
    token = logs.CALL_ID.set(call_id)
    try:
        logging.getLogger("agent.pipeline.call").info("started")
        # Tasks made on the call's behalf inherit its id.
        await asyncio.create_task(_in_a_child())
    finally:
        logs.CALL_ID.reset(token)


async def _in_a_child() -> None:
    pipecat_logger.warning("pipecat says")


async def test_text_lines_carry_the_call_id(configured, capsys) -> None:
    configured("text")
    await _a_call("c0ffee")
    logging.getLogger("agent.server.app").info("outside")
    err = capsys.readouterr().err.splitlines()
    assert any("agent.pipeline.call [c0ffee]: started" in line for line in err)
    assert any("WARNING" in line and "[c0ffee]: pipecat says" in line for line in err)
    assert any("agent.server.app [-]: outside" in line for line in err)


async def test_json_lines_are_one_object_each(configured, capsys) -> None:
    configured("json")
    await _a_call("c0ffee")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("agent.store.database").exception("failed")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    # Every line is one object; the three of this test by their messages (a background
    # thread left by an earlier test may log a line of its own in between).
    started, pipecat, failed = (
        next(line for line in lines if line["message"] == message)
        for message in ("started", "pipecat says", "failed")
    )
    assert started["call_id"] == "c0ffee" and started["message"] == "started"
    assert started["time"].endswith("+00:00") and started["level"] == "INFO"
    assert pipecat["call_id"] == "c0ffee" and pipecat["level"] == "WARNING"
    assert failed["call_id"] is None and "RuntimeError: boom" in failed["exception"]


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="LOG_FORMAT must be one of text, json"):
        logs.configure(fmt="xml")
