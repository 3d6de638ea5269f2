"""What every model server process shares: its command line and its logging.

The servers are started as child processes by ``agent.runtime.embedded`` and by hand in
deployments; one command line shape (``--host``, ``--port``) keeps both uses alike.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from typing import Any

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def default_threads() -> int:
    """CPU threads for one model: all the cores this process may run on (its affinity: a
    server pinned with its worker gets that core's one) up to four (more rarely helps
    small models)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cores or 1))


def server_arguments(description: str) -> argparse.ArgumentParser:
    """A parser with the options every server takes; servers add their own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, ...)")
    return parser


def parse_server_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse the command line and set up logging for a server process."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    return args


class RequestError(ValueError):
    """A request body the server cannot take; the message is sent back with a 400."""


def json_object(body: bytes) -> dict[str, Any]:
    """``body`` parsed as a JSON object, or a ``RequestError`` saying why not."""
    try:
        request = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(f"invalid JSON: {error}") from None
    if not isinstance(request, dict):
        raise RequestError("the body must be a JSON object")
    return request
