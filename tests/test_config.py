import dataclasses
from pathlib import Path
from typing import Any

import pytest

from agent.config import ConfigError, Settings, hide_password


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
        "SMART_TURN_URL": "http://127.0.0.1:8004/v1/end-of-turn",
    }
    settings = Settings.from_env(env)
    assert not settings.embedded_models
    assert settings.smart_turn_url == "http://127.0.0.1:8004/v1/end-of-turn"
    assert settings.llm_url == "http://llm:8000/v1"
    assert settings.vad == "silero"
    assert settings.port == 9090
    assert settings.price_book == Path("/etc/agent/prices.toml")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STT_URL": "ws://x/v1/listen"}, "go together"),
        ({"VAD": "energy"}, "VAD must be one of"),
        ({"SMART_TURN_URL": "127.0.0.1:8004"}, "SMART_TURN_URL must be an http"),
        ({"VAD_AGGRESSIVENESS": "7"}, "VAD_AGGRESSIVENESS"),
        ({"PORT": "eighty"}, "PORT must be an integer"),
        ({"VAD_STOP_SECS": "soon"}, "VAD_STOP_SECS must be a number"),
        ({"TURN_FALLBACK_SECS": "0"}, "TURN_FALLBACK_SECS must be a positive number"),
        ({"TURN_FALLBACK_SECS": "later"}, "TURN_FALLBACK_SECS must be a number"),
        ({"LLM_MODE": "free"}, "LLM_MODE must be one of"),
        ({"SIP_PORT": "70000"}, "SIP_PORT must be"),
        ({"SIP_ALLOW": "10.0.0.0/8,trunk"}, "SIP_ALLOW: 'trunk'"),
        ({"SIP_CREDENTIALS": "alice"}, "user:password"),
        ({"SIP_TRUNK": "trunk.example.com"}, "sip: URI"),
        ({"SIP_TRUNK_USERNAME": "acct"}, "go together"),
        ({"SIP_SYMMETRIC_RTP": "yes"}, "SIP_SYMMETRIC_RTP must be auto, on or off"),
        ({"TRANSFER_TARGET": "collectors"}, "TRANSFER_TARGET must be"),
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


def test_sip_is_off_unless_a_port_is_set():
    assert Settings.from_env({}).sip_port is None
    settings = Settings.from_env(
        {
            "SIP_PORT": "5060",
            "SIP_HOST": "10.1.2.3",
            "SIP_ALLOW": "203.0.113.0/24, 198.51.100.7",
            "SIP_CREDENTIALS": "pbx:s3cret",
            "SIP_TRUNK": "sip:trunk.example.com:5060",
            "SIP_TRUNK_USERNAME": "acct",
            "SIP_TRUNK_PASSWORD": "pw",
            "SIP_SYMMETRIC_RTP": "Off",
        }
    )
    assert Settings.from_env({}).sip_symmetric_rtp == "auto"
    assert settings.sip_symmetric_rtp == "off"
    assert (settings.sip_host, settings.sip_port) == ("10.1.2.3", 5060)
    assert settings.sip_allow == ("203.0.113.0/24", "198.51.100.7")
    assert settings.sip_credentials == {"pbx": "s3cret"}
    assert settings.sip_trunk_auth == ("acct", "pw")
    assert "s3cret" not in repr(settings) and "pw" not in repr(settings)


def test_speculation_is_on_unless_turned_off():
    assert Settings.from_env({}).llm_speculation
    assert not Settings.from_env({"LLM_SPECULATION": "0"}).llm_speculation


# -- secrets in the repr -----------------------------------------------------------------

#: Words of a setting's name that say its value is a secret.
SECRET_NAMES = {"key", "secret", "token", "password", "credentials", "auth"}


def _secret_value(setting: dataclasses.Field[Any], secret: str) -> object:
    """``secret`` in the shape the setting holds (a user -> password dict, a pair, a string)."""
    kind = str(setting.type)
    if kind.startswith("dict"):
        return {"user": secret}
    if kind.startswith("tuple"):
        return ("user", secret)
    return secret


def test_no_secret_setting_shows_in_the_repr():
    secrets = [f for f in dataclasses.fields(Settings) if SECRET_NAMES & set(f.name.split("_"))]
    names = {f.name for f in secrets}
    assert {"llm_api_key", "twilio_auth_token", "livekit_api_secret", "sip_trunk_auth"} <= names
    assert "llm_max_tokens" not in names  # a count, not a token
    values = {f.name: _secret_value(f, f"S3cr3t-{f.name}") for f in secrets}
    shown = repr(dataclasses.replace(Settings(), **values))
    for name in names:
        assert f"S3cr3t-{name}" not in shown
        assert f"{name}='***'" in shown  # whether it is set still shows
    assert "tts_fallback_api_key=None" in repr(Settings())
    assert str(Settings()) == repr(Settings())


def test_no_url_setting_shows_its_password_in_the_repr():
    urls = [f.name for f in dataclasses.fields(Settings) if f.name.endswith("_url")]
    assert {"database_url", "llm_url", "public_url", "livekit_url"} <= set(urls)
    values = {name: f"https://agent:pw-{name}@host.example:8443/v1?x=1" for name in urls}
    values["database_url"] = "postgresql+psycopg://agent:hunter2@db:5432/agent?sslmode=require"
    shown = repr(dataclasses.replace(Settings(), **values))
    assert "hunter2" not in shown and "pw-" not in shown
    assert "'postgresql+psycopg://agent:***@db:5432/agent?sslmode=require'" in shown
    assert "'https://agent:***@host.example:8443/v1?x=1'" in shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://agent:s3cret@db/agent", "postgresql://agent:***@db/agent"),
        ("postgresql://agent:p@ss/w0rd@db/agent", "postgresql://agent:***@db/agent"),
        ("postgresql://:s3cret@db/agent", "postgresql://:***@db/agent"),
        (
            "postgresql://db/agent?user=a&password=s3cret",
            "postgresql://db/agent?user=a&password=***",
        ),
        ("https://llm.example/v1?api_key=s3cret&x=1", "https://llm.example/v1?api_key=***&x=1"),
        ("sip:acct:s3cret@trunk.example.com:5060", "sip:acct:***@trunk.example.com:5060"),
        # Nothing to hide: shown as it is.
        ("postgresql://agent@db:5432/agent", "postgresql://agent@db:5432/agent"),
        ("sqlite:///data/agent.db", "sqlite:///data/agent.db"),
        ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8001/v1"),
        ("sip:trunk.example.com:5060", "sip:trunk.example.com:5060"),
    ],
)
def test_hide_password(url, shown):
    assert hide_password(url) == shown
