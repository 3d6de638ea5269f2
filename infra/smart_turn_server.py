"""pipecat's smart-turn v3 end-of-turn model as one service per host, for every call of
every worker.

pipecat's ``LocalSmartTurnAnalyzerV3`` loads its model into an ONNX Runtime session of its
own for every call (~40 ms of CPU and a session's memory each), and runs it in a thread of
the worker, where its prediction (Whisper features in numpy, then the model: ~45 ms of CPU)
holds the GIL in long stretches and makes the RTP pacer late. So a call's analyzer
(``agent.pipeline.smart_turn``) keeps only the call's audio and asks this server for each
decision, waiting without the GIL. One server per host (started by
``agent.runtime.embedded``, its URL given to every worker as ``SMART_TURN_URL``) holds the
one model: N workers do not load N copies, and the decisions of all their calls are batched
into one run of the one session (``Decisions``), whose cost grows much less than its batch
on a GPU (``python -m agent bench smart-turn``, docs/benchmarks/smart-turn.md).

The protocol (docs/protocols.md): ``POST /v1/end-of-turn?sample_rate=R`` with the turn's
audio as 16-bit little-endian mono PCM (its last 8 s are heard) answers pipecat's
``{"prediction": 0 or 1, "probability": p}``; a request it cannot take is a 400 with
``{"error": message}``. ``GET /health`` names the model and the execution provider.

Its CPU time is the calls' leftover: it runs as ``SCHED_BATCH`` at nice 10 (``--nice``), so
any worker thread that wakes (the event loop with a call's audio) takes the core from it,
but unlike ``SCHED_IDLE`` (the per-worker helper process it replaces) it keeps a share of a
busy machine's CPU and is never starved: a decision that comes late is a turn ended by the
fallback's silence instead, so starving it costs every caller a second per turn.

Run: ``python -m infra.smart_turn_server --host 127.0.0.1 --port 8004 [--device auto]``.
"""

from __future__ import annotations

import os

# numpy's OpenBLAS starts a thread per core, and they spin between the features' matrix
# products: with them a decision cost twice its CPU (72 ms against 37 ms, one turn at
# 8 kHz on this 2-core VM), taken from the host's calls. Set before numpy is loaded.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import asyncio  # noqa: E402
import logging  # noqa: E402
from collections.abc import Callable, Mapping, Sequence  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from importlib import resources  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import soxr  # noqa: E402
from aiohttp import web  # noqa: E402
from pipecat.audio.turn.smart_turn._whisper_features import (  # noqa: E402
    compute_whisper_log_mel_features,
)

from infra.serving import (  # noqa: E402
    RequestError,
    parse_server_arguments,
    server_arguments,
)

logger = logging.getLogger(__name__)

ROUTE = "/v1/end-of-turn"
#: The ONNX session's threads. The model is small: on 2 cores a second thread took a
#: decision from 37 to 33 ms for 64 ms of CPU instead of 37, and the host's CPU is the
#: calls'. A GPU does not use them.
DEFAULT_THREADS = 1
#: What the model hears of a turn: its last 8 s at 16 kHz, zeros before a shorter one.
MODEL_RATE = 16000
MODEL_SECONDS = 8
MODEL_SAMPLES = MODEL_SECONDS * MODEL_RATE
#: The rates a turn may come at (a carrier's 8 kHz to a browser's 48 kHz).
MIN_RATE, MAX_RATE = 8000, 48000
#: The most decisions in one run of the model on a GPU.
MAX_BATCH = 64
#: On a CPU, one: the model's cost grows faster than its batch there, so a batch costs more
#: CPU than its decisions one by one and answers them later (37 against 49-54 ms of CPU a
#: decision, 26.7 against 18.6 decisions a second with 8-64 calls deciding at once:
#: ``bench smart-turn``, docs/benchmarks/smart-turn.md).
CPU_BATCH = 1
#: Where ``--device`` defaults from: cpu, cuda or auto (CUDA when ONNX Runtime has it).
DEVICE_ENV = "SMART_TURN_DEVICE"
DEVICES = ("cpu", "cuda", "auto")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
DEFAULT_NICE = 10

Prediction = dict[str, Any]


def bundled_model() -> Path:
    """pipecat's smart-turn v3.2 model, as ``LocalSmartTurnAnalyzerV3`` loads it."""
    data = resources.files("pipecat.audio.turn.smart_turn.data")
    return Path(str(data / "smart-turn-v3.2-cpu.onnx"))


def providers_for(device: str, available: Sequence[str]) -> list[str]:
    """ONNX Runtime's execution providers for ``device``, from those it reports ``available``.

    ``cuda`` insists on CUDA (a ``ValueError`` when ONNX Runtime lacks it: a GPU host that
    silently runs on its CPU is worse than one that does not start); ``auto`` takes it
    when it is there.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and CUDA not in available:
        raise ValueError(
            f"device cuda: ONNX Runtime has no {CUDA} here (it has {', '.join(available)}); "
            "install onnxruntime-gpu, or use --device cpu or auto"
        )
    if device == "cpu" or CUDA not in available:
        return [CPU]
    return [CUDA, CPU]


def batch_for(providers: Sequence[str]) -> int:
    """The most decisions in one run on the session's first provider."""
    return MAX_BATCH if providers and providers[0] == CUDA else CPU_BATCH


class SmartTurnModel:
    """The model in one ONNX Runtime session, and the decisions on a batch of turns."""

    def __init__(
        self, path: Path | None = None, device: str = "cpu", threads: int = DEFAULT_THREADS
    ) -> None:
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Threads that spin between runs would take the calls' cores for nothing.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = path or bundled_model()
        self.session = ort.InferenceSession(
            str(self.path),
            sess_options=options,
            providers=providers_for(device, ort.get_available_providers()),
        )
        self.providers: list[str] = self.session.get_providers()

    @property
    def name(self) -> str:
        return self.path.stem

    def predict(self, audios: Sequence[np.ndarray], rates: Sequence[int]) -> list[Prediction]:
        """pipecat's decision on each turn (float32 audio at its rate), one run of the model."""
        features = np.stack([features_of(a, r) for a, r in zip(audios, rates, strict=True)])
        (probabilities,) = self.session.run(None, {"input_features": features})
        return [
            {"prediction": 1 if p > 0.5 else 0, "probability": float(p)}
            for p in probabilities[:, 0]
        ]


def features_of(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """The model's input for one turn, as pipecat's analyzer makes it."""
    if sample_rate != MODEL_RATE:
        audio = soxr.resample(audio, sample_rate, MODEL_RATE, quality="HQ")
    audio = audio[-MODEL_SAMPLES:]
    audio = np.pad(audio, (MODEL_SAMPLES - len(audio), 0))
    return compute_whisper_log_mel_features(audio, do_normalize=True)


class Decisions:
    """The end-of-turn decisions of every call on the host, batched.

    The first request starts a run of the model at once; requests that come while it runs
    wait for it and then go together, up to ``max_batch``: with one call nothing waits for
    company, and under load a batch costs far less than its decisions one by one. The
    model runs in a thread of its own, so the server goes on taking requests meanwhile. A
    request whose caller has gone (past its deadline, the client hung up and aiohttp
    cancelled its handler) is dropped before it costs a run.
    """

    def __init__(
        self,
        predict: Callable[[Sequence[np.ndarray], Sequence[int]], list[Prediction]],
        max_batch: int = MAX_BATCH,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = max_batch
        self._predict = predict
        self._pending: list[tuple[np.ndarray, int, asyncio.Future[Prediction]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smart-turn")

    @property
    def waiting(self) -> int:
        """Decisions asked for and not yet in a run."""
        return len(self._pending)

    async def decide(self, audio: np.ndarray, sample_rate: int) -> Prediction:
        """pipecat's ``{"prediction", "probability"}`` for one turn's float32 audio."""
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        self._pending.append((audio, sample_rate, future))
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._pending = [p for p in self._pending if not p[2].done()]
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                if not batch:
                    return
                audios, rates, futures = (list(column) for column in zip(*batch, strict=True))
                try:
                    results = await loop.run_in_executor(
                        self._model_thread, self._predict, audios, rates
                    )
                except Exception as e:
                    logger.exception("the model failed on a batch of %d", len(batch))
                    for future in futures:
                        if not future.done():
                            future.set_exception(e)
                    continue
                for future, result in zip(futures, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._drainer = None

    def close(self) -> None:
        self._model_thread.shutdown(wait=False, cancel_futures=True)


def parse_turn(query: Mapping[str, str], body: bytes) -> tuple[np.ndarray, int]:
    """A request's turn as pipecat's analyzer holds it (float32), and its rate; or a
    ``RequestError`` saying what is wrong."""
    raw = query.get("sample_rate")
    if raw is None:
        raise RequestError("sample_rate is required (?sample_rate=16000)")
    try:
        rate = int(raw)
    except ValueError:
        raise RequestError(f"sample_rate must be an integer, got {raw!r}") from None
    if not MIN_RATE <= rate <= MAX_RATE:
        raise RequestError(f"sample_rate must be {MIN_RATE} to {MAX_RATE} Hz, got {rate}")
    if not body:
        raise RequestError("the body must be the turn's audio, 16-bit little-endian PCM")
    if len(body) % 2:
        raise RequestError(f"16-bit PCM has an even number of bytes, got {len(body)}")
    pcm = np.frombuffer(body, dtype="<i2")[-MODEL_SECONDS * rate :]
    return pcm.astype(np.float32) / 32768.0, rate


def create_app(decisions: Decisions, description: Mapping[str, Any]) -> web.Application:
    """``/health`` and ``POST /v1/end-of-turn`` over ``decisions``."""

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", **description, "waiting": decisions.waiting})

    async def end_of_turn(request: web.Request) -> web.Response:
        try:
            audio, rate = parse_turn(request.query, await request.read())
        except RequestError as error:
            return web.json_response({"error": str(error)}, status=400)
        try:
            return web.json_response(await decisions.decide(audio, rate))
        except Exception as error:  # the model's failure, logged once per batch
            return web.json_response({"error": f"the model failed: {error}"}, status=500)

    # A turn at 48 kHz, twice over: a longer body is cut to its last 8 s anyway.
    app = web.Application(client_max_size=2 * MODEL_SECONDS * MAX_RATE * 2)
    app.router.add_get("/health", health)
    app.router.add_post(ROUTE, end_of_turn)
    app.on_cleanup.append(lambda _app: _close(decisions))
    return app


async def _close(decisions: Decisions) -> None:
    decisions.close()


def run_in_background(nice: int) -> None:
    """Take only the CPU the calls leave (the module's docstring says why); Linux."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        os.nice(nice)
    except (AttributeError, OSError) as e:
        logger.warning("smart-turn keeps its ordinary priority: %s", e)


def main(argv: list[str] | None = None) -> None:
    parser = server_arguments("pipecat's smart-turn v3 end-of-turn model, batched, per host.")
    parser.add_argument(
        "--device",
        default=os.environ.get(DEVICE_ENV) or "cpu",
        choices=DEVICES,
        help=f"cpu, cuda, or auto: CUDA when ONNX Runtime has it (default: ${DEVICE_ENV} or cpu)",
    )
    parser.add_argument("--model", type=Path, help="an ONNX file (default: pipecat's bundled)")
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        help=f"the session's CPU threads (default: {DEFAULT_THREADS}; more answer a decision "
        "a little sooner for much more CPU)",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        help=f"decisions per run (default: {MAX_BATCH} on a GPU, {CPU_BATCH} on a CPU)",
    )
    parser.add_argument(
        "--nice", type=int, default=DEFAULT_NICE, help="niceness under SCHED_BATCH (Linux)"
    )
    args = parse_server_arguments(parser, argv)
    if args.max_batch is not None and args.max_batch < 1:
        parser.error(f"--max-batch must be at least 1, got {args.max_batch}")
    run_in_background(args.nice)  # before the session's threads, which inherit it
    try:
        model = SmartTurnModel(args.model, args.device, args.threads)
    except ValueError as e:
        parser.error(str(e))
    model.predict([np.zeros(MODEL_RATE // 10, np.float32)], [MODEL_RATE])  # the first run's cost
    if args.max_batch is None:
        args.max_batch = batch_for(model.providers)
    logger.info(
        "smart-turn %s on %s (ONNX Runtime has %s), batches of up to %d, on %s:%d",
        model.name,
        model.providers[0],
        ", ".join(ort.get_available_providers()),
        args.max_batch,
        args.host,
        args.port,
    )
    description = {"model": model.name, "providers": model.providers, "max_batch": args.max_batch}
    app = create_app(Decisions(model.predict, args.max_batch), description)
    # A client that hangs up (its deadline passed) cancels its request's wait.
    # No access log: a line per decision of every call is the log's bulk and tells nothing.
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        print=None,
        access_log=None,
        handler_cancellation=True,
    )


if __name__ == "__main__":
    main()
