"""The agent's log lines: one format for ours and pipecat's, each naming its call.

A call's task sets ``CALL_ID`` when it starts; asyncio copies the context into
every task created from it (pipecat's processors, the store's submissions), so
every line logged on a call's behalf carries its id without passing it
around. Pipecat logs through loguru; its lines are handed to the standard
``logging`` tree, so they get the same format, level and call id. With
``LOG_FORMAT=json`` each line is one JSON object, for a log collector.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import sys
from contextvars import ContextVar
from typing import Any

#: The call the current task works for; None outside any call.
CALL_ID: ContextVar[str | None] = ContextVar("call_id", default=None)

FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s [%(call_id)s]: %(message)s"


class CallIdFilter(logging.Filter):
    """Puts the current call's id (``-`` outside a call) on every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "call_id"):
            record.call_id = CALL_ID.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, call id, message."""

    def format(self, record: logging.LogRecord) -> str:
        call_id = record.__dict__.get("call_id", "-")
        line: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "call_id": None if call_id == "-" else call_id,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")


def configure(*, debug: bool = False, fmt: str = "text") -> None:
    """Log to stderr in ``fmt`` (``text`` or ``json``); pipecat's lines too, at WARNING
    unless ``debug`` (its per-frame debug lines drown a call's story)."""
    if fmt not in FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(CallIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.INFO)

    from loguru import logger as pipecat_logger

    pipecat_logger.remove()
    pipecat_logger.add(_to_logging, level="DEBUG" if debug else "WARNING", format="{message}")


#: pipecat's lines about the caller's keys (its LiveKit transport logs each DTMF event with
#: its digit at debug level): never passed on, keyed digits may be card data (rule C11).
_KEYS = re.compile(r"dtmf", re.I)


def _to_logging(message: Any) -> None:
    """A loguru sink: the record into the standard ``logging`` tree, under its module's name."""
    record = message.record
    if _KEYS.search(record["message"]):
        return
    logger = logging.getLogger(record["name"] or "pipecat")
    level = logging.getLevelName(record["level"].name)
    if not isinstance(level, int):  # loguru's own levels (SUCCESS, TRACE)
        level = logging.INFO if record["level"].no >= logging.INFO else logging.DEBUG
    exc = record["exception"]
    exc_info = (exc.type, exc.value, exc.traceback) if exc and exc.type else None
    logger.log(level, "%s", record["message"], exc_info=exc_info)
