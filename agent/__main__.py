"""Command line: ``python -m agent {serve,simulate,bench} ...``; see ``--help``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from agent.config import ConfigError, Settings


def _parser() -> argparse.ArgumentParser:
    from agent.simulate import SCENARIOS

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

    names = ", ".join(f"{s.name} ({s.description})" for s in SCENARIOS.values())
    simulate = commands.add_parser(
        "simulate",
        help="hold a call with a synthetic caller and print each turn's latency and the cost",
    )
    simulate.add_argument(
        "--scenario", default="callback", choices=sorted(SCENARIOS), help=f"caller script: {names}"
    )

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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    debug = args.verbose or os.environ.get("LOG_LEVEL", "").upper() == "DEBUG"
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not debug:
        # pipecat logs through loguru; its per-frame debug lines drown a call's story.
        from loguru import logger as pipecat_logger

        pipecat_logger.remove()
        pipecat_logger.add(sys.stderr, level="WARNING")
    try:
        settings = Settings.from_env()
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        return 2

    if args.command == "serve":
        from agent.server import serve

        asyncio.run(serve(settings, host=args.host, port=args.port))
        return 0
    if args.command == "simulate":
        from agent.simulate import run_simulation

        return asyncio.run(run_simulation(settings, args.scenario))
    if args.command == "bench":
        from agent.bench import run_turn_bench

        if args.turns < 1:
            print("--turns must be at least 1", file=sys.stderr)
            return 2
        return asyncio.run(run_turn_bench(settings, args.turns, args.output, args.only))
    return 2


if __name__ == "__main__":
    sys.exit(main())
