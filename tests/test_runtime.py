from datetime import UTC, datetime

from sqlalchemy.orm import Session

from agent.config import Settings
from agent.ledger.pricebook import PriceBook
from agent.ledger.records import CallStarted
from agent.runtime.context import AgentRuntime, health_url
from agent.store.database import StoreWriter
from agent.store.tables import Call


def test_health_url_of_each_kind_of_model_url():
    assert health_url("ws://10.0.0.5:9000/v1/listen") == "http://10.0.0.5:9000/health"
    assert health_url("wss://stt.example/v1/listen") == "https://stt.example/health"
    assert health_url("http://llm:8000/v1") == "http://llm:8000/health"


async def test_start_migrates_marks_the_dead_process_calls_and_names_the_models(
    db_url, db_engine, tmp_path
):
    writer = StoreWriter(db_engine)
    writer.start()
    writer.submit(CallStarted("a" * 32, "webrtc", "inbound", datetime.now(UTC)))
    await writer.flush(10)
    writer.stop(5)

    settings = Settings.from_env({"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path)})
    async with AgentRuntime(settings, stub_models=True) as ctx:
        assert ctx.models.stt_model == "stub"
        assert ctx.prompts.version == "collections-v3"
        assert ctx.price_book.version == PriceBook.load().version  # the shipped book

    with Session(db_engine) as session:
        assert session.get(Call, "a" * 32).status == "abnormal"


async def test_start_readies_the_process_for_calls(db_url, tmp_path):
    import gc

    from telephony.rtp.sender import SENDER

    settings = Settings.from_env(
        {"DATABASE_URL": db_url, "DATA_DIR": str(tmp_path), "SIP_PORT": "0"}
    )
    async with AgentRuntime(settings, stub_models=True):
        # The RTP sender is up and has said whether it has real-time priority.
        assert SENDER.pid is not None and SENDER.refused != ""
        # What start built is out of the collector's way.
        assert gc.get_freeze_count() > 0
