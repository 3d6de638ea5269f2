"""agent.ledger.pricebook: the shipped book, the cost of a call checked by hand, bad books."""

from __future__ import annotations

import ast
import copy
import datetime as dt
import tomllib
from pathlib import Path
from typing import Any

import pytest

from agent.ledger.pricebook import DEFAULT_PATH, CallUsage, PriceBook, price_call
from agent.ledger.records import TRANSPORTS, CallStarted, new_call_id
from telephony.carriers.media_stream import CARRIERS

ROOT = Path(__file__).resolve().parent.parent

COMPONENTS = ["telephony", "stt", "llm", "tts", "tts_fallback"]


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
    assert book.version == "2026-12-01"
    assert book.currency == "USD"
    assert book.target_usd_per_minute == 0.04
    assert book.compute_usd_per_hour == {"h100": 2.49, "h200": 3.50, "cpu-2core": 0.10}
    assert set(book.profiles) >= {"embedded-cpu", "h100"}
    assert book.fallback_tts_usd_per_1k_characters == 0.05
    assert book.telephony_rate("sip") == 0.0045
    assert book.telephony_rate("webrtc") == 0.0


def test_loads_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert PriceBook.load().version == "2026-12-01"


def test_two_minute_webrtc_call_on_embedded_cpu(book: PriceBook) -> None:
    cost = price_call(book, "embedded-cpu", CallUsage("webrtc", 120.0))
    # Each stage: $0.10/h / 60 / 1 call = $0.0016667 per call minute, x 2 minutes.
    assert [line.component for line in cost.lines] == COMPONENTS
    assert amounts(cost) == pytest.approx(
        {"telephony": 0.0, "stt": 0.0033333, "llm": 0.0033333, "tts": 0.0033333, "tts_fallback": 0},
        abs=1e-7,
    )
    stt = cost.lines[1]
    assert (stt.quantity, stt.unit) == (2.0, "call_minute")
    assert stt.unit_price_usd == pytest.approx(0.10 / 60)
    assert cost.total_usd == pytest.approx(0.01)
    assert cost.per_minute_usd == pytest.approx(0.005)
    assert cost.price_book_version == "2026-12-01"
    assert cost.target_usd_per_minute == 0.04
    assert cost.within_target


def test_two_minute_webrtc_call_on_h100(book: PriceBook) -> None:
    cost = price_call(book, "h100", CallUsage("webrtc", 120.0))
    # $2.49/h / 60 = $0.0415 per GPU minute, shared by the calls one GPU serves:
    # stt / 200 = 0.0002075, llm / 60 = 0.00069167, tts / 40 = 0.0010375 per call minute.
    assert amounts(cost) == pytest.approx(
        {"telephony": 0.0, "stt": 0.000415, "llm": 0.00138333, "tts": 0.002075, "tts_fallback": 0},
        abs=1e-8,
    )
    assert cost.total_usd == pytest.approx(0.00387333, abs=1e-8)
    assert cost.per_minute_usd == pytest.approx(0.00193667, abs=1e-8)
    assert cost.within_target


def test_fallback_tts_is_priced_by_characters(book: PriceBook) -> None:
    cost = price_call(book, "h100", CallUsage("webrtc", 120.0, fallback_tts_characters=2000))
    fallback = cost.lines[-1]
    assert (fallback.component, fallback.quantity, fallback.unit) == (
        "tts_fallback",
        2.0,
        "1k_characters",
    )
    assert fallback.amount_usd == pytest.approx(0.10)  # 2 x $0.05
    assert cost.total_usd == pytest.approx(0.10387333, abs=1e-8)
    assert cost.per_minute_usd == pytest.approx(0.05193667, abs=1e-8)
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
    assert [line.component for line in cost.lines] == COMPONENTS
    assert all(line.amount_usd == 0 for line in cost.lines)
    assert cost.total_usd == 0
    assert cost.per_minute_usd is None
    assert cost.within_target


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


def test_changed_book_reprices(raw: dict[str, Any], tmp_path: Path) -> None:
    raw = copy.deepcopy(raw)
    raw["version"] = "2027-01-01"
    raw["compute"]["h100"] = 1.80
    path = tmp_path / "book.toml"
    path.write_text(_to_toml(raw))
    book = PriceBook.load(path)
    cost = price_call(book, "h100", CallUsage("webrtc", 60.0))
    assert cost.price_book_version == "2027-01-01"
    assert cost.lines[1].amount_usd == pytest.approx(1.80 / 60 / 200)


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
