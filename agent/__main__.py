"""Command line: ``python -m agent COMMAND ...`` (serve, simulate, dial, users...); see --help."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agent import logs
from agent.config import ConfigError, Settings

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable
    from types import ModuleType

    from agent.campaigns.dialer import Campaign, CampaignReport
    from agent.ledger.production import Production

#: The commands whose code is in tools/: a checkout's, not the package's or the image's.
TOOL_COMMANDS = ("simulate", "demo-data", "bench")
NO_TOOLS = "the simulator, demo data and benchmarks run from a checkout of the repository"


def _tools() -> ModuleType | None:
    """``tools.cli`` where the tools are (a checkout), else None (an installed agent)."""
    try:
        from tools import cli
    except ModuleNotFoundError as e:
        if e.name not in ("tools", "tools.cli"):
            raise
        return None
    return cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agent",
        description="Voice agent for debt-collection phone lines. Settings come from "
        "environment variables and .env (see README.md); with no model URLs set, the "
        "embedded CPU models are started.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging (or LOG_LEVEL=DEBUG)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve", help="run the agent server: the call page, WebRTC signalling, the API"
    )
    serve.add_argument("--host", help="address to listen on (default: $HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: $PORT or 8080)")
    serve.add_argument(
        "--workers",
        type=int,
        default=os.environ.get("WORKERS") or "1",
        help="worker processes behind one HTTP entry, each carrying up to MAX_CALLS calls: "
        "about one per core (default: $WORKERS or 1: this process serves alone); "
        "see agent/runtime/supervisor.py",
    )

    portfolio = commands.add_parser("portfolio", help="the consumers and debts the agent calls")
    portfolio_commands = portfolio.add_subparsers(dest="portfolio", required=True, metavar="ACTION")
    load = portfolio_commands.add_parser(
        "import",
        help="import a portfolio CSV (see docs/portfolio.md); bad rows are listed with "
        "their line numbers and reasons, good rows are imported",
    )
    load.add_argument("file", type=Path, help="the CSV file")

    from agent.console.cli import add_tokens_parser, add_users_parser

    add_users_parser(commands)
    add_tokens_parser(commands)
    dial = commands.add_parser(
        "dial",
        help="dial a campaign through the SIP trunk, each call cleared by the pre-dial gate",
        description="Dial a campaign: a CSV of account_ref,number rows (docs/dialing.md). Each "
        "entry asks the pre-dial gate first (denied: not dialed, reported with its rule); "
        "allowed calls go to sip:NUMBER@TRUNK, an answered call is held by the agent with "
        "the debt's account, and every outcome (answered, voicemail, busy, no_answer, "
        "not_in_service, failed) is recorded on the attempt. Prints a table of the attempts "
        "and a summary; exits 1 if any call failed, 2 on a bad file or setting. SIP_HOST and "
        "SIP_PORT (any free port when unset) are where our end binds; SIP_TRUNK_USERNAME and "
        "SIP_TRUNK_PASSWORD answer the trunk's challenges.",
    )
    dial.add_argument(
        "--campaign", type=Path, required=True, metavar="FILE", help="the campaign CSV"
    )
    dial.add_argument(
        "--rate", type=float, default=1.0, help="calls started per second at most (default 1.0)"
    )
    dial.add_argument(
        "--concurrency", type=int, default=4, help="calls in progress at most (default 4)"
    )
    dial.add_argument(
        "--trunk",
        metavar="sip:HOST:PORT",
        help="the trunk to dial through (default: $SIP_TRUNK)",
    )

    from agent.ledger.plan_command import add_plan_parser

    add_plan_parser(commands)
    tool_commands = _tools()
    if tool_commands is not None:
        tool_commands.add_parsers(commands)
    else:
        for name in TOOL_COMMANDS:
            # every argument is taken as is: the message says why none of them can run here
            absent = commands.add_parser(name, help=f"(not here: {NO_TOOLS})", prefix_chars="\0")
            absent.add_argument("arguments", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    from loguru import logger as pipecat_logger

    pipecat_logger.remove()  # pipecat's import banner: stderr is for our lines (logs.configure)
    args = _parser().parse_args(argv)
    debug = args.verbose or os.environ.get("LOG_LEVEL", "").upper() == "DEBUG"
    try:
        logs.configure(debug=debug, fmt=os.environ.get("LOG_FORMAT", "text").lower())
    except ValueError as e:
        return _configuration_error(e)
    try:
        settings = Settings.from_env()
        return _command(args, settings)
    except ConfigError as e:
        return _configuration_error(e)


def _configuration_error(error: ValueError) -> int:
    """A setting to fix (a bad value, a database that cannot be reached): one line on
    stderr naming the variable, and exit status 2; a traceback would bury it."""
    print(f"configuration error: {' '.join(str(error).split())}", file=sys.stderr)
    return 2


def _command(args: argparse.Namespace, settings: Settings) -> int:
    """Run the command; a ``ConfigError`` from it (at start) is ``main``'s to report."""
    if args.command == "serve":
        if args.workers < 1:
            print("--workers must be at least 1", file=sys.stderr)
            return 2
        if args.workers > 1:
            from agent.runtime import supervisor
            from agent.runtime.context import load_assets
            from agent.store.database import check_database

            # Checked here once: a worker that exits on a setting would be restarted forever.
            load_assets(settings)
            check_database(settings.database_url)
            asyncio.run(supervisor.run(settings, args.workers, args.host, args.port))
            return 0
        from agent.server.app import serve

        asyncio.run(serve(settings, host=args.host, port=args.port))
        return 0
    if args.command in TOOL_COMMANDS:
        tool_commands = _tools()
        if tool_commands is None:
            print(f"{args.command}: {NO_TOOLS}", file=sys.stderr)
            return 2
        return tool_commands.run(args, settings)
    if args.command == "portfolio":
        return _import_portfolio(settings, args.file)
    if args.command == "plan":
        from agent.ledger.plan_command import run_plan_command

        status, shown = run_plan_command(args, _production_reader(settings))
        print(shown, file=sys.stdout if status != 2 else sys.stderr)
        return status
    if args.command == "users":
        from agent.console.cli import run_users_command

        return run_users_command(settings, args)
    if args.command == "tokens":
        from agent.console.cli import run_tokens_command

        return run_tokens_command(settings, args)
    if args.command == "dial":
        return _dial(settings, args)
    return 2


def _production_reader(settings: Settings) -> Callable[[dt.datetime, dt.datetime], Production]:
    """``plan --from-db``'s reading of DATABASE_URL (the store, imported when asked)."""

    def read(since: dt.datetime, until: dt.datetime) -> Production:
        from agent.store.past_calls import read_production

        return read_production(settings, since, until)

    return read


def _import_portfolio(settings: Settings, path: Path) -> int:
    from agent.campaigns.portfolio import PortfolioError, import_portfolio
    from agent.store.database import create_engine_for, upgrade

    upgrade(settings.database_url)
    engine = create_engine_for(settings.database_url)
    try:
        report = import_portfolio(engine, path)
    except (OSError, PortfolioError) as e:
        print(f"cannot import {path}: {e}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    print(
        f"{path}: {report.imported} imported, {report.updated} updated, "
        f"{len(report.rejected)} rejected"
    )
    for row in report.rejected:
        print(f"  line {row.line}: {'; '.join(row.reasons)}")
    return 1 if report.rejected else 0


def _dial(settings: Settings, args: argparse.Namespace) -> int:
    from agent.campaigns.dialer import FAILED, CampaignError, load_campaign, trunk_address
    from agent.store.database import create_engine_for, upgrade

    trunk = args.trunk or settings.sip_trunk
    if not trunk:
        print(
            "no trunk to dial through: pass --trunk sip:HOST:PORT or set SIP_TRUNK", file=sys.stderr
        )
        return 2
    try:
        trunk_address(trunk)
    except ValueError as e:
        print(f"bad trunk {trunk!r}: {e}", file=sys.stderr)
        return 2
    if not args.rate > 0 or args.concurrency < 1:
        print("--rate must be above 0 and --concurrency at least 1", file=sys.stderr)
        return 2
    upgrade(settings.database_url)
    engine = create_engine_for(settings.database_url)
    try:
        campaign = load_campaign(engine, args.campaign)
    except (OSError, CampaignError) as e:
        print(f"cannot dial {args.campaign}: {e}", file=sys.stderr)
        for row in e.rejected if isinstance(e, CampaignError) else ():
            print(f"  line {row.line}: {'; '.join(row.reasons)}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    report = asyncio.run(_run_campaign(settings, campaign, trunk, args.rate, args.concurrency))
    print(report.table())
    print(report.summary())
    return 1 if report.outcomes()[FAILED] else 0


async def _run_campaign(
    settings: Settings, campaign: Campaign, trunk: str, rate: float, concurrency: int
) -> CampaignReport:
    """The campaign on this process's agent: the calls are held and stored as the server's."""
    from functools import partial

    from agent.campaigns.dialer import Dialer
    from agent.runtime.context import AgentRuntime
    from agent.server.app import converse, make_app, sip_endpoint
    from telephony.sip.call import SipCall

    async def decline(line: SipCall) -> None:
        await line.hang_up()  # this process only dials out

    async with AgentRuntime(settings) as ctx:
        app = make_app(ctx)  # not served: it holds the calls as the server would
        endpoint = sip_endpoint(settings, decline, settings.sip_port or 0)
        await endpoint.start()
        try:
            dialer = Dialer(
                ctx.engine,
                endpoint,
                trunk,
                converse=partial(converse, app),
                rate_per_s=rate,
                concurrency=concurrency,
            )
            return await dialer.run(campaign)
        finally:
            await endpoint.close()


if __name__ == "__main__":
    sys.exit(main())
