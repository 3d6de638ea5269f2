"""Settings from environment variables and an optional ``.env`` file.

Every knob of the agent is an environment variable so that the same code runs
on a laptop (nothing set: the embedded CPU models and a SQLite file) and in a
cluster (model URLs, a PostgreSQL URL). The README lists them all.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from dotenv import load_dotenv
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

VAD_KINDS = ("webrtc", "silero")
#: ``templates``: the policy's fixed texts only (the CPU default: the 270M model cannot
#: follow instructions); ``phrase``: the LLM phrases the policy's open questions and may
#: call its tools (production, agent/pipeline/phrasing.py).
LLM_MODES = ("templates", "phrase")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable."""


#: Words that make a setting's value a secret (``twilio_auth_token``, ``sip_credentials``):
#: its repr shows whether it is set, never what it is.
SECRET_WORDS = frozenset({"key", "secret", "token", "password", "credentials", "auth"})
#: ``scheme://user:password@`` (or ``sip:user:password@``): everything up to the last ``@``
#: is taken as the password, so that one with an unescaped ``@`` or ``/`` is hidden too.
_URL_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*:(?://)?[^:@/]*):.*@", re.IGNORECASE | re.DOTALL)
#: A query parameter that carries a secret (libpq's ``?password=``, an ``?api_key=``).
_QUERY_SECRET = re.compile(r"([?&][^=&#]*(?:key|secret|token|password)[^=&#]*=)[^&#]*", re.I)


def hide_password(url: str) -> str:
    """``url`` as logs and the terminal may show it: its password and secret query
    parameters replaced by ``***``."""
    return _QUERY_SECRET.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", url, count=1))


def is_secret(name: str) -> bool:
    """Whether the setting ``name`` holds a secret, by the words of its name."""
    return not SECRET_WORDS.isdisjoint(name.split("_"))


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


def _positive(env: dict[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value}")
    return value


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    value = _float(env, name, default)
    if value <= 0:
        raise ConfigError(f"{name} must be a positive number of seconds, got {value:g}")
    return value


def _bool(env: dict[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1/0 (or true/false), got {raw!r}")


def _tts_fallback(env: dict[str, str]) -> dict[str, Any]:
    """The TTS fallback's settings; a configured vendor needs its API key and a voice."""
    vendor = (env.get("TTS_FALLBACK") or "none").lower()
    if vendor not in ("none", "cartesia"):
        raise ConfigError(f"TTS_FALLBACK must be cartesia or none, got {vendor!r}")
    key = env.get("TTS_FALLBACK_API_KEY") or env.get("CARTESIA_API_KEY") or None
    voice = env.get("TTS_FALLBACK_VOICE") or None
    if vendor != "none" and not (key and voice):
        raise ConfigError(
            "TTS_FALLBACK=cartesia needs TTS_FALLBACK_API_KEY (or CARTESIA_API_KEY) "
            "and TTS_FALLBACK_VOICE (a Cartesia voice id)"
        )
    deadline = _int(env, "TTS_FALLBACK_DEADLINE_MS", 200)
    failures = _int(env, "TTS_FALLBACK_BREAKER_FAILURES", 3)
    if deadline <= 0 or failures < 1:
        raise ConfigError(
            "TTS_FALLBACK_DEADLINE_MS must be positive and TTS_FALLBACK_BREAKER_FAILURES >= 1"
        )
    return {
        "tts_fallback": vendor,
        "tts_fallback_url": env.get("TTS_FALLBACK_URL") or "wss://api.cartesia.ai/tts/websocket",
        "tts_fallback_api_key": key,
        "tts_fallback_voice": voice,
        "tts_fallback_model": env.get("TTS_FALLBACK_MODEL") or "sonic-3.6",
        "tts_fallback_deadline_ms": deadline,
        "tts_fallback_breaker_failures": failures,
        "tts_fallback_probe_s": _float(env, "TTS_FALLBACK_PROBE_S", 5.0),
    }


def _sip(env: dict[str, str]) -> dict[str, Any]:
    """The SIP endpoint's settings: off unless ``SIP_PORT`` is set."""
    port = _int(env, "SIP_PORT", -1)
    if not -1 <= port <= 65535:
        raise ConfigError(f"SIP_PORT must be 0..65535 (0: any free port), got {port}")
    allow = tuple(n.strip() for n in (env.get("SIP_ALLOW") or "").split(",") if n.strip())
    for net in allow:
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise ConfigError(f"SIP_ALLOW: {net!r} is not an address or network") from None
    credentials: dict[str, str] = {}
    for entry in (env.get("SIP_CREDENTIALS") or "").split(","):
        if not entry.strip():
            continue
        user, sep, password = entry.strip().partition(":")
        if not (sep and user and password):
            raise ConfigError("SIP_CREDENTIALS must be user:password pairs, comma-separated")
        credentials[user] = password
    trunk = env.get("SIP_TRUNK") or None
    if trunk is not None and not trunk.startswith("sip:"):
        raise ConfigError(
            f"SIP_TRUNK must be a sip: URI like sip:trunk.example.com:5060, got {trunk!r}"
        )
    transfer = env.get("TRANSFER_TARGET") or None
    if transfer is not None and not transfer.startswith(("sip:", "tel:")):
        raise ConfigError(f"TRANSFER_TARGET must be a sip: or tel: URI, got {transfer!r}")
    trunk_user = env.get("SIP_TRUNK_USERNAME") or ""
    trunk_password = env.get("SIP_TRUNK_PASSWORD") or ""
    if bool(trunk_user) != bool(trunk_password):
        raise ConfigError("SIP_TRUNK_USERNAME and SIP_TRUNK_PASSWORD go together")
    symmetric = (env.get("SIP_SYMMETRIC_RTP") or "auto").strip().lower()
    if symmetric not in ("auto", "on", "off"):
        raise ConfigError(f"SIP_SYMMETRIC_RTP must be auto, on or off, got {symmetric!r}")
    # RFC 4028: a Min-SE under 90 s is not to be asked for; the interval is at least it.
    min_se = _int(env, "SIP_MIN_SE_S", 90)
    if min_se < 90:
        raise ConfigError(f"SIP_MIN_SE_S must be at least 90 (RFC 4028), got {min_se}")
    session_expires = _int(env, "SIP_SESSION_EXPIRES_S", max(1800, min_se))
    if session_expires < min_se:
        raise ConfigError(
            f"SIP_SESSION_EXPIRES_S must be at least SIP_MIN_SE_S ({min_se}), got {session_expires}"
        )
    return {
        "sip_host": env.get("SIP_HOST") or env.get("HOST") or "127.0.0.1",
        "sip_port": None if port == -1 else port,
        "sip_allow": allow,
        "sip_credentials": credentials,
        "sip_trunk": trunk,
        "sip_trunk_auth": (trunk_user, trunk_password) if trunk_user else None,
        "sip_symmetric_rtp": symmetric,
        "rtp_timeout_s": _seconds(env, "RTP_TIMEOUT_S", 30.0),
        "sip_session_expires_s": session_expires,
        "sip_min_se_s": min_se,
        "transfer_target": transfer,
    }


def _recording(env: dict[str, str], database_url: str, data_dir: Path) -> dict[str, Any]:
    """Where call recordings go (agent/pipeline/recording.py): unset, a ``recordings/`` directory
    beside the SQLite database (under ``DATA_DIR`` with another database); empty or
    ``off``, nowhere: calls are not recorded."""
    raw = env.get("RECORDING_STORE")
    endpoint = env.get("S3_ENDPOINT_URL") or None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"S3_ENDPOINT_URL must be an http(s):// URL, got {endpoint!r}")
    store: str | None
    if raw is None:
        try:
            url = make_url(database_url)
            database = url.database if url.get_backend_name() == "sqlite" else None
        except (ArgumentError, ValueError):  # reported where the database is opened
            database = None
        beside = Path(database).parent if database and database != ":memory:" else data_dir
        store = str(beside / "recordings")
    elif raw.strip().lower() in ("", "off", "none"):
        store = None
    else:
        store = raw.strip()
        parts = urlsplit(store)
        if parts.scheme == "s3":
            if not parts.netloc:
                raise ConfigError(f"RECORDING_STORE: s3://bucket/prefix needs a bucket: {raw!r}")
        elif parts.scheme == "file":
            store = url2pathname(parts.path)
        elif parts.scheme:
            raise ConfigError(
                f"RECORDING_STORE must be a directory, a file:// URL, s3://bucket/prefix "
                f"or off, got {raw!r}"
            )
    return {"recording_store": store, "s3_endpoint_url": endpoint}


@dataclass(frozen=True, repr=False)
class Settings:
    """What one agent process is configured with; its repr hides the secrets (``__repr__``)."""

    host: str = "127.0.0.1"
    port: int = 8080
    database_url: str = "sqlite:///data/agent.db"
    data_dir: Path = Path("data")
    # Model servers. All three unset: the embedded CPU servers are started.
    stt_url: str | None = None
    llm_url: str | None = None
    tts_url: str | None = None
    #: The host's smart-turn service (infra/smart_turn_server.py); unset, the agent starts
    #: it (``serve --workers`` once for all its workers).
    smart_turn_url: str | None = None
    llm_model: str = "gemma-3-270m"
    llm_api_key: str = "none"
    llm_max_tokens: int = 40
    llm_mode: str = "templates"
    #: Production mode: the LLM's first words later than this, the policy's text is said.
    llm_phrase_deadline_ms: int = 200
    #: In phrase mode, ask the LLM at the transcript, before the turn is committed.
    llm_speculation: bool = True
    # Listening.
    vad: str = "webrtc"
    vad_aggressiveness: int = 2
    vad_start_secs: float = 0.2
    vad_stop_secs: float = 0.3
    #: Silence after which a turn smart-turn still calls unfinished ends anyway (pipecat's
    #: default is 3 s: docs/benchmarks/endpointing.md measures what 1 s costs and saves).
    turn_fallback_secs: float = 1.0
    audio_in_sample_rate: int = 16000
    audio_out_sample_rate: int = 16000
    # Cost accounting.
    price_book: Path | None = None
    price_profile: str = "embedded-cpu"
    prompt_version: str = "collections-v3"
    # The TTS fallback adapter's vendor (agent/pipeline/tts_fallback.py); "none": the
    # primary alone, no adapter.
    tts_fallback: str = "none"
    tts_fallback_url: str = "wss://api.cartesia.ai/tts/websocket"
    tts_fallback_api_key: str | None = None
    tts_fallback_voice: str | None = None
    tts_fallback_model: str = "sonic-3.6"
    tts_fallback_deadline_ms: int = 200
    tts_fallback_breaker_failures: int = 3
    tts_fallback_probe_s: float = 5.0
    # Carriers and rooms (docs/carriers.md); the secrets come from the environment only.
    public_url: str | None = None
    twilio_account_sid: str | None = None
    twilio_auth_token: str | None = None
    telnyx_api_key: str | None = None
    #: Verifies Telnyx's webhook signatures (base64 Ed25519, from the Telnyx portal).
    telnyx_public_key: str | None = None
    carrier_hang_up: bool = True
    livekit_url: str | None = None
    livekit_api_key: str | None = None
    livekit_api_secret: str | None = None
    #: Console cookies are Secure (and ``__Host-``): on behind HTTPS, off on a developer's
    #: plain-HTTP loopback.
    secure_cookies: bool = False
    #: Behind ``serve --workers`` (agent/runtime/supervisor.py): the caller's address is the last of
    #: ``X-Forwarded-For`` on requests from loopback (the entry), not the entry's own.
    trust_forwarded_for: bool = False
    #: This worker's name on its calls' rows (the host's name: a pod's); unique per worker.
    worker_id: str = field(default_factory=socket.gethostname)
    #: The most calls this worker carries at once; more are refused (SIP 503, HTTP 503)
    #: so the edge sends them to another worker. The embedded CPU models serve about one.
    max_calls: int = 4
    #: The call page (``/api/offer``): calls at once from one address, and in all, so that
    #: anyone on the web cannot take the slots that callers need.
    call_page_calls_per_address: int = 2
    call_page_max_calls: int = 2
    #: On SIGTERM (or ``POST /drain``): how long calls in progress may go on before they
    #: are ended; the orchestrator's grace period must be longer.
    drain_timeout_s: float = 300.0
    # A call's limits (agent/pipeline/limits.py): each frees the call's slot and ends its record.
    #: A line that does not connect in this long ends the call (``never_connected``).
    connect_timeout_s: float = 10.0
    #: The longest a call may last (``max_duration``); collections calls take minutes.
    max_call_s: float = 1800.0
    #: So long with neither side speaking ends the call (``silence``).
    max_silence_s: float = 60.0
    # The SIP endpoint (telephony/sip/): off when sip_port is None.
    sip_host: str = "127.0.0.1"
    sip_port: int | None = None
    #: Sources that may call without a digest challenge (a trunk's or PBX's addresses).
    sip_allow: tuple[str, ...] = ()
    #: user -> password of the callers that may answer our digest challenge.
    sip_credentials: dict[str, str] = field(default_factory=dict)
    #: Where outbound calls go (the trunk), and our credentials for its challenges.
    sip_trunk: str | None = None
    sip_trunk_auth: tuple[str, str] | None = None
    #: Symmetric RTP (telephony/rtp/session.py's ``Latch``): auto (callers that look to be behind
    #: NAT), on or off.
    sip_symmetric_rtp: str = "auto"
    #: A SIP call whose caller's RTP stops this long (not while on hold) ends (media_timeout).
    rtp_timeout_s: float = 30.0
    #: RFC 4028 session timers: the interval a SIP call asks for (or is given) and the least
    #: it accepts (a shorter one asked for is answered 422). An unrefreshed call is hung up
    #: (``session_expired``).
    sip_session_expires_s: int = 1800
    sip_min_se_s: int = 90
    #: Where a call goes when the caller wants a person (a SIP URI: the collectors' queue).
    transfer_target: str | None = None
    #: Where call recordings go (agent/pipeline/recording.py): a directory or s3://bucket/prefix;
    #: None: calls are not recorded.
    recording_store: str | None = "data/recordings"
    #: An S3-compatible store's endpoint (MinIO, Ceph, R2); None: AWS S3 itself.
    s3_endpoint_url: str | None = None

    def __repr__(self) -> str:
        """Every setting, with each secret as ``'***'`` when set and each URL's password
        hidden: a repr ends up in logs and in tracebacks."""
        shown = []
        for setting in fields(self):
            value = getattr(self, setting.name)
            if value and is_secret(setting.name):
                value = "***"
            elif isinstance(value, str):
                value = hide_password(value)
            shown.append(f"{setting.name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

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
        smart_turn_url = env.get("SMART_TURN_URL") or None
        if smart_turn_url is not None and not smart_turn_url.startswith(("http://", "https://")):
            raise ConfigError(
                "SMART_TURN_URL must be an http(s):// URL like "
                f"http://127.0.0.1:8004/v1/end-of-turn, got {smart_turn_url!r}"
            )
        vad = env.get("VAD", "webrtc").lower()
        if vad not in VAD_KINDS:
            raise ConfigError(f"VAD must be one of {', '.join(VAD_KINDS)}, got {vad!r}")
        aggressiveness = _int(env, "VAD_AGGRESSIVENESS", 2)
        if not 0 <= aggressiveness <= 3:
            raise ConfigError(f"VAD_AGGRESSIVENESS must be 0..3, got {aggressiveness}")
        price_book = env.get("PRICE_BOOK")
        database_url = env.get("DATABASE_URL") or "sqlite:///data/agent.db"
        data_dir = Path(env.get("DATA_DIR", "data"))
        llm_mode = env.get("LLM_MODE", "templates").lower()
        if llm_mode not in LLM_MODES:
            raise ConfigError(f"LLM_MODE must be one of {', '.join(LLM_MODES)}, got {llm_mode!r}")
        return cls(
            host=env.get("HOST", "127.0.0.1"),
            port=_int(env, "PORT", 8080),
            database_url=database_url,
            data_dir=data_dir,
            stt_url=urls[0],
            llm_url=urls[1],
            tts_url=urls[2],
            smart_turn_url=smart_turn_url,
            llm_model=env.get("LLM_MODEL", "gemma-3-270m"),
            llm_api_key=env.get("LLM_API_KEY", "none"),
            llm_max_tokens=_int(env, "LLM_MAX_TOKENS", 40),
            llm_mode=llm_mode,
            llm_phrase_deadline_ms=_positive(env, "LLM_PHRASE_DEADLINE_MS", 200),
            llm_speculation=_bool(env, "LLM_SPECULATION", True),
            vad=vad,
            vad_aggressiveness=aggressiveness,
            vad_start_secs=_float(env, "VAD_START_SECS", 0.2),
            vad_stop_secs=_float(env, "VAD_STOP_SECS", 0.3),
            turn_fallback_secs=_seconds(env, "TURN_FALLBACK_SECS", 1.0),
            price_book=Path(price_book) if price_book else None,
            price_profile=env.get("PRICE_PROFILE", "embedded-cpu"),
            prompt_version=env.get("PROMPT_VERSION", "collections-v3"),
            **_tts_fallback(env),
            public_url=env.get("PUBLIC_URL") or None,
            secure_cookies=_bool(
                env, "SECURE_COOKIES", (env.get("PUBLIC_URL") or "").startswith("https://")
            ),
            twilio_account_sid=env.get("TWILIO_ACCOUNT_SID") or None,
            twilio_auth_token=env.get("TWILIO_AUTH_TOKEN") or None,
            telnyx_api_key=env.get("TELNYX_API_KEY") or None,
            telnyx_public_key=env.get("TELNYX_PUBLIC_KEY") or None,
            carrier_hang_up=_bool(env, "CARRIER_HANG_UP", True),
            trust_forwarded_for=_bool(env, "TRUST_FORWARDED_FOR", False),
            worker_id=(env.get("WORKER_ID") or socket.gethostname())[:64],
            max_calls=_positive(env, "MAX_CALLS", 4),
            call_page_calls_per_address=_positive(env, "CALL_PAGE_CALLS_PER_ADDRESS", 2),
            call_page_max_calls=_positive(env, "CALL_PAGE_MAX_CALLS", 2),
            drain_timeout_s=_float(env, "DRAIN_TIMEOUT_S", 300.0),
            connect_timeout_s=_seconds(env, "CONNECT_TIMEOUT_S", 10.0),
            max_call_s=_seconds(env, "MAX_CALL_S", 1800.0),
            max_silence_s=_seconds(env, "MAX_SILENCE_S", 60.0),
            livekit_url=env.get("LIVEKIT_URL") or None,
            livekit_api_key=env.get("LIVEKIT_API_KEY") or None,
            livekit_api_secret=env.get("LIVEKIT_API_SECRET") or None,
            **_sip(env),
            **_recording(env, database_url, data_dir),
        )
