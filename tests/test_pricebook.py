"""agent.ledger.pricebook: the shipped book, the cost of a call checked by hand, bad books."""

from __future__ import annotations

import ast
import copy
import dataclasses
import datetime as dt
import json
import math
import tomllib
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from agent.ledger.pricebook import (
    DEFAULT_PATH,
    CallUsage,
    PriceBook,
    StagePlacement,
    price_call,
)
from agent.ledger.records import TRANSPORTS, CallStarted, new_call_id
from agent.ledger.throughput import DECLARED, MEASURED
from telephony.carriers.media_stream import CARRIERS

ROOT = Path(__file__).resolve().parent.parent

COMPONENTS = ["telephony", "stt", "llm", "tts", "tts_fallback"]
LINES = [
    ("telephony", "minute"),
    ("stt", "audio_second"),
    ("llm", "1k_prompt_tokens"),
    ("llm", "1k_completion_tokens"),
    ("tts", "audio_second"),
    ("tts_fallback", "1k_characters"),
    ("worker", "cpu_second"),
]


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook.load()


@pytest.fixture
def raw() -> dict[str, Any]:
    with DEFAULT_PATH.open("rb") as f:
        return tomllib.load(f)


def amounts(cost: Any) -> dict[str, float]:
    return {line.component: line.amount_usd for line in cost.lines}


def test_the_shipped_book(book: PriceBook) -> None:
    assert book.version == "2026-12-07"
    assert book.currency == "USD"
    assert book.target_usd_per_minute == 0.04
    assert book.compute_usd_per_hour == {"h100": 2.49, "h200": 3.50, "cpu-2core": 0.10}
    assert set(book.profiles) >= {"embedded-cpu", "h100"}
    assert book.fallback_tts_usd_per_1k_characters == 0.05
    assert book.telephony_rate("sip") == 0.0045
    assert book.telephony_rate("webrtc") == 0.0


def test_loads_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert PriceBook.load().version == "2026-12-07"


def test_the_embedded_stt_is_priced_from_its_measured_throughput(book: PriceBook) -> None:
    stt = book.profile("embedded-cpu")["stt"].throughput["audio_s_per_s"]
    profile = json.loads((ROOT / "agent/ledger/profiles/stt.json").read_text())
    [option] = [
        o
        for o in profile["options"]
        if o["concurrency"] == 1 and "batched" in o["config"] and "throughput" in o
    ]
    assert (stt.per_s, stt.basis) == (option["throughput"]["audio_s_per_s"], MEASURED)
    assert "agent/ledger/profiles/stt.json" in stt.source
    price, _ = book.unit_price("embedded-cpu", "stt", "audio_s_per_s")
    # $0.10/h over (audio seconds per second x 50 % utilization) x 3600 s.
    assert price == pytest.approx(0.10 / 3600 / (stt.per_s * 0.5))


def test_the_embedded_tts_is_priced_from_bench_costs_throughput(book: PriceBook) -> None:
    tts = book.profile("embedded-cpu")["tts"].throughput["audio_s_per_s"]
    profile = json.loads((ROOT / "agent/ledger/profiles/cost.json").read_text())
    [option] = [o for o in profile["options"] if o["stage"] == "tts"]
    assert (tts.per_s, tts.basis) == (option["throughput"]["audio_s_per_s"], MEASURED)
    assert "agent/ledger/profiles/cost.json" in tts.source
    # What stays declared in the embedded profile: the LLM's two throughputs.
    declared = [
        (stage, key)
        for stage, placement in book.profile("embedded-cpu").items()
        for key, figure in placement.throughput.items()
        if figure.basis == DECLARED
    ]
    assert declared == [("llm", "prompt_tokens_per_s"), ("llm", "completion_tokens_per_s")]


def test_a_call_is_priced_by_what_it_used(book: PriceBook) -> None:
    usage = CallUsage(
        "sip",
        120.0,
        stt_audio_s=20.0,
        stt_compute_s=6.0,
        llm_prompt_tokens=3000,
        llm_cached_tokens=2000,
        llm_completion_tokens=100,
        llm_compute_s=4.0,
        tts_characters=600,
        tts_audio_s=40.0,
        tts_compute_s=4.0,
        worker_cpu_s=10.0,
    )
    cost = price_call(book, "embedded-cpu", usage)
    assert [(line.component, line.unit) for line in cost.lines] == LINES
    by_unit = {(line.component, line.unit): line for line in cost.lines}
    stt, _ = book.unit_price("embedded-cpu", "stt", "audio_s_per_s")
    assert by_unit["stt", "audio_second"].amount_usd == pytest.approx(20.0 * stt)
    assert by_unit["stt", "audio_second"].compute_s == 6.0
    # The cached prompt tokens were not prefilled: 1,000 priced, at 400/s declared, 50 %.
    prompt = by_unit["llm", "1k_prompt_tokens"]
    assert prompt.quantity == 1.0
    assert prompt.unit_price_usd == pytest.approx(1000 * 0.10 / 3600 / (400 * 0.5))
    assert prompt.basis == DECLARED
    assert by_unit["llm", "1k_completion_tokens"].compute_s == 4.0
    tts = by_unit["tts", "audio_second"]
    assert (tts.quantity, tts.basis) == (40.0, MEASURED)  # bench cost's cost.json
    worker = by_unit["worker", "cpu_second"]
    # A CPU second is half a 2-core VM's second, at 50 % utilization.
    assert worker.unit_price_usd == pytest.approx(0.10 / 3600 / 2 / 0.5)
    assert (worker.basis, worker.compute_s) == (MEASURED, 10.0)
    assert by_unit["telephony", "minute"].amount_usd == pytest.approx(0.009)
    assert cost.total_usd == pytest.approx(math.fsum(line.amount_usd for line in cost.lines))
    assert cost.per_minute_usd == pytest.approx(cost.total_usd / 2)
    # Only the LLM rests on declared figures: the templates leave Gemma unmeasured.
    assert cost.declared_usd == pytest.approx(
        prompt.amount_usd + by_unit["llm", "1k_completion_tokens"].amount_usd
    )
    assert cost.price_book_version == "2026-12-07"
    assert cost.within_target


def test_a_long_silent_call_costs_less_stt_than_a_talkative_one(book: PriceBook) -> None:
    def stt(usage: CallUsage) -> float:
        cost = price_call(book, "embedded-cpu", usage)
        return sum(line.amount_usd for line in cost.lines if line.component == "stt")

    silent = CallUsage("sip", 600.0, stt_audio_s=5.0)  # ten minutes, a few words
    talkative = CallUsage("sip", 120.0, stt_audio_s=60.0)  # two minutes of talk
    assert stt(silent) < stt(talkative)
    # Under the old constant price the silent call cost five times more.
    assert (
        book.per_call_minute("embedded-cpu", "stt") * 10
        > book.per_call_minute("embedded-cpu", "stt") * 2
    )


def test_a_placement_given_only_as_calls_per_unit_is_priced_per_minute_and_declared(
    book: PriceBook,
) -> None:
    plain = dataclasses.replace(
        book,
        profiles=MappingProxyType(
            {"candidate": {stage: StagePlacement("h100", 200) for stage in ("stt", "llm", "tts")}}
        ),
    )
    cost = price_call(plain, "candidate", CallUsage("webrtc", 120.0))
    assert [line.component for line in cost.lines] == COMPONENTS  # no worker provisioned
    stt = cost.lines[1]
    assert (stt.quantity, stt.unit, stt.basis) == (2.0, "call_minute", DECLARED)
    assert stt.unit_price_usd == pytest.approx(2.49 / 60 / 200)


def test_fallback_tts_is_priced_by_characters(book: PriceBook) -> None:
    cost = price_call(book, "h100", CallUsage("webrtc", 120.0, fallback_tts_characters=2000))
    [fallback] = [line for line in cost.lines if line.component == "tts_fallback"]
    assert (fallback.quantity, fallback.unit, fallback.basis) == (2.0, "1k_characters", MEASURED)
    assert fallback.amount_usd == pytest.approx(0.10)  # 2 x $0.05
    assert not cost.within_target  # over $0.04/min: the fallback is the expensive path


def test_telephony_by_the_minute(book: PriceBook) -> None:
    cost = price_call(book, "h100", CallUsage("twilio", 120.0))
    line = cost.lines[0]
    assert (line.component, line.quantity, line.unit, line.unit_price_usd) == (
        "telephony",
        2.0,
        "minute",
        0.0085,
    )
    assert line.amount_usd == pytest.approx(0.017)


def test_zero_length_call_lists_every_component(book: PriceBook) -> None:
    cost = price_call(book, "h100", CallUsage("sip", 0.0))
    assert [(line.component, line.unit) for line in cost.lines] == LINES
    assert all(line.amount_usd == 0 for line in cost.lines)
    assert cost.total_usd == 0
    assert cost.per_minute_usd is None
    assert cost.within_target


def test_what_a_profile_provisions(book: PriceBook) -> None:
    # Three 2-core VMs for the models and one for the worker, all day.
    assert book.provisioned_usd_per_day("embedded-cpu") == pytest.approx(4 * 0.10 * 24)
    assert book.provisioned_seconds_per_day("embedded-cpu", "stt") == 86_400
    assert book.provisioned_seconds_per_day("embedded-cpu", "worker") == 2 * 86_400
    assert book.provisioned_usd_per_day("h100") == pytest.approx((3 * 2.49 + 0.10) * 24)


def test_every_transport_a_call_can_take_is_priced(book: PriceBook) -> None:
    # Issue 18: LiveKit had no price, and every LiveKit call failed at its end.
    unpriced = [t for t in TRANSPORTS if t not in book.telephony_usd_per_minute]
    assert not unpriced, f"infra/pricebook.toml has no telephony rate for {unpriced}"
    for transport in TRANSPORTS:
        assert price_call(book, "h100", CallUsage(transport, 60.0)).lines[0].component


def test_the_transports_are_those_the_code_names() -> None:
    """Every ``CallInfo(path=...)`` and ``Call(transport_name=...)`` in the code names one
    of ``TRANSPORTS``, and each of them is named somewhere: a new path is priced or fails
    here."""
    named: set[str] = set()
    unread: list[str] = []
    code = ("agent", "telephony", "tools")  # the simulator (tools/) makes the loopback calls
    for source in sorted(p for package in code for p in ROOT.glob(f"{package}/**/*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            keyword = {"CallInfo": "path", "Call": "transport_name"}.get(callee or "")
            for arg in node.keywords:
                if keyword is None or arg.arg != keyword:
                    continue
                if isinstance(arg.value, ast.Constant) and isinstance(arg.value.value, str):
                    named.add(arg.value.value)
                else:
                    unread.append(f"{source.relative_to(ROOT)}: {ast.unparse(arg.value)}")
    # Read at run time: the server passes a CallInfo's path on; a carrier's media stream
    # is one of CARRIERS.
    assert unread == [
        "agent/server/app.py: info.path",
        "telephony/carriers/media_stream.py: self.carrier",
    ]
    assert named | set(CARRIERS) == set(TRANSPORTS)


def test_a_call_record_names_a_known_transport() -> None:
    at = dt.datetime(2026, 12, 2, 15, 0, tzinfo=dt.UTC)
    for transport in TRANSPORTS:
        assert CallStarted(new_call_id(), transport, "inbound", at).transport == transport
    with pytest.raises(ValueError, match="transport must be one of"):
        CallStarted(new_call_id(), "carrier-pigeon", "inbound", at)


def test_usage_that_cannot_be_priced(book: PriceBook) -> None:
    with pytest.raises(ValueError, match="unknown profile 'a100'.*embedded-cpu, h100"):
        price_call(book, "a100", CallUsage("webrtc", 60.0))
    with pytest.raises(ValueError, match="telephony.usd_per_minute.*'carrier-pigeon'"):
        price_call(book, "h100", CallUsage("carrier-pigeon", 60.0))
    with pytest.raises(ValueError, match="duration_s"):
        price_call(book, "h100", CallUsage("webrtc", -1.0))
    with pytest.raises(ValueError, match="stt_audio_s must be a non-negative"):
        price_call(book, "h100", CallUsage("webrtc", 60.0, stt_audio_s=float("nan")))
    with pytest.raises(ValueError, match="llm_cached_tokens .* exceed"):
        price_call(
            book, "h100", CallUsage("webrtc", 60.0, llm_prompt_tokens=1, llm_cached_tokens=2)
        )


def test_changed_book_reprices(raw: dict[str, Any], tmp_path: Path) -> None:
    raw = copy.deepcopy(raw)
    raw["version"] = "2027-01-01"
    raw["compute"]["h100"] = 1.80
    path = tmp_path / "book.toml"
    path.write_text(_to_toml(raw))
    book = PriceBook.load(path)
    cost = price_call(book, "h100", CallUsage("webrtc", 60.0, stt_audio_s=30.0))
    assert cost.price_book_version == "2027-01-01"
    assert cost.lines[1].amount_usd == pytest.approx(30.0 * 1.80 / 3600 / (400 * 0.6))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.pop("version"), r"version: missing"),
        (lambda b: b.update(version=5), r"version: expected a non-empty string"),
        (lambda b: b.update(currency="EUR"), r"currency: prices are kept in USD"),
        (lambda b: b.update(target_usd_per_minute="cheap"), r"target_usd_per_minute: expected a"),
        (lambda b: b["compute"].update(h100=-1), r"compute.h100: expected a non-negative"),
        (lambda b: b["compute"].update(h100=True), r"compute.h100: expected a number"),
        (lambda b: b.update(compute={}), r"compute: at least one"),
        (lambda b: b.pop("profiles"), r"profiles: missing"),
        (
            lambda b: b["profiles"]["h100"]["llm"].update(compute="a100"),
            r"profiles.h100.llm.compute: unknown compute class 'a100'",
        ),
        (
            lambda b: b["profiles"]["h100"]["tts"].update(concurrent_calls=0),
            r"profiles.h100.tts.concurrent_calls: must be positive",
        ),
        (lambda b: b["profiles"]["h100"].pop("stt"), r"profiles.h100.stt: missing"),
        (
            lambda b: b["profiles"]["h100"].update(vad={"compute": "h100", "concurrent_calls": 1}),
            r"profiles.h100.vad: unknown stage",
        ),
        (lambda b: b["profiles"].update(h100="fast"), r"profiles.h100: expected a table"),
        (
            lambda b: b["profiles"]["h100"]["llm"].pop("prompt_tokens_per_s"),
            r"profiles.h100.llm.prompt_tokens_per_s: missing",
        ),
        (
            lambda b: b["profiles"]["h100"]["stt"].update(audio_s_per_s=0),
            r"profiles.h100.stt.audio_s_per_s: must be positive",
        ),
        (
            lambda b: b["profiles"]["h100"]["tts"].update(
                audio_s_per_s={"measured": "stt", "concurrency": 1}
            ),
            r"profiles.h100.tts.audio_s_per_s: .*stt.json: no option for tts",
        ),
        (
            lambda b: b["profiles"]["embedded-cpu"]["stt"]["audio_s_per_s"].pop("config"),
            r"profiles.embedded-cpu.stt.audio_s_per_s: .*2 options for stt",
        ),
        (
            lambda b: b["profiles"]["h100"].update(target_utilization=1.5),
            r"profiles.h100.target_utilization: must be in \(0, 1\]",
        ),
        (
            lambda b: b["profiles"]["h100"]["worker"].update(cores=0),
            r"profiles.h100.worker.cores: must be positive",
        ),
        (lambda b: b.pop("fallback_tts"), r"fallback_tts: missing"),
        (
            lambda b: b["telephony"]["usd_per_minute"].update(sip="cheap"),
            r"telephony.usd_per_minute.sip: expected a number",
        ),
    ],
    ids=[
        "no-version",
        "version-type",
        "currency",
        "target-type",
        "negative-price",
        "bool-price",
        "no-compute",
        "no-profiles",
        "unknown-compute",
        "zero-concurrency",
        "missing-stage",
        "unknown-stage",
        "profile-type",
        "half-a-throughput",
        "zero-throughput",
        "measured-stage-missing",
        "measured-ambiguous",
        "utilization",
        "worker-cores",
        "no-fallback",
        "telephony-type",
    ],
)
def test_malformed_book_names_the_key(
    raw: dict[str, Any], tmp_path: Path, change: Any, message: str
) -> None:
    change(raw)
    path = tmp_path / "bad.toml"
    path.write_text(_to_toml(raw))
    with pytest.raises(ValueError, match=message) as error:
        PriceBook.load(path)
    assert str(path) in str(error.value)


def test_file_that_is_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('version = "2026-12-01\n')
    with pytest.raises(ValueError, match="not valid TOML"):
        PriceBook.load(path)


def _to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """Enough of a TOML writer for price books (tomllib only reads)."""
    scalars, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            scalars.append(f"{_key(key)} = {_value(value)}")
    out = [f"[{prefix}]"] if prefix and (scalars or not tables) else []
    out += scalars
    text = "\n".join(out) + "\n"
    for key, value in tables:
        text += _to_toml(value, f"{prefix}.{_key(key)}" if prefix else _key(key))
    return text


def _key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else f'"{key}"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)
