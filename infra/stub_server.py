"""All three model protocols on one port, answered instantly, for measuring the agent itself.

A benchmark run against this server shows what the agent's own orchestration costs, with
the models' time taken out. The STT and TTS protocols run through the real servers' code
with stand-in backends; only the chat completions endpoint is written here, since the real
one is llama-cpp-python's. Not for feature tests: those use the real models.

Run: ``python -m infra.stub_server --host 127.0.0.1 --port 8009``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from aiohttp import web

from infra.serving import RequestError, json_object, parse_server_arguments, server_arguments
from infra.stt_server import add_listen_route, open_streams
from infra.tts_server import add_speech_route

logger = logging.getLogger(__name__)

DEFAULT_TRANSCRIPT = "yes that is me"
DEFAULT_REPLY = "Thank you. How can I help you today?"
STUB_MODEL = "stub"
#: The environment variable that sets the stub LLM's time to first token (ms).
FIRST_TOKEN_ENV = "STUB_LLM_FIRST_TOKEN_MS"


class FixedTranscriber:
    """Hears the same words in any audio."""

    name = STUB_MODEL

    def __init__(self, text: str = DEFAULT_TRANSCRIPT) -> None:
        self.text = text

    def transcribe(self, audio: np.ndarray) -> str:
        return self.text

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        return [self.text for _ in audios]


class ToneSynthesizer:
    """Says anything as a short beep: 440 Hz at a quarter of full scale."""

    name = "stub-tone"
    sample_rate = 16000
    concurrent_streams = 4  # a precomputed array: nothing to serialize

    def __init__(self, seconds: float = 0.3, frequency: float = 440.0) -> None:
        t = np.arange(int(seconds * self.sample_rate)) / self.sample_rate
        self._tone = (0.25 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        yield self._tone


def _parse_chat_request(body: bytes) -> dict[str, Any]:
    request = json_object(body)
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("invalid request: messages must be a non-empty list")
    if not all(isinstance(message, dict) and "role" in message for message in messages):
        raise RequestError("invalid request: each message must be an object with a role")
    return request


def _words(text: str) -> list[str]:
    """The reply cut into word-sized deltas, as a tokenizer would stream it."""
    return re.findall(r"\s*\S+", text)


class StubChat:
    """``POST /v1/chat/completions`` with a fixed reply, streamed as OpenAI SSE chunks,
    its first word ``first_token_s`` after the request (a real server's time to first
    token, for ``bench speculation``)."""

    def __init__(self, reply: str = DEFAULT_REPLY, first_token_s: float = 0.0) -> None:
        self.reply = reply
        self.first_token_s = first_token_s

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        try:
            body = _parse_chat_request(await request.read())
        except RequestError as error:
            return web.json_response(
                {"error": {"message": str(error), "type": "invalid_request_error"}}, status=400
            )
        started = time.perf_counter()
        model = body.get("model") or STUB_MODEL
        usage = self._usage(body["messages"])
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": self.reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": _timed(usage, started),
                }
            )
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def choice(delta: dict[str, str], finish_reason: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": delta, "finish_reason": finish_reason}

        await send([choice({"role": "assistant", "content": ""})])
        await asyncio.sleep(self.first_token_s)
        for word in _words(self.reply):
            await send([choice({"content": word})])
        await send([choice({}, "stop")])
        if (body.get("stream_options") or {}).get("include_usage"):
            await send([], usage=_timed(usage, started))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _usage(self, messages: list[dict[str, Any]]) -> dict[str, int]:
        """Word counts standing in for token counts."""
        prompt = sum(len(str(message.get("content") or "").split()) for message in messages)
        completion = len(_words(self.reply))
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }


def _timed(usage: dict[str, int], started: float) -> dict[str, Any]:
    """The usage with the request's time as its model time, as the real server reports it
    (here the stand-in's wait for its first word, and nothing else)."""
    return {**usage, "compute_ms": round((time.perf_counter() - started) * 1000, 3)}


def create_app(
    transcript: str = DEFAULT_TRANSCRIPT, reply: str = DEFAULT_REPLY, first_token_s: float = 0.0
) -> web.Application:
    """``/health``, ``/v1/listen``, ``/v1/speech``, ``/v1/chat/completions``, ``/v1/models``."""
    synthesizer = ToneSynthesizer()

    async def health(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "model": STUB_MODEL,
                "voice": synthesizer.name,
                "sample_rate": synthesizer.sample_rate,
                "open_streams": open_streams(request.app),
            }
        )

    async def models(request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": STUB_MODEL, "object": "model", "owned_by": "me"}]}
        )

    app = web.Application()
    app.router.add_get("/health", health)
    add_listen_route(app, FixedTranscriber(transcript))
    add_speech_route(app, synthesizer)
    app.router.add_post("/v1/chat/completions", StubChat(reply, first_token_s))
    app.router.add_get("/v1/models", models)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = server_arguments("Instant stand-ins for the STT, LLM and TTS servers.")
    parser.add_argument("--transcript", default=DEFAULT_TRANSCRIPT, help="what every turn says")
    parser.add_argument("--reply", default=DEFAULT_REPLY, help="what the LLM always answers")
    parser.add_argument(
        "--llm-first-token-ms",
        type=float,
        default=float(os.environ.get(FIRST_TOKEN_ENV, "0")),
        help=f"the LLM's time to its first word (default: ${FIRST_TOKEN_ENV} or 0)",
    )
    args = parse_server_arguments(parser, argv)
    if args.llm_first_token_ms < 0:
        parser.error(f"--llm-first-token-ms must be 0 or more, got {args.llm_first_token_ms:g}")
    logger.info("stub servers on %s:%d", args.host, args.port)
    app = create_app(args.transcript, args.reply, args.llm_first_token_ms / 1000.0)
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
