from pathlib import Path

import pytest

from agent.config import ConfigError, Settings


def test_defaults_start_the_embedded_models():
    settings = Settings.from_env({})
    assert settings.embedded_models
    assert settings.database_url == "sqlite:///data/agent.db"
    assert settings.vad == "webrtc"
    assert settings.price_profile == "embedded-cpu"


def test_model_urls_together():
    env = {
        "STT_URL": "ws://stt:9000/v1/listen",
        "LLM_URL": "http://llm:8000/v1",
        "TTS_URL": "http://tts:9001/v1/speech",
        "DATABASE_URL": "postgresql://agent@db/agent",
        "VAD": "Silero",
        "PORT": "9090",
        "PRICE_BOOK": "/etc/agent/prices.toml",
    }
    settings = Settings.from_env(env)
    assert not settings.embedded_models
    assert settings.llm_url == "http://llm:8000/v1"
    assert settings.vad == "silero"
    assert settings.port == 9090
    assert settings.price_book == Path("/etc/agent/prices.toml")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STT_URL": "ws://x/v1/listen"}, "go together"),
        ({"VAD": "energy"}, "VAD must be one of"),
        ({"VAD_AGGRESSIVENESS": "7"}, "VAD_AGGRESSIVENESS"),
        ({"PORT": "eighty"}, "PORT must be an integer"),
        ({"VAD_STOP_SECS": "soon"}, "VAD_STOP_SECS must be a number"),
    ],
)
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_dotenv_is_read(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("PORT=9191\nVAD=silero\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PORT", raising=False)
    monkeypatch.delenv("VAD", raising=False)
    settings = Settings.from_env()
    assert settings.port == 9191
    assert settings.vad == "silero"
