"""``python -m agent plan``: synthetic profiles where the right answer is known, bad profiles,
the benchmarks' profile writers, the markdown."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from agent.config import Settings
from agent.ledger import latency, stage_profiles
from agent.ledger.plan import chosen_configuration, plan, predict
from agent.ledger.plan_command import run_plan_command
from agent.ledger.plan_report import render
from agent.ledger.pricebook import PriceBook
from agent.ledger.production import Production, production_profile
from agent.ledger.records import TurnRecord
from agent.ledger.stage_profiles import (
    ProfileError,
    load_profile,
    load_profiles,
    profile_document,
    profile_path_for,
    stage_option,
    write_profile,
)
from agent.store.database import create_engine_for
from agent.store.past_calls import production as read_calls
from agent.store.tables import Call, CostLine, Turn
from tools.bench import SttRun, own_overhead_ms, stt_profile, turn_profile

# A price book where every figure is easy to check by hand: one GPU at $6/hour is
# $0.10 per GPU-minute, a line at $0.01/min.
BOOK = PriceBook.from_dict(
    {
        "version": "test-1",
        "currency": "USD",
        "target_usd_per_minute": 0.04,
        "compute": {"gpu": 6.0, "cpu-2core": 0.12},
        "profiles": {
            "gpu": {
                "stt": {"compute": "gpu", "concurrent_calls": 100},
                "llm": {"compute": "gpu", "concurrent_calls": 50},
                "tts": {"compute": "gpu", "concurrent_calls": 20},
            }
        },
        "fallback_tts": {"usd_per_1k_characters": 0.02},
        "telephony": {"usd_per_minute": {"sip": 0.01, "webrtc": 0.0}},
    }
)


def fixed(p50: float, p95: float | None = None) -> dict[str, float]:
    """A stage's figures: p50, p95 and (the same as the p95) p99."""
    tail = p50 if p95 is None else p95
    return {"p50": p50, "p95": tail, "p99": tail}


def synthetic() -> list[dict[str, Any]]:
    """Two LLM options, as in the talk: fast at twice the cost, slow but (at 300 ms) enough.

    stt 60 ms, tts 70 ms, our overhead 10 ms (p95 20): with the slow LLM (120 ms) the
    turn's p95 is 60 + 120 + 70 + 10 + sqrt(10^2) = 270 ms, with the fast one (80 ms)
    230 ms. Per minute: line $0.01, stt $0.10/100, tts $0.10/20; LLM $0.10/50 (slow)
    or $0.10/25 (fast).
    """
    measured = profile_document(
        "turn",
        [
            stage_option("overhead", "agent worker", latency_ms=fixed(10, 20)),
            stage_option("endpointing", "VAD + smart-turn", latency_ms=fixed(200, 250)),
        ],
        command="python -m agent bench turn",
    )
    declared = profile_document(
        "declared",
        [
            stage_option(
                "stt", "whisper gpu", latency_ms=fixed(60), placement={"price_book_profile": "gpu"}
            ),
            stage_option(
                "llm", "slow llm", latency_ms=fixed(120), placement={"price_book_profile": "gpu"}
            ),
            stage_option(
                "llm",
                "fast llm",
                latency_ms=fixed(80),
                placement={"price_book_profile": "gpu", "cost_multiple": 2},
            ),
            stage_option(
                "tts",
                "tts gpu",
                latency_ms=fixed(70),
                placement={"compute": "gpu", "concurrent_calls": 20},
            ),
        ],
        source="declared",
    )
    return [measured, declared]


def write_all(directory: Path, documents: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for doc in documents:
        write_profile(doc, directory / f"{doc['name']}.json")
    return directory


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    return write_all(tmp_path / "profiles", synthetic())


@pytest.fixture
def book_path(tmp_path: Path) -> Path:
    path = tmp_path / "book.toml"
    path.write_text(
        """
version = "test-1"
currency = "USD"
target_usd_per_minute = 0.04
[compute]
gpu = 6.0
cpu-2core = 0.12
[profiles.gpu]
stt = { compute = "gpu", concurrent_calls = 100 }
llm = { compute = "gpu", concurrent_calls = 50 }
tts = { compute = "gpu", concurrent_calls = 20 }
[fallback_tts]
usd_per_1k_characters = 0.02
[telephony]
usd_per_minute = { sip = 0.01, webrtc = 0.0 }
"""
    )
    return path


def run(profiles: Path, book: Path, *extra: str) -> tuple[int, str]:
    from agent.__main__ import _parser

    args = _parser().parse_args(
        ["plan", "--profiles", str(profiles), "--price-book", str(book), *extra]
    )
    return run_plan_command(args)


# -- the right answer on a known profile ---------------------------------------------------------


def test_the_slow_cheap_llm_that_still_meets_300_ms_is_chosen(profiles: Path) -> None:
    result = plan(load_profiles(profiles), BOOK, target_ms=300)
    assert [c.options["llm"].config for c in result.passing] == ["slow llm", "fast llm"]
    cheapest, fastest = result.cheapest, result.fastest
    assert cheapest is not None and fastest is not None
    assert cheapest.options["llm"].config == "slow llm"
    assert cheapest.predicted_ms == pytest.approx(60 + 120 + 70 + 10 + 10)
    assert cheapest.p50_ms == pytest.approx(260)
    assert cheapest.coinciding_ms == pytest.approx(270)
    # Voice to voice: endpointing added, tails in quadrature: 460 + sqrt(10^2 + 50^2).
    assert cheapest.voice_to_voice_ms == pytest.approx(460 + math.sqrt(10**2 + 50**2))
    assert cheapest.usd_per_minute == pytest.approx(0.01 + 0.001 + 0.002 + 0.005)
    assert fastest.options["llm"].config == "fast llm"
    assert fastest.predicted_ms == pytest.approx(230)
    assert fastest.usd_per_minute == pytest.approx(0.01 + 0.001 + 0.004 + 0.005)
    # The talk's trade: the LLM line doubles.
    assert fastest.stage_usd_per_minute("llm") == pytest.approx(
        2 * cheapest.stage_usd_per_minute("llm")
    )
    assert cheapest.declared_stages == ("stt", "llm", "tts")


def test_a_tighter_target_leaves_only_the_fast_llm(profiles: Path) -> None:
    result = plan(load_profiles(profiles), BOOK, target_ms=250)
    assert [c.options["llm"].config for c in result.passing] == ["fast llm"]
    assert [c.options["llm"].config for c in result.failing] == ["slow llm"]


def test_a_target_nothing_meets_says_so_and_exits_1(profiles: Path, book_path: Path) -> None:
    status, shown = run(profiles, book_path, "--target-ms", "200")
    assert status == 1
    assert "Nothing is known to meet 200 ms at p95" in shown
    assert (
        "nothing is known to meet 200 ms at p95: the fastest configuration is predicted at "
        "230 ms" in shown
    )
    assert "The closest that miss" in shown


def test_the_command_prints_the_table_cheapest_first(
    profiles: Path, book_path: Path, tmp_path: Path
) -> None:
    output = tmp_path / "docs" / "plan.md"
    status, shown = run(profiles, book_path, "--target-ms", "300", "--output", str(output))
    assert status == 0, shown
    written = output.read_text()
    assert written in shown
    lines = written.splitlines()
    rows = [line for line in lines if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2
    assert "slow llm" in rows[0] and "$0.0180" in rows[0] and "1.00x" in rows[0]
    assert "fast llm" in rows[1] and "$0.0200" in rows[1] and "1.11x" in rows[1]
    assert "| 270 |" in rows[0] and "| 230 |" in rows[1]
    assert "**declared, not measured**: stt, llm, tts" in rows[0]
    assert (
        "**Cheapest that meets 300 ms**: stt: whisper gpu; llm: slow llm; tts: tts gpu" in written
    )
    assert "**Fastest**" in written and "1.11x the cost for 40 ms less" in written
    # The trade row: the LLM line at 2x, the whole minute at 1.11x.
    trade = next(line for line in lines if line.startswith("| llm | fast llm |"))
    assert "(2.00x)" in trade and "| yes |" in trade and "1.11x" in trade
    # The inputs are listed, declared ones marked.
    assert "| llm | fast llm | **declared** |" in written
    assert "price book test-1" in written
    assert "Planned " in lines[2] and "--target-ms 300" in lines[2]


def test_the_percentile_option_reads_the_matching_figures(tmp_path: Path) -> None:
    docs = synthetic()
    # Samples 1..100 ms for the overhead: p50 50, p99 99 by nearest rank.
    docs[0]["options"][0] = stage_option(
        "overhead", "agent worker", samples_ms=[float(v) for v in range(1, 101)]
    )
    directory = write_all(tmp_path / "p", docs)
    result = plan(load_profiles(directory), BOOK, target_ms=400, q=0.99)
    cheapest = result.cheapest
    assert cheapest is not None
    assert cheapest.predicted_ms == pytest.approx(60 + 120 + 70 + 50 + 49)
    # A percentile with no figure and no samples: the tail is unknown, not zero; the
    # prediction (the known tails only) is a lower bound, and nothing is known to meet.
    at_p90 = plan(load_profiles(directory), BOOK, target_ms=400, q=0.9)
    assert at_p90.passing == ()
    maybe = at_p90.cheapest_possible
    assert maybe is not None and maybe.tail_unknown == ("stt", "llm", "tts")
    assert maybe.predicted_ms == pytest.approx(60 + 120 + 70 + 50 + 40)


def test_a_measured_option_without_a_p95_is_not_given_one(tmp_path: Path) -> None:
    docs = synthetic()
    docs.append(
        profile_document(
            "gpu",
            [
                stage_option(
                    "llm",
                    "median-only llm",
                    latency_ms={"p50": 10},
                    placement={"compute": "gpu", "concurrent_calls": 100},
                )
            ],
        )
    )
    result = plan(load_profiles(write_all(tmp_path / "p", docs)), BOOK)
    assert all(c.options["llm"].config != "median-only llm" for c in result.passing)
    assert result.excluded == ()
    # Under the target by its median: it may meet it, as a lower bound marked so.
    [maybe] = result.possible
    assert maybe.options["llm"].config == "median-only llm" and maybe.tail_unknown == ("llm",)
    assert not maybe.meets and maybe.predicted_ms == pytest.approx(60 + 10 + 70 + 20)
    shown = render(result)
    assert "## 1 more may meet the target: a stage's p95 is unknown" in shown
    assert "| 150 | ≥160 |" in shown and "**tail unknown**: llm" in shown
    assert "| llm | median-only llm | measured | - | 10 | unknown |" in shown
    assert "the tails of llm add at most 140 ms over their medians" in shown
    at_median = plan(load_profiles(tmp_path / "p"), BOOK, q=0.5)
    assert at_median.cheapest is not None
    assert at_median.cheapest.options["llm"].config == "median-only llm"


def test_an_api_tts_is_priced_by_its_characters(profiles: Path, tmp_path: Path) -> None:
    docs = synthetic()
    docs[1]["options"][3] = stage_option(
        "tts",
        "tts api",
        latency_ms=fixed(70),
        placement={"api": "fallback_tts", "characters_per_minute": 500},
    )
    result = plan(load_profiles(write_all(tmp_path / "p", docs)), BOOK)
    cheapest = result.cheapest
    assert cheapest is not None
    # 500 characters at $0.02 per 1,000 instead of a GPU share.
    assert cheapest.stage_usd_per_minute("tts") == pytest.approx(0.01)
    assert cheapest.usd_per_minute == pytest.approx(0.01 + 0.001 + 0.002 + 0.01)


def test_colocated_models_take_the_overhead_measured_with_them(tmp_path: Path) -> None:
    docs = synthetic()
    docs[0]["options"].append(
        stage_option("overhead", "worker with the models", latency_ms=fixed(40, 60), colocated=True)
    )
    docs[1]["options"].append(
        stage_option(
            "tts",
            "cpu tts",
            latency_ms=fixed(30),
            colocated=True,
            placement={"compute": "cpu-2core", "concurrent_calls": 1},
        )
    )
    result = plan(load_profiles(write_all(tmp_path / "p", docs)), BOOK, target_ms=1000)
    everything = [*result.passing, *result.failing]
    for c in everything:
        colocated = c.options["tts"].config == "cpu tts"
        assert c.options["overhead"].colocated is colocated
        assert ("endpointing" in c.options) is not colocated  # none measured colocated
    assert len(everything) == 4


def test_models_on_the_worker_without_an_overhead_measured_there_are_noted(
    tmp_path: Path,
) -> None:
    docs = synthetic()
    docs[1]["options"].append(
        stage_option(
            "tts",
            "cpu tts",
            latency_ms=fixed(30),
            colocated=True,
            placement={"compute": "cpu-2core", "concurrent_calls": 1},
        )
    )
    result = plan(load_profiles(write_all(tmp_path / "p", docs)), BOOK)
    assert all(c.options["tts"].config != "cpu tts" for c in result.passing + result.failing)
    assert result.notes == (
        "2 combinations left out: no overhead was measured with the models placed as theirs "
        "are (on the agent worker's cores or not); `python -m agent bench turn` measures both",
    )
    assert "2 combinations left out" in render(result)


def test_the_transport_prices_the_line(profiles: Path) -> None:
    sip = plan(load_profiles(profiles), BOOK).cheapest
    webrtc = plan(load_profiles(profiles), BOOK, transport="webrtc").cheapest
    assert sip is not None and webrtc is not None
    assert sip.usd_per_minute - webrtc.usd_per_minute == pytest.approx(0.01)
    with pytest.raises(ValueError, match="no rate for transport 'pigeon'"):
        plan(load_profiles(profiles), BOOK, transport="pigeon")


def test_the_root_sum_square_of_the_tails() -> None:
    options = [
        stage_profiles.parse_profile(
            profile_document("x", [stage_option("overhead", n, latency_ms=fixed(p50, p95))])
        ).options[0]
        for n, p50, p95 in (("a", 100, 130), ("b", 50, 90))
    ]
    p50, rss, coinciding = predict(options, 0.95)
    assert (p50, rss, coinciding) == pytest.approx((150, 150 + 50, 220))


def test_the_dashboard_gets_the_chosen_configuration(profiles: Path, book_path: Path) -> None:
    chosen = chosen_configuration(300, profiles_dir=profiles, price_book=book_path)
    assert chosen is not None
    assert chosen.predicted_ms == pytest.approx(270)
    assert chosen.usd_per_minute == pytest.approx(0.018)
    assert chosen.declared_stages == ("stt", "llm", "tts")
    assert "slow llm" in chosen.label and chosen.price_book_version == "test-1"
    assert chosen_configuration(200, profiles_dir=profiles, price_book=book_path) is None


# -- bad input -------------------------------------------------------------------------------------


def bad(tmp_path: Path, change: Any) -> Path:
    docs = synthetic()
    change(docs[1])
    return write_raw(tmp_path, docs)


def write_raw(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    directory = tmp_path / "bad"
    directory.mkdir()
    for doc in docs:
        (directory / f"{doc['name']}.json").write_text(json.dumps(doc))
    return directory


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["options"][1]["latency_ms"].pop("p50"),
            r"declared\.json: options\[1\]\.latency_ms\.p50: missing",
        ),
        (
            lambda d: d["options"][1]["latency_ms"].update(p95="fast"),
            r"declared\.json: options\[1\]\.latency_ms\.p95: expected a number, got 'fast'",
        ),
        (
            lambda d: d["options"][0].update(stage="asr"),
            r"declared\.json: options\[0\]\.stage: unknown stage 'asr'",
        ),
        (
            lambda d: d["options"][0].pop("placement"),
            r"declared\.json: options\[0\]\.placement: missing \(a stt option must say",
        ),
        (
            lambda d: d["options"][0]["placement"].update(concurrent_calls=0),
            r"options\[0\]\.placement\.concurrent_calls: not a field of a price_book_profile",
        ),
        (
            lambda d: d["options"][3]["placement"].update(concurrent_calls=0),
            r"options\[3\]\.placement\.concurrent_calls: expected a positive number, got 0",
        ),
        (lambda d: d.update(format="v0"), r"declared\.json: format: expected 'agent-profile/1'"),
        (lambda d: d.update(source="guessed"), r"declared\.json: source: expected one of"),
        (lambda d: d.pop("options"), r"declared\.json: options: missing"),
        (
            lambda d: d["options"][1]["placement"].update(api="tts-co"),
            r"options\[1\]\.placement: expected exactly one of",
        ),
    ],
)
def test_a_malformed_profile_names_the_file_and_the_field(
    tmp_path: Path, book_path: Path, change: Any, message: str
) -> None:
    directory = bad(tmp_path, change)
    with pytest.raises(ProfileError, match=message):
        load_profiles(directory)
    status, shown = run(directory, book_path)
    assert status == 2 and shown.startswith("cannot plan: ")


def test_not_json_and_no_profiles(tmp_path: Path, book_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    status, shown = run(tmp_path / "empty", book_path)
    assert status == 2 and "no profiles (*.json): run the benchmarks first" in shown
    status, shown = run(tmp_path / "nowhere", book_path)
    assert status == 2 and "no such directory" in shown
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "turn.json").write_text("{not json")
    with pytest.raises(ProfileError, match=r"turn\.json: not valid JSON"):
        load_profile(broken / "turn.json")


def test_an_unpriced_compute_class_is_left_out_and_named(tmp_path: Path) -> None:
    docs = synthetic()
    docs[1]["options"].append(
        stage_option(
            "llm",
            "tpu llm",
            latency_ms=fixed(1),
            placement={"compute": "tpu", "concurrent_calls": 9},
        )
    )
    result = plan(load_profiles(write_all(tmp_path / "p", docs)), BOOK)
    [excluded] = result.excluded
    assert "cannot be priced: compute class 'tpu' is not in the price book" in excluded.reason


def test_no_overhead_profile_is_a_clear_error(tmp_path: Path) -> None:
    directory = write_all(tmp_path / "p", synthetic()[1:])
    with pytest.raises(ProfileError, match="no usable overhead option.*bench turn"):
        plan(load_profiles(directory), BOOK)


def test_a_bad_percentile_or_target(profiles: Path, book_path: Path) -> None:
    status, shown = run(profiles, book_path, "--percentile", "100")
    assert status == 2 and "at least 50 and below 100" in shown
    status, shown = run(profiles, book_path, "--target-ms", "0")
    assert status == 2 and "must be positive" in shown


def test_the_command_line_end_to_end(profiles: Path, book_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent", "plan", "--profiles", str(profiles)]
        + ["--price-book", str(book_path), "--target-ms", "200"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stderr
    assert "Nothing is known to meet 200 ms" in done.stdout


# -- the benchmarks' writers ---------------------------------------------------------------------


def turn(n: int, **parts: float) -> TurnRecord:
    return TurnRecord(call_id="c" * 32, number=n, **parts)  # type: ignore[arg-type]


def test_own_overhead_is_the_response_less_the_model_stages() -> None:
    # The response and the STT final both run from the VAD's stop (agent.ledger.latency).
    t = turn(1, response_ms=250, stt_ms=200, endpointing_ms=200, llm_ttft_ms=10, tts_ttfb_ms=30)
    assert own_overhead_ms(t) == pytest.approx(10)
    # A model stage longer than the response leaves no negative share.
    t = turn(2, response_ms=100, stt_ms=200, llm_ttft_ms=10, tts_ttfb_ms=30)
    assert own_overhead_ms(t) == 0.0
    assert own_overhead_ms(turn(3, response_ms=5)) is None


def test_the_turn_bench_writes_a_profile_the_planner_reads(tmp_path: Path) -> None:
    parts = {
        "endpointing_ms": 200.0,
        "stt_ms": 50.0,
        "llm_ttft_ms": 10.0,
        "tts_ttfb_ms": 30.0,
        "transport_out_ms": 1.0,
        "response_ms": 95.0,
    }
    results = {
        # the response runs from the VAD's stop, as the STT final does: 5 ms are ours
        "cpu": [
            turn(i, **{**parts, "stt_ms": 50.0 + i, "response_ms": 95.0 + i}) for i in range(20)
        ],
        "stub": [turn(i, **{**parts, "tts_ttfb_ms": 2.0, "response_ms": 65.0}) for i in range(20)],
    }
    report = str(tmp_path / "turn-cpu.md")
    doc = turn_profile(results, Settings(), "python -m agent bench turn --turns 20", report)
    path = write_profile(doc, profile_path_for(report))
    assert path == tmp_path / "profiles" / "turn-cpu.json"
    profile = load_profile(path)
    options = {(o.stage, o.colocated): o for o in profile.options}
    assert set(options) == {
        ("endpointing", True),
        ("overhead", True),
        ("stt", True),
        ("llm", True),
        ("tts", True),
        ("endpointing", False),
        ("overhead", False),
    }
    assert options[("overhead", True)].p50 == pytest.approx(5)
    assert options[("overhead", False)].p50 == pytest.approx(3)
    stt = options[("stt", True)]
    assert (stt.p50, stt.at(0.95), stt.samples) == (59, 68, 20)
    assert stt.placement is not None and stt.placement.price_book_profile == "embedded-cpu"
    assert profile.command == "python -m agent bench turn --turns 20"
    # The shipped book prices it: the planner combines it with everything else.
    result = plan([profile], PriceBook.load(), target_ms=1000)
    assert result.cheapest is not None and not result.cheapest.declared_stages


def test_the_stt_bench_writes_one_option_per_setting_and_stream_count(tmp_path: Path) -> None:
    runs = {
        "batch 1": [SttRun(1, 3.0, 0.5, [400.0, 420.0, 500.0], 3, 3)],
        "batched": [SttRun(4, 12.0, 1.5, [1000.0] * 11 + [1400.0], 3, 12)],
    }
    report = str(tmp_path / "stt.md")
    doc = stt_profile(runs, "python -m agent bench stt --streams 1,4", report, 20.0, 16)
    profile = load_profile(write_profile(doc, profile_path_for(report)))
    one, four = profile.options
    assert one.config.endswith("batch 1") and one.concurrency == 1
    assert (one.p50, one.at(0.95)) == (420, 500)
    assert four.concurrency == 4 and four.config.endswith("batched (20 ms window, <= 16 per call)")
    assert four.placement is not None and four.placement.concurrent_calls == 4
    assert four.throughput["audio_s_per_s"] == pytest.approx(8.0)
    assert four.throughput["finals_per_model_call"] == pytest.approx(4.0)


def test_a_gpu_md_without_its_profile_is_noted(profiles: Path, book_path: Path) -> None:
    (profiles.parent / "gpu.md").write_text("# GPU\n")
    status, shown = run(profiles, book_path)
    assert status == 0
    assert "gpu.md exists but" in shown and "GPU figures are not used" in shown


def test_the_shipped_profiles_plan(tmp_path: Path) -> None:
    """The repository's own profiles load and plan under the shipped book (if present)."""
    if not stage_profiles.DEFAULT_PROFILES.is_dir():
        pytest.skip("no profiles shipped")
    args = argparse.Namespace(
        target_ms=300.0,
        percentile=95.0,
        profiles=None,
        price_book=None,
        transport="sip",
        from_db=False,
        since=None,
        output=None,
    )
    status, shown = run_plan_command(args)
    assert status in (0, 1), shown
    assert "declared, not measured" in shown


def test_a_declared_options_p95_is_not_a_number() -> None:
    """The shipped declared figures are medians: their tails are unknown, never zero, and a
    configuration on them is a lower bound, marked, that only *may* meet the target."""
    declared = load_profile(stage_profiles.DEFAULT_PROFILES / "declared.json")
    assert declared.options and all(o.declared for o in declared.options)
    assert all(o.at(0.95) is None for o in declared.options)
    result = plan(load_profiles(stage_profiles.DEFAULT_PROFILES), PriceBook.load())
    on_declared = [
        c for c in (*result.passing, *result.possible, *result.failing) if c.declared_stages
    ]
    assert on_declared and all(c.tail_unknown and not c.meets for c in on_declared)
    shown = render(result)
    assert (
        "| stt | Whisper large-v3-turbo, H100 (talk) | **declared** | - | 70 | unknown |" in shown
    )
    chosen = chosen_configuration(300)
    assert chosen is not None and chosen.tail_unknown


# -- from the database (--from-db) -----------------------------------------------------------------

NOW = dt.datetime(2026, 12, 8, 12, 0, tzinfo=dt.UTC)
#: The test book with the gpu profile priced by use: $6/hour at half use is $1/1,000 s of
#: work; STT 100 audio s/s, the LLM 20,000 prompt and 1,000 completion tokens/s, TTS 50.
BY_USE = """
[profiles.gpu]
target_utilization = 0.5
stt = { compute = "gpu", concurrent_calls = 100, audio_s_per_s = 100 }
tts = { compute = "gpu", concurrent_calls = 20, audio_s_per_s = 50 }
[profiles.gpu.llm]
compute = "gpu"
concurrent_calls = 50
prompt_tokens_per_s = 20000
completion_tokens_per_s = 1000
"""


@pytest.fixture
def by_use_book(tmp_path: Path, book_path: Path) -> Path:
    text = book_path.read_text()
    head, _, rest = text.partition("[profiles.gpu]")
    path = tmp_path / "by-use.toml"
    path.write_text(head + BY_USE + rest[rest.index("[fallback_tts]") :])
    return path


def seed(engine: Engine) -> None:
    """Two calls of a minute each in the week, one a month old; a legacy turn left out.

    Per turn: stt 100 ms, llm 50, tts 40, response 200 (so our overhead is 10), with one
    slow turn (stt 300, response 400). The week's use: 30 audio s of STT, 4,000 prompt
    tokens (1,000 cached), 200 completion tokens, 20 audio s of TTS, 600 characters.
    """

    def call(cid: str, started: dt.datetime, stt: tuple[float, ...]) -> Call:
        row = Call(
            id=cid * 32,
            transport="sip",
            direction="outbound",
            status="ended",
            started_at=started,
            ended_at=started + dt.timedelta(minutes=1),
            duration_s=60.0,
            stt_model="whisper-prod",
            llm_model="llm-prod",
            tts_voice="voice-prod",
        )
        for n, stt_ms in enumerate(stt):
            row.turns.append(
                Turn(
                    number=n,
                    endpointing_ms=200.0,
                    stt_ms=stt_ms,
                    llm_ttft_ms=50.0,
                    tts_ttfb_ms=40.0,
                    response_ms=stt_ms + 100.0,
                    voice_to_voice_ms=stt_ms + 300.0,
                    tts_characters=100,
                    latency_definition=latency.DEFINITION,
                )
            )
        return row

    def line(row: Call, component: str, unit: str, quantity: float, compute: float | None) -> None:
        row.cost_lines.append(
            CostLine(
                component=component,
                quantity=quantity,
                unit=unit,
                unit_price_usd=0.0,
                amount_usd=0.0,
                price_book_version="test-1",
                basis="measured",
                compute_s=compute,
            )
        )

    a = call("a", NOW - dt.timedelta(days=1), (100.0, 100.0, 300.0))
    b = call("b", NOW - dt.timedelta(days=3), (100.0, 100.0, 100.0))
    b.turns.append(
        Turn(number=3, stt_ms=999.0, response_ms=50.0, latency_definition=latency.LEGACY_DEFINITION)
    )
    old = call("c", NOW - dt.timedelta(days=30), (5000.0,))
    for row in (a, b):
        line(row, "stt", "audio_second", 15.0, 0.5)
        line(row, "llm", "1k_prompt_tokens", 1.5, None)
        line(row, "llm", "1k_completion_tokens", 0.1, 0.1)
        line(row, "tts", "audio_second", 10.0, 2.0)
    line(old, "stt", "audio_second", 500.0, 50.0)
    with Session(engine) as session:
        session.add_all([a, b, old])
        session.commit()


def from_db(engine: Engine, profiles: Path, book: Path, *extra: str) -> tuple[int, str]:
    from agent.__main__ import _parser

    args = _parser().parse_args(
        ["plan", "--profiles", str(profiles), "--price-book", str(book), *extra]
    )
    return run_plan_command(
        args,
        lambda since, until: read_calls(engine, since, until, price_profile="gpu", colocated=False),
        now=NOW,
    )


def test_the_calls_in_the_database_are_read_as_they_were(db_engine: Engine) -> None:
    seed(db_engine)
    week = read_calls(
        db_engine, NOW - dt.timedelta(days=7), NOW, price_profile="gpu", colocated=False
    )
    assert (week.calls, week.minutes, week.transport) == (2, pytest.approx(2.0), "sip")
    assert len(week.turns) == 6 and week.legacy_turns == 1
    assert sorted(t.overhead_ms for t in week.turns) == [10.0] * 6
    assert week.per_minute("stt", "audio_second") == pytest.approx(15.0)
    assert week.throughput("stt") == pytest.approx(30.0)  # 30 audio s in 1 s of compute
    assert week.throughput("llm") == pytest.approx(1000.0)  # 200 tokens in 0.2 s
    assert week.characters_per_minute() == pytest.approx(300.0)
    usage = week.minute_usage("sip")
    assert (usage.stt_audio_s, usage.llm_prompt_tokens, usage.llm_completion_tokens) == (
        pytest.approx(15.0),
        1500,
        100,
    )
    profile = production_profile(week, now=NOW)
    stt = next(o for o in profile.options if o.stage == "stt")
    assert stt.config == "whisper-prod (production, PRICE_PROFILE gpu)"
    assert stt.samples == 6 and stt.p50 == 100.0 and stt.at(0.95) == 300.0
    assert stt.source == "measured" and stt.throughput["audio_s_per_s"] == pytest.approx(30.0)


def test_plan_from_db_prices_the_calls_we_had(
    db_engine: Engine, profiles: Path, by_use_book: Path
) -> None:
    seed(db_engine)
    status, shown = from_db(db_engine, profiles, by_use_book, "--from-db", "--since", "7d")
    assert status == 0, shown
    assert "--from-db --since 7d" in shown and "transport sip" in shown
    assert "Production (the database, calls started 2026-12-01 12:00 to 2026-12-08 12:00 UTC" in (
        shown
    )
    assert "2 calls (sip 2), 2.0 connected minutes, 6 turns" in shown
    assert "1 older turns left out" in shown
    assert "| stt | 15.00 audio s | 30 audio_s_per_s |" in shown
    assert "| agent speech | 300 characters | - |" in shown
    # Our own part (endpointing, overhead) is production's, measured with the models placed
    # alike, no longer the benchmark's.
    assert (
        "| overhead | agent worker (production, PRICE_PROFILE gpu) | measured | 6 | 10 |" in shown
    )
    assert "| overhead | agent worker | measured |" not in shown
    assert "| endpointing | VAD + smart-turn |" not in shown
    # The production turns are a measured option beside the benchmarks' ...
    assert "| stt | whisper-prod (production, PRICE_PROFILE gpu) | measured | 6 | 100 | 300 |" in (
        shown
    )
    # ... and every configuration is priced for a minute of those calls' use: the production
    # STT by its 15 audio s at $6/h over 50 audio s/s (half of 100), $0.0005.
    result = plan(
        [*load_profiles(profiles), production_profile(week := seeded_week(db_engine), now=NOW)],
        PriceBook.load(by_use_book),
        transport="sip",
        production=week,
    )
    cheapest = result.cheapest
    assert cheapest is not None
    [stt_line] = [line for line in cheapest.cost.lines if line.component == "stt"]
    assert (stt_line.unit, stt_line.quantity) == ("audio_second", pytest.approx(15.0))
    assert stt_line.amount_usd == pytest.approx(15.0 * 6 / 3600 / 50)
    assert stt_line.basis == "declared"  # the test book states its throughput


def seeded_week(engine: Engine) -> Any:
    return read_calls(engine, NOW - dt.timedelta(days=7), NOW, price_profile="gpu", colocated=False)


def test_plan_from_an_empty_database_says_so(
    empty_db_url: str, profiles: Path, book_path: Path
) -> None:
    engine = create_engine_for(empty_db_url)
    try:
        status, shown = from_db(engine, profiles, book_path, "--from-db")
        assert status == 2
        assert "the database holds no ended call since 2026-12-01 12:00 UTC" in shown
        assert "nothing to plan from" in shown
    finally:
        engine.dispose()


def test_plan_from_a_window_with_only_older_turns_says_so(
    db_engine: Engine, profiles: Path, book_path: Path
) -> None:
    seed(db_engine)
    status, shown = from_db(db_engine, profiles, book_path, "--from-db", "--since", "1h")
    assert status == 2 and "no ended call since 2026-12-08 11:00 UTC" in shown


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--from-db", "--since", "7w"), "--since: expected a positive whole number"),
        (("--from-db", "--since", "0d"), "got '0d'"),
        (("--since", "7d"), "--since reads the database: add --from-db"),
    ],
)
def test_a_bad_since_is_a_clear_error(
    profiles: Path, book_path: Path, extra: tuple[str, ...], message: str
) -> None:
    status, shown = from_db(None, profiles, book_path, *extra)  # type: ignore[arg-type]
    assert status == 2 and message in shown


def test_plan_from_db_reads_database_url(tmp_path: Path, profiles: Path, book_path: Path) -> None:
    """End to end: DATABASE_URL's database, here one never migrated, reads as empty."""
    done = subprocess.run(
        [sys.executable, "-m", "agent", "plan", "--profiles", str(profiles)]
        + ["--price-book", str(book_path), "--from-db", "--since", "12h"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": f"sqlite:///{tmp_path / 'none.db'}"},
    )
    assert done.returncode == 2, done.stdout
    assert "cannot plan: the database holds no ended call since" in done.stderr


def test_a_stage_the_calls_did_not_use_is_priced_per_minute() -> None:
    """Calls that sent the LLM nothing (the templates) say nothing of what an LLM would use."""
    templates = Production(
        NOW - dt.timedelta(days=1),
        NOW,
        "gpu",
        False,
        calls=1,
        minutes=1.0,
        used={("stt", "audio_second"): (12.0, 1.0), ("llm", "1k_completion_tokens"): (0.0, 1.0)},
    )
    assert templates.counted("stt") and not templates.counted("llm")
    assert not templates.counted("tts")  # no line at all
