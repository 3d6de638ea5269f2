"""``python -m agent plan``: the planner's command line.

From the benchmarks' stage profiles alone (``agent.ledger.plan``), or with ``--from-db``
the calls we actually had beside them (``agent.ledger.production``): their turns' latency
parts as one more measured profile, and their use per minute as what each configuration
is priced for. The database is read through the function the caller passes
(``agent.store.past_calls.read_production``, bound to ``DATABASE_URL``), so this package
stays below the store. Returns what to print; the caller prints it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.ledger.plan import DEFAULT_TRANSPORT, plan_from_files
from agent.ledger.plan_report import render
from agent.ledger.production import Production, parse_since, production_profile
from agent.ledger.stage_profiles import ProfileError, percentile_key

DEFAULT_OUTPUT = "docs/benchmarks/plan.md"
DEFAULT_SINCE = "7d"
#: Reads the database: the calls started in ``[since, until)``.
ReadProduction = Callable[[datetime, datetime], Production]


def add_plan_parser(commands: Any) -> None:
    """``python -m agent plan``."""
    parser = commands.add_parser(
        "plan",
        help="the serving configurations that meet a latency target at a percentile, "
        "cheapest first, from the benchmarks' stage profiles (and with --from-db the calls "
        "in the database) and the price book",
        description="Combine the stage options of the profiles (agent/ledger/profiles/*.json, "
        "written by the benchmarks; declared figures are marked as such, and a stage whose "
        "percentile is unknown makes the prediction a lower bound, marked ≥) into end-to-end "
        "configurations, predict each one's response latency and price a minute, and list "
        "those that meet the target, cheapest first. With --from-db, the turns stored in "
        "DATABASE_URL are one more measured profile and each configuration is priced for "
        "one minute of those calls' use. Exits 1 when none is known to meet the target, 2 "
        "on bad input or an empty database.",
    )
    parser.add_argument(
        "--target-ms", type=float, default=300.0, help="response latency target (default 300)"
    )
    parser.add_argument(
        "--percentile",
        type=float,
        default=95.0,
        help="the percentile the target applies to, 50 <= P < 100 (default 95)",
    )
    parser.add_argument(
        "--profiles",
        type=Path,
        default=None,
        metavar="DIR",
        help="the profiles' directory (default agent/ledger/profiles)",
    )
    parser.add_argument(
        "--price-book",
        type=Path,
        default=None,
        metavar="PATH",
        help="the price book (default infra/pricebook.toml)",
    )
    parser.add_argument(
        "--transport",
        default=None,
        help=f"the line the minutes are priced on (default {DEFAULT_TRANSPORT}; with "
        "--from-db, the one most of the calls came over)",
    )
    parser.add_argument(
        "--from-db",
        action="store_true",
        help="add the calls in DATABASE_URL: their turns' latency as a measured profile "
        "(PRICE_PROFILE's placement), their use per minute as what is priced",
    )
    parser.add_argument(
        "--since",
        metavar="Nd|Nh",
        help=f"with --from-db, the calls started in the last N days or hours "
        f"(default {DEFAULT_SINCE})",
    )
    parser.add_argument(
        "--output", metavar="FILE", help=f"also write the plan as markdown (e.g. {DEFAULT_OUTPUT})"
    )


def run_plan_command(
    args: argparse.Namespace,
    read_production: ReadProduction | None = None,
    *,
    now: datetime | None = None,
) -> tuple[int, str]:
    """The command line's side: (exit status, what to print)."""
    now = now or datetime.now(UTC)
    try:
        production = _production(args, read_production, now)
        transport = args.transport or (production and production.transport) or DEFAULT_TRANSPORT
        result = plan_from_files(
            args.target_ms,
            q=args.percentile / 100,
            profiles_dir=args.profiles,
            price_book=args.price_book,
            transport=transport,
            production=production_profile(production, now=now) if production else None,
            usage=production,
        )
    except (ProfileError, ValueError, OSError) as exc:
        return 2, f"cannot plan: {exc}"
    text = render(result, command=_command(args), now=now)
    if args.output:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        text += f"\nwrote {path}\n"
    if result.cheapest is None:
        text += f"\nnothing is known to meet {result.target_ms:g} ms at {percentile_key(result.q)}"
        maybe = result.cheapest_possible
        if maybe is not None:
            text += (
                f": {len(result.possible)} may, if their unknown tails fit; the cheapest is "
                f"predicted at ≥{maybe.predicted_ms:.0f} ms ({maybe.label})\n"
            )
        else:
            best = result.failing[0]
            text += (
                f": the fastest configuration is predicted at {best.predicted_ms:.0f} ms "
                f"({best.label})\n"
            )
        return 1, text
    return 0, text


def _production(
    args: argparse.Namespace, read_production: ReadProduction | None, now: datetime
) -> Production | None:
    """The calls of ``--since`` (``--from-db``), None without it; ValueError for a bad
    window or a database with no turn to plan from."""
    if not args.from_db:
        if args.since is not None:
            raise ValueError("--since reads the database: add --from-db")
        return None
    try:
        window = parse_since(args.since or DEFAULT_SINCE)
    except ValueError as exc:
        raise ValueError(f"--since: {exc}") from None
    if read_production is None:
        raise ValueError("--from-db: no database to read")
    since = now - window
    production = read_production(since, now)
    if not production.turns:
        held = (
            f"{production.calls} calls but no turn measured under the current latency "
            f"definition ({production.legacy_turns} older turns)"
            if production.calls
            else "no ended call"
        )
        raise ValueError(
            f"the database holds {held} since {since:%Y-%m-%d %H:%M} UTC: nothing to plan "
            "from (a longer --since, or plan from the benchmarks' profiles without --from-db)"
        )
    return production


def _command(args: argparse.Namespace) -> str:
    command = f"python -m agent plan --target-ms {args.target_ms:g}"
    if args.percentile != 95:
        command += f" --percentile {args.percentile:g}"
    if args.profiles is not None:
        command += f" --profiles {args.profiles}"
    if args.price_book is not None:
        command += f" --price-book {args.price_book}"
    if args.transport is not None:
        command += f" --transport {args.transport}"
    if args.from_db:
        command += f" --from-db --since {args.since or DEFAULT_SINCE}"
    if args.output:
        command += f" --output {args.output}"
    return command
