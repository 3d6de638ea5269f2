"""The worker of ``bench soak``: the agent server's call path with SIP, in a process of its own.

It serves ``make_app`` (the SIP user agent, RTP, the pipeline, records) until SIGTERM, each
call's RTP session metered: the final counts of every session it closes are added up and
served at ``/soak/rtp`` (tools/bench_soak.py reads them).

Run it alone: ``SIP_PORT=5070 python -m tools.bench_soak_worker --port 8090``, the model
URLs in ``STT_URL``, ``LLM_URL``, ``TTS_URL``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agent.access import Loopback, guard
from agent.config import Settings
from telephony.rtp.sender import LatenessHistogram

if TYPE_CHECKING:  # the RTP engine (pipecat's transports) when a soak runs only
    from telephony.rtp.session import RtpStats


class SoakError(RuntimeError):
    """The soak could not be run (a process failed to start, the worker died)."""


class RtpTotals:
    """The outgoing packets of every call the worker has closed: lateness, skips, underruns."""

    def __init__(self) -> None:
        self.counts = [0] * (LatenessHistogram.BUCKETS + 1)
        self.max_s = 0.0
        self.skipped = self.underruns = self.sessions = 0

    def add(self, stats: RtpStats) -> None:
        for i, n in enumerate(stats.lateness.counts):
            self.counts[i] += n
        self.max_s = max(self.max_s, stats.lateness.max_s)
        self.skipped += stats.skipped
        self.underruns += stats.underruns
        self.sessions += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "max_s": self.max_s,
            "skipped": self.skipped,
            "underruns": self.underruns,
            "sessions": self.sessions,
        }


TOTALS = RtpTotals()


@guard(Loopback())
async def _rtp_totals(request: web.Request) -> web.Response:
    return web.json_response(TOTALS.to_json())


async def _serve(host: str, port: int) -> None:
    from functools import partial

    from agent.runtime.context import AgentRuntime
    from agent.server.app import SIP, make_app
    from telephony.rtp.session import RtpSession

    class MeteredSession(RtpSession):
        """A call's RTP session that adds its final counts to ``TOTALS`` when it closes
        (the session itself is not kept: a soak must not hold every call it saw)."""

        async def close(self) -> None:
            counted = self._closed
            await super().close()
            if not counted:
                TOTALS.add(self.stats)

    settings = Settings.from_env(dict(os.environ))
    if settings.embedded_models or settings.sip_port is None:
        raise SoakError("set SIP_PORT, STT_URL, LLM_URL and TTS_URL (the stub server's)")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with AgentRuntime(settings) as ctx:
        app = make_app(ctx)
        app.router.add_get("/soak/rtp", _rtp_totals)
        runner = web.AppRunner(app, access_log=None)
        try:
            await runner.setup()  # starts the SIP endpoint on SIP_PORT
            # The server's media factory (agent.server.app._start_sip), its sessions metered.
            app[SIP].media = partial(
                MeteredSession.open,
                symmetric_rtp=settings.sip_symmetric_rtp,
                timeout_s=settings.rtp_timeout_s,
            )
            await web.TCPSite(runner, host, port).start()
            await stop.wait()
        finally:
            await runner.cleanup()


def worker_main(argv: list[str] | None = None) -> int:
    """The worker process: the agent server's app with SIP, until SIGTERM."""
    from infra.serving import parse_server_arguments, server_arguments

    parser = server_arguments("The soak's worker: the agent server's call path with SIP.")
    args = parse_server_arguments(parser, argv)
    from loguru import logger as pipecat_logger

    pipecat_logger.remove()
    pipecat_logger.add(sys.stderr, level="WARNING")
    try:
        asyncio.run(_serve(args.host, args.port))
    except SoakError as e:
        print(e, file=sys.stderr)  # noqa: T201
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
