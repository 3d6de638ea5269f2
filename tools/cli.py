"""The tools' commands: ``python -m agent simulate``, ``demo-data`` and ``bench ...``.

Registered by ``agent.__main__`` when the tools are there (a checkout); an installed agent
(the image) has none of them and says so. Each command's parser and runner are a pair here
(or in the tool's own module), and a tool's module is imported only when its command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config import Settings

#: A command's runner: its exit status, 2 for bad arguments.
Runner = Callable[[argparse.Namespace, Settings], int]


def add_parsers(commands: Any) -> None:
    """Add the tools' commands to the main parser's subparsers."""
    from tools.bench_compliance import add_compliance_parser
    from tools.bench_console import add_calls_parser
    from tools.bench_cost import add_cost_parser
    from tools.bench_endpoint import add_endpoint_parser
    from tools.bench_smart_turn import add_smart_turn_parser
    from tools.bench_soak import add_soak_parser
    from tools.demo import add_demo_parser

    _add_simulate_parser(commands)
    add_demo_parser(commands)
    bench = commands.add_parser("bench", help="benchmarks that print a table and write docs/")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for add in (
        _add_turn_parser,
        _add_guard_parser,
        _add_pooling_parser,
        _add_speculation_parser,
        _add_stt_parser,
        _add_sip_parsers,
        add_calls_parser,
        add_compliance_parser,
        add_endpoint_parser,
        add_soak_parser,
        add_cost_parser,
        add_smart_turn_parser,
    ):
        add(benches)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run a tool's command; 2 for bad arguments."""
    if args.command == "simulate":
        return _simulate(args, settings)
    if args.command == "demo-data":
        from tools.demo import run_demo_command

        return run_demo_command(settings, args)
    if args.command == "bench" and args.bench in _BENCHES:
        return _BENCHES[args.bench](args, settings)
    return 2


def _bad(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


def _add_output(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--output", default=default, help="where to write the results")


def _add_baseline(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--baseline",
        metavar="REPORT",
        help="an earlier report of this command (say, run at an older commit) to show as "
        "'before' beside this run",
    )


def _read_baseline(path: str, *section: str) -> str:
    """The 'before' table of an earlier report; OSError or ValueError says why not."""
    from tools.bench import baseline_section

    return baseline_section(Path(path).read_text(), *section)


def _add_simulate_parser(commands: Any) -> None:
    from agent.conversation.scenarios import builtin_scenarios

    scenarios = builtin_scenarios()
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
        help="a caller script of your own, in YAML (see agent/conversation/scripts/*.yaml)",
    )


def _simulate(args: argparse.Namespace, settings: Settings) -> int:
    from agent.conversation.scenarios import ScriptError, builtin_scenarios, load_script
    from tools.simulate import run_simulation

    try:
        scenario = load_script(args.script) if args.script else builtin_scenarios()[args.scenario]
    except ScriptError as e:
        return _bad(f"bad caller script: {e}")
    return asyncio.run(run_simulation(settings, scenario))


def _add_turn_parser(benches: Any) -> None:
    turn = benches.add_parser(
        "turn",
        help="median and p95 of every latency part over simulated turns, on the CPU "
        "models and on instant stub models",
    )
    turn.add_argument("--turns", type=int, default=20, help="turns per configuration (>= 1)")
    _add_output(turn, "docs/benchmarks/turn-cpu.md")
    turn.add_argument(
        "--only", choices=("cpu", "stub"), help="run one configuration instead of both"
    )
    _add_baseline(turn)


def _turn(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench import run_turn_bench

    if args.turns < 1:
        return _bad("--turns must be at least 1")
    baseline = None
    if args.baseline:
        try:
            baseline = _read_baseline(args.baseline)
        except (OSError, ValueError) as e:
            return _bad(f"--baseline {args.baseline}: {e}")
    return asyncio.run(run_turn_bench(settings, args.turns, args.output, args.only, baseline))


def _add_guard_parser(benches: Any) -> None:
    guard = benches.add_parser(
        "guard",
        help="cost of the output guard per sentence and of understanding per caller turn, "
        "against pipecat's own sentence aggregation",
    )
    guard.add_argument("--sentences", type=int, default=2000, help="sentences to time (>= 100)")
    _add_output(guard, "docs/benchmarks/guard.md")
    guard.add_argument(
        "--phrase",
        action="store_true",
        help="also run phrase mode over the builtin scenarios with the embedded base model "
        "(started here) and report the sentences generated, blocked and spoken",
    )
    guard.add_argument(
        "--repeats", type=int, default=3, help="with --phrase: runs of each scenario (>= 1)"
    )


def _guard(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench import run_guard_bench

    if args.sentences < 100:
        return _bad("--sentences must be at least 100")
    if args.repeats < 1:
        return _bad("--repeats must be at least 1")
    return run_guard_bench(args.output, args.sentences, args.repeats if args.phrase else 0)


def _add_pooling_parser(benches: Any) -> None:
    pooling = benches.add_parser(
        "pooling",
        help="time to first byte of the TTS and LLM clients, pooled keep-alive connections "
        "vs a new connection per request, over HTTP and HTTPS on loopback",
    )
    pooling.add_argument("--requests", type=int, default=200, help="requests per case (>= 20)")
    _add_output(pooling, "docs/benchmarks/pooling.md")


def _pooling(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_pooling import run_pooling_bench

    if args.requests < 20:
        return _bad("--requests must be at least 20")
    return run_pooling_bench(args.requests, args.output)


def _add_speculation_parser(benches: Any) -> None:
    speculation = benches.add_parser(
        "speculation",
        help="in phrase mode, the commit to the LLM's first words with the LLM asked at the "
        "commit and asked at the transcript, for several gaps between the two",
    )
    speculation.add_argument("--turns", type=int, default=20, help="turns per cell (>= 5)")
    speculation.add_argument(
        "--llm-ms", type=float, default=100.0, help="the stub LLM's time to its first word"
    )
    _add_output(speculation, "docs/benchmarks/speculation.md")


def _speculation(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_speculation import run_speculation_bench

    return run_speculation_bench(args.turns, args.llm_ms, args.output)


def _add_stt_parser(benches: Any) -> None:
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
    _add_output(stt, "docs/benchmarks/stt.md")


def _stt(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench import run_stt_bench

    streams = _counts(args.streams)
    if not streams:
        return _bad(f"--streams must be positive integers like 1,2,4,8, got {args.streams!r}")
    if args.utterances < 1 or args.max_batch < 1 or args.batch_window_ms < 0:
        return _bad("--utterances and --max-batch must be >= 1, --batch-window-ms >= 0")
    return asyncio.run(
        run_stt_bench(args.output, streams, args.utterances, args.batch_window_ms, args.max_batch)
    )


def _counts(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4]; [] unless every item is a positive integer."""
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        return []
    return counts if counts and min(counts) >= 1 else []


def _add_sip_parsers(benches: Any) -> None:
    sip = benches.add_parser(
        "sip",
        help="concurrent SIP calls one worker carries with 99.9%% of its outgoing RTP packets "
        "within 5 ms of schedule, over repeated runs, and the CPU a call costs (stub models)",
    )
    sip.add_argument("--steps", default="1,2,4,8,16,32", help="concurrent call counts, increasing")
    capacity = benches.add_parser(
        "capacity",
        help="calls per core: the most SIP calls one worker pinned to one core carries with "
        "99.9%% of its RTP packets within 5 ms of schedule in 4 of 5 runs, and the CPU a call "
        "costs, the agent's pipeline against pipecat's stock one doing the same work, and "
        "the agent's production setup (stub models; needs 2 cores and sipp)",
    )
    capacity.add_argument(
        "--steps", default="1,2,4,8,12,16,24,32,48,64", help="concurrent call counts, increasing"
    )
    _add_baseline(capacity)
    capacity.add_argument(
        "--profile",
        type=int,
        metavar="CALLS",
        help="then run each pipeline with CALLS calls under py-spy: where the CPU goes",
    )
    for parser, name in ((sip, "sip"), (capacity, "capacity")):
        parser.add_argument(
            "--hold",
            type=float,
            default=20.0,
            help="seconds all calls are measured together (>= 1)",
        )
        parser.add_argument(
            "--runs",
            type=int,
            default=5,
            help="fresh workers per step; a step holds when it passed in 80%% of them "
            "(4 of 5, rounded up)",
        )
        _add_output(parser, f"docs/benchmarks/{name}.md")


def _sip(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_sip import run_capacity_bench, run_sip_bench

    steps = _counts(args.steps)
    if not steps:
        return _bad(f"--steps must be call counts like 1,2,4,8, got {args.steps!r}")
    if args.bench == "sip":
        return run_sip_bench(args.output, steps, args.hold, args.runs)
    baseline = None
    if args.baseline:
        try:
            baseline = _read_baseline(args.baseline, "capacity", "| pipeline")
        except (OSError, ValueError) as e:
            return _bad(f"--baseline {args.baseline}: {e}")
    return run_capacity_bench(args.output, steps, args.hold, args.runs, args.profile, baseline)


def _endpoint(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_endpoint import run_endpoint_command

    return run_endpoint_command(args, settings)


def _soak(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_soak import run_soak_command

    return run_soak_command(args, settings)


def _cost(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_cost import run_cost_command

    return run_cost_command(args, settings)


def _smart_turn(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_smart_turn import run_smart_turn_bench

    loads = _counts(args.calls)
    if not loads or args.decisions < 1:
        return _bad(
            f"--calls must be positive integers like 1,8,32 and --decisions at least 1, "
            f"got {args.calls!r} and {args.decisions}"
        )
    return run_smart_turn_bench(loads, args.decisions, args.output, args.device, settings)


def _compliance(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_compliance import run_compliance_command

    return run_compliance_command(args)


def _calls(args: argparse.Namespace, settings: Settings) -> int:
    from tools.bench_console import run_calls_command

    status, shown = run_calls_command(args)
    print(shown, file=sys.stdout if status == 0 else sys.stderr)
    return status


#: ``bench NAME`` -> its runner.
_BENCHES: dict[str, Runner] = {
    "turn": _turn,
    "guard": _guard,
    "pooling": _pooling,
    "speculation": _speculation,
    "stt": _stt,
    "sip": _sip,
    "capacity": _sip,
    "endpoint": _endpoint,
    "soak": _soak,
    "compliance": _compliance,
    "calls": _calls,
    "cost": _cost,
    "smart-turn": _smart_turn,
}
