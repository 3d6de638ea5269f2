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
    from agent.dialer import Campaign, CampaignReport


def _parser() -> argparse.ArgumentParser:
    from agent.scenarios import builtin_scenarios

    scenarios = builtin_scenarios()

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
        "see agent/supervisor.py",
    )

    simulate = commands.add_parser(
        "simulate",
        help="hold a call with a synthetic caller; print the conversation, its disposition "
        "and compliance events, each turn's latency and the cost",
        description="Hold a call with a synthetic caller (Piper's voice over a real-time "
        "loopback line) against the real pipeline. Built-in scenarios: "
        + "; ".join(f"{s.name}: {s.description}" for s in scenarios.values()),
    )
    which = simulate.add_mutually_exclusive_group()
    which.add_argument(
        "--scenario",
        default="pays_in_full",
        choices=sorted(scenarios),
        metavar="NAME",
        help="a built-in caller script (default: pays_in_full)",
    )
    which.add_argument(
        "--script",
        type=Path,
        metavar="FILE",
        help="a caller script of your own, in YAML (see agent/scenarios/*.yaml)",
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
    from agent.demo import add_demo_parser

    add_users_parser(commands)
    add_tokens_parser(commands)
    add_demo_parser(commands)
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

    from agent.plan import add_plan_parser

    add_plan_parser(commands)
    bench = commands.add_parser("bench", help="benchmarks that print a table and write docs/")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    turn = benches.add_parser(
        "turn",
        help="median and p95 of every latency part over simulated turns, on the CPU "
        "models and on instant stub models",
    )
    turn.add_argument("--turns", type=int, default=20, help="turns per configuration (>= 1)")
    turn.add_argument(
        "--output", default="docs/benchmarks/turn-cpu.md", help="where to write the results"
    )
    turn.add_argument(
        "--only", choices=("cpu", "stub"), help="run one configuration instead of both"
    )
    turn.add_argument(
        "--baseline",
        metavar="REPORT",
        help="an earlier report of this command (say, run at an older commit) to show as "
        "'before' beside this run",
    )
    guard = benches.add_parser(
        "guard",
        help="cost of the output guard per sentence and of understanding per caller turn, "
        "against pipecat's own sentence aggregation",
    )
    guard.add_argument("--sentences", type=int, default=2000, help="sentences to time (>= 100)")
    guard.add_argument("--output", default="docs/benchmarks/guard.md", help="where to write")
    guard.add_argument(
        "--phrase",
        action="store_true",
        help="also run phrase mode over the builtin scenarios with the embedded base model "
        "(started here) and report the sentences generated, blocked and spoken",
    )
    guard.add_argument(
        "--repeats", type=int, default=3, help="with --phrase: runs of each scenario (>= 1)"
    )
    pooling = benches.add_parser(
        "pooling",
        help="time to first byte of the TTS and LLM clients, pooled keep-alive connections "
        "vs a new connection per request, over HTTP and HTTPS on loopback",
    )
    pooling.add_argument("--requests", type=int, default=200, help="requests per case (>= 20)")
    pooling.add_argument(
        "--output", default="docs/benchmarks/pooling.md", help="where to write the results"
    )
    speculation = benches.add_parser(
        "speculation",
        help="in phrase mode, the commit to the LLM's first words with the LLM asked at the "
        "commit and asked at the transcript, for several gaps between the two",
    )
    speculation.add_argument("--turns", type=int, default=20, help="turns per cell (>= 5)")
    speculation.add_argument(
        "--llm-ms", type=float, default=100.0, help="the stub LLM's time to its first word"
    )
    speculation.add_argument(
        "--output", default="docs/benchmarks/speculation.md", help="where to write the results"
    )
    stt = benches.add_parser(
        "stt",
        help="the STT server's audio seconds per wall second with finals batched across "
        "streams and one at a time, for several concurrent streams (CPU, Whisper tiny.en)",
    )
    stt.add_argument(
        "--streams", default="1,2,4,8", help="comma-separated concurrent stream counts"
    )
    stt.add_argument("--utterances", type=int, default=3, help="finals per stream (>= 1)")
    stt.add_argument("--batch-window-ms", type=float, default=20.0, help="batching window")
    stt.add_argument("--max-batch", type=int, default=16, help="most finals per model call")
    stt.add_argument("--output", default="docs/benchmarks/stt.md", help="where to write")
    sip = benches.add_parser(
        "sip",
        help="concurrent SIP calls one worker carries with 99.9%% of its outgoing RTP packets "
        "within 5 ms of schedule, and its CPU, against pipecat's websocket transport (stub models)",
    )
    sip.add_argument("--steps", default="1,2,4,8,16,32", help="concurrent call counts, increasing")
    sip.add_argument(
        "--hold", type=float, default=20.0, help="seconds all calls are measured together (>= 1)"
    )
    sip.add_argument("--output", default="docs/benchmarks/sip.md", help="where to write")
    capacity = benches.add_parser(
        "capacity",
        help="calls per core: the most SIP calls one worker pinned to one core carries with "
        "99.9%% of its RTP packets within 5 ms of schedule, the agent's pipeline against "
        "pipecat's stock one (stub models; needs 2 cores and sipp)",
    )
    capacity.add_argument(
        "--steps", default="1,2,4,8,12,16,24,32,48,64", help="concurrent call counts, increasing"
    )
    capacity.add_argument(
        "--hold", type=float, default=20.0, help="seconds all calls are measured together (>= 1)"
    )
    capacity.add_argument(
        "--baseline",
        metavar="REPORT",
        help="an earlier report of this command (say, run at an older commit) to show as "
        "'before' beside this run",
    )
    capacity.add_argument(
        "--profile",
        type=int,
        metavar="CALLS",
        help="then run each pipeline with CALLS calls under py-spy: where the CPU goes",
    )
    capacity.add_argument("--output", default="docs/benchmarks/capacity.md", help="where to write")
    from agent.bench_compliance import add_compliance_parser
    from agent.bench_console import add_calls_parser
    from agent.bench_endpoint import add_endpoint_parser
    from agent.bench_soak import add_soak_parser

    add_calls_parser(benches)
    add_compliance_parser(benches)
    add_endpoint_parser(benches)
    add_soak_parser(benches)
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
            from agent import supervisor
            from agent.runtime import load_assets
            from agent.store import check_database

            # Checked here once: a worker that exits on a setting would be restarted forever.
            load_assets(settings)
            check_database(settings.database_url)
            asyncio.run(supervisor.run(settings, args.workers, args.host, args.port))
            return 0
        from agent.server import serve

        asyncio.run(serve(settings, host=args.host, port=args.port))
        return 0
    if args.command == "simulate":
        from agent.scenarios import ScriptError, builtin_scenarios, load_script
        from agent.simulate import run_simulation

        try:
            scenario = (
                load_script(args.script) if args.script else builtin_scenarios()[args.scenario]
            )
        except ScriptError as e:
            print(f"bad caller script: {e}", file=sys.stderr)
            return 2
        return asyncio.run(run_simulation(settings, scenario))
    if args.command == "portfolio":
        return _import_portfolio(settings, args.file)
    if args.command == "plan":
        from agent.plan import run_plan_command

        status, shown = run_plan_command(args)
        print(shown, file=sys.stdout if status != 2 else sys.stderr)
        return status
    if args.command == "users":
        from agent.console.cli import run_users_command

        return run_users_command(settings, args)
    if args.command == "tokens":
        from agent.console.cli import run_tokens_command

        return run_tokens_command(settings, args)
    if args.command == "demo-data":
        from agent.demo import run_demo_command

        return run_demo_command(settings, args)
    if args.command == "dial":
        return _dial(settings, args)
    if args.command == "bench" and args.bench == "endpoint":
        from agent.bench_endpoint import run_endpoint_command

        return run_endpoint_command(args, settings)
    if args.command == "bench" and args.bench == "soak":
        from agent.bench_soak import run_soak_command

        return run_soak_command(args, settings)
    if args.command == "bench" and args.bench == "compliance":
        from agent.bench_compliance import run_compliance_command

        return run_compliance_command(args)
    if args.command == "bench" and args.bench == "calls":
        from agent.bench_console import run_calls_command

        status, shown = run_calls_command(args)
        print(shown, file=sys.stdout if status == 0 else sys.stderr)
        return status
    if args.command == "bench" and args.bench in ("sip", "capacity"):
        from agent.bench_sip import run_capacity_bench, run_sip_bench

        try:
            steps = [int(n) for n in args.steps.split(",")]
        except ValueError:
            print(f"--steps must be call counts like 1,2,4,8, got {args.steps!r}", file=sys.stderr)
            return 2
        if args.bench == "sip":
            return run_sip_bench(args.output, steps, args.hold)
        baseline = None
        if args.baseline:
            from agent.bench import baseline_section

            try:
                text = Path(args.baseline).read_text()
                baseline = baseline_section(text, "capacity", "| pipeline")
            except (OSError, ValueError) as e:
                print(f"--baseline {args.baseline}: {e}", file=sys.stderr)
                return 2
        return run_capacity_bench(args.output, steps, args.hold, args.profile, baseline)
    if args.command == "bench" and args.bench == "stt":
        return _stt_bench(args)
    if args.command == "bench" and args.bench == "guard":
        from agent.bench import run_guard_bench

        if args.sentences < 100:
            print("--sentences must be at least 100", file=sys.stderr)
            return 2
        if args.repeats < 1:
            print("--repeats must be at least 1", file=sys.stderr)
            return 2
        return run_guard_bench(args.output, args.sentences, args.repeats if args.phrase else 0)
    if args.command == "bench" and args.bench == "speculation":
        from agent.bench_speculation import run_speculation_bench

        return run_speculation_bench(args.turns, args.llm_ms, args.output)
    if args.command == "bench" and args.bench == "pooling":
        from agent.bench_pooling import run_pooling_bench

        if args.requests < 20:
            print("--requests must be at least 20", file=sys.stderr)
            return 2
        return run_pooling_bench(args.requests, args.output)
    if args.command == "bench":
        from agent.bench import baseline_section, run_turn_bench

        if args.turns < 1:
            print("--turns must be at least 1", file=sys.stderr)
            return 2
        baseline = None
        if args.baseline:
            try:
                baseline = baseline_section(Path(args.baseline).read_text())
            except (OSError, ValueError) as e:
                print(f"--baseline {args.baseline}: {e}", file=sys.stderr)
                return 2
        return asyncio.run(run_turn_bench(settings, args.turns, args.output, args.only, baseline))
    return 2


def _stt_bench(args: argparse.Namespace) -> int:
    from agent.bench import run_stt_bench

    try:
        streams = [int(n) for n in args.streams.split(",")]
    except ValueError:
        streams = []
    if not streams or min(streams) < 1:
        print(
            f"--streams must be positive integers like 1,2,4,8, got {args.streams!r}",
            file=sys.stderr,
        )
        return 2
    if args.utterances < 1 or args.max_batch < 1 or args.batch_window_ms < 0:
        print("--utterances and --max-batch must be >= 1, --batch-window-ms >= 0", file=sys.stderr)
        return 2
    return asyncio.run(
        run_stt_bench(args.output, streams, args.utterances, args.batch_window_ms, args.max_batch)
    )


def _import_portfolio(settings: Settings, path: Path) -> int:
    from agent.portfolio import PortfolioError, import_portfolio
    from agent.store import create_engine_for, upgrade

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
    from agent.dialer import FAILED, CampaignError, load_campaign, trunk_address
    from agent.store import create_engine_for, upgrade

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

    from agent.dialer import Dialer
    from agent.runtime import AgentRuntime
    from agent.server import converse, make_app, sip_endpoint
    from telephony.sip.ua import SipCall

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
