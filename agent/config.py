"""Settings from environment variables and an optional ``.env`` file.

Every knob of the agent is an environment variable so that the same code runs
on a laptop (nothing set: the embedded CPU models and a SQLite file) and in a
cluster (model URLs, a PostgreSQL URL). The README lists them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dotenv import load_dotenv

VAD_KINDS = ("webrtc", "silero")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable."""


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


def _int(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None


@dataclass(frozen=True)
class Settings:
    """What one agent process is configured with."""

    host: str = "127.0.0.1"
    port: int = 8080
    database_url: str = "sqlite:///data/agent.db"
    data_dir: Path = Path("data")
    # Model servers. All three unset: the embedded CPU servers are started.
    stt_url: str | None = None
    llm_url: str | None = None
    tts_url: str | None = None
    llm_model: str = "gemma-3-270m"
    llm_api_key: str = "none"
    llm_max_tokens: int = 40
    # Listening.
    vad: str = "webrtc"
    vad_aggressiveness: int = 2
    vad_start_secs: float = 0.2
    vad_stop_secs: float = 0.2
    audio_in_sample_rate: int = 16000
    audio_out_sample_rate: int = 16000
    # Cost accounting.
    price_book: Path | None = None
    price_profile: str = "embedded-cpu"
    prompt_version: str = "collections-v1"

    @property
    def embedded_models(self) -> bool:
        """No model URL configured: start the CPU model servers ourselves."""
        return not (self.stt_url or self.llm_url or self.tts_url)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, dotenv: bool = True) -> Settings:
        """Read settings from ``env`` (default: the process environment plus ``.env``)."""
        if env is None:
            if dotenv:
                load_dotenv(Path.cwd() / ".env", override=False)
            env = dict(os.environ)
        urls = [env.get(n) or None for n in ("STT_URL", "LLM_URL", "TTS_URL")]
        if any(urls) and not all(urls):
            raise ConfigError(
                "STT_URL, LLM_URL and TTS_URL go together: set all three, or none to "
                "start the embedded CPU models"
            )
        vad = env.get("VAD", "webrtc").lower()
        if vad not in VAD_KINDS:
            raise ConfigError(f"VAD must be one of {', '.join(VAD_KINDS)}, got {vad!r}")
        aggressiveness = _int(env, "VAD_AGGRESSIVENESS", 2)
        if not 0 <= aggressiveness <= 3:
            raise ConfigError(f"VAD_AGGRESSIVENESS must be 0..3, got {aggressiveness}")
        price_book = env.get("PRICE_BOOK")
        return cls(
            host=env.get("HOST", "127.0.0.1"),
            port=_int(env, "PORT", 8080),
            database_url=env.get("DATABASE_URL") or "sqlite:///data/agent.db",
            data_dir=Path(env.get("DATA_DIR", "data")),
            stt_url=urls[0],
            llm_url=urls[1],
            tts_url=urls[2],
            llm_model=env.get("LLM_MODEL", "gemma-3-270m"),
            llm_api_key=env.get("LLM_API_KEY", "none"),
            llm_max_tokens=_int(env, "LLM_MAX_TOKENS", 40),
            vad=vad,
            vad_aggressiveness=aggressiveness,
            vad_start_secs=_float(env, "VAD_START_SECS", 0.2),
            vad_stop_secs=_float(env, "VAD_STOP_SECS", 0.2),
            price_book=Path(price_book) if price_book else None,
            price_profile=env.get("PRICE_PROFILE", "embedded-cpu"),
            prompt_version=env.get("PROMPT_VERSION", "collections-v1"),
        )
