"""Orpheus TTS: an LLM that speaks in SNAC codes, decoded to 24 kHz audio as the tokens arrive.

Orpheus 3B is a Llama 3.2 3B whose vocabulary has 7 x 4096 audio tokens; the model is served
by an OpenAI-compatible completions server (vLLM or trtllm-serve) and read here as a text
stream of ``<custom_token_N>`` tokens. Every 7 audio tokens are one coarse SNAC frame: 1 code
of the coarse codebook, 2 of the middle and 4 of the fine one. SNAC's decoder needs context on
both sides of a frame to render it without seams, so each frame is rendered as the middle of a
short window of frames; windows from all concurrent streams go to SNAC in one batched call.
The model begins most utterances with a little silence, which is dropped up to ~50 ms before
the first audible sample so the caller hears speech at the first byte.

Token conventions are Orpheus's published ones (canopylabs/orpheus-3b-0.1-ft's tokenizer and
the Orpheus-TTS README): ``<custom_token_N>`` is token id 128256 + N; N = 3, 4, 5, 1 are start
of human, end of human, start of AI and start of speech; N = 2 (id 128258) is end of speech,
the stop token; audio codes are N >= 10 with code = N - 10 - 4096 * (position in frame).
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

logger = logging.getLogger(__name__)

CUSTOM_TOKEN_BASE = 128256  # the first id after Llama 3's 128,256-token vocabulary
START_OF_HUMAN = "<custom_token_3>"
END_OF_HUMAN = "<custom_token_4>"
START_OF_AI = "<custom_token_5>"
START_OF_SPEECH = "<custom_token_1>"
END_OF_SPEECH_ID = CUSTOM_TOKEN_BASE + 2  # 128258: generation stops here
BEGIN_OF_TEXT = "<|begin_of_text|>"
END_OF_TEXT = "<|eot_id|>"
AUDIO_TOKEN_OFFSET = 10  # <custom_token_10> is code 0 at frame position 0
CODEBOOK_SIZE = 4096
TOKENS_PER_FRAME = 7
# Which SNAC level each of a frame's 7 tokens belongs to: coarse, middle, fine, fine, middle,
# fine, fine (the middle and fine codes interleave in time order).
FRAME_LEVELS = (0, 1, 2, 2, 1, 2, 2)
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 2048  # 512-sample hop x coarse stride 4

_CUSTOM_TOKEN = re.compile(r"<custom_token_(\d+)>")


def prompt(text: str, voice: str) -> str:
    """The completions prompt that asks Orpheus to speak ``text`` in ``voice``."""
    return (
        f"{START_OF_HUMAN}{BEGIN_OF_TEXT}{voice}: {text}{END_OF_TEXT}"
        f"{END_OF_HUMAN}{START_OF_AI}{START_OF_SPEECH}"
    )


@dataclass(frozen=True)
class Frame:
    """One coarse SNAC frame: 1 coarse, 2 middle and 4 fine codes."""

    coarse: tuple[int]
    middle: tuple[int, int]
    fine: tuple[int, int, int, int]


class FrameAssembler:
    """Turns the model's audio token numbers into SNAC frames, 7 tokens at a time.

    A token whose code falls outside its position's 4096-code range makes its frame unusable;
    that frame is dropped (and logged) rather than rendered as noise.
    """

    def __init__(self) -> None:
        self._codes: list[int] = []
        self._valid = True
        self.dropped = 0

    def push(self, custom_number: int) -> Frame | None:
        """Add ``<custom_token_N>``'s N; return a frame when it completes one."""
        if custom_number < AUDIO_TOKEN_OFFSET:
            return None  # a control token inside the audio stream carries no code
        position = len(self._codes)
        code = custom_number - AUDIO_TOKEN_OFFSET - CODEBOOK_SIZE * position
        if not 0 <= code < CODEBOOK_SIZE:
            self._valid = False
        self._codes.append(code)
        if len(self._codes) < TOKENS_PER_FRAME:
            return None
        codes, valid = self._codes, self._valid
        self._codes, self._valid = [], True
        if not valid:
            self.dropped += 1
            logger.warning("dropped an Orpheus frame with out-of-range codes: %s", codes)
            return None
        return Frame(
            coarse=(codes[0],),
            middle=(codes[1], codes[4]),
            fine=(codes[2], codes[3], codes[5], codes[6]),
        )


def custom_numbers(pieces: Iterable[str]) -> Iterator[int]:
    """N of each ``<custom_token_N>`` in a text stream whose pieces may split a token."""
    pending = ""
    for piece in pieces:
        pending += piece
        end = 0
        for match in _CUSTOM_TOKEN.finditer(pending):
            yield int(match.group(1))
            end = match.end()
        pending = pending[end:]
        cut = pending.rfind("<")
        pending = pending[cut:] if cut >= 0 else ""


def window_codes(frames: Sequence[Frame]) -> list[np.ndarray]:
    """A window of frames as SNAC's three code rows (lengths n, 2n, 4n)."""
    return [
        np.array([c for f in frames for c in f.coarse], dtype=np.int64),
        np.array([c for f in frames for c in f.middle], dtype=np.int64),
        np.array([c for f in frames for c in f.fine], dtype=np.int64),
    ]


class SnacBatcher:
    """One SNAC decoder shared by every stream: pending windows go to SNAC in one call.

    Windows of equal length are stacked into a batch; with ``compile=True`` the decode is
    ``torch.compile``d and ``warm_up`` compiles it for each batch size before traffic comes.
    """

    def __init__(
        self, model: Any, *, device: str = "cpu", max_batch: int = 32, compile: bool = False
    ) -> None:
        import torch

        self._torch = torch
        self._model = model
        self._decode = torch.compile(model.decode, dynamic=False) if compile else model.decode
        self._device = device
        self._max_batch = max_batch
        self._queue: queue.Queue[tuple[list[np.ndarray], Future[np.ndarray]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.batch_sizes: list[int] = []  # every SNAC call's batch, for logs and tests

    def decode_batch(self, windows: Sequence[list[np.ndarray]]) -> list[np.ndarray]:
        """Decode equal-length windows in one SNAC call; float32 audio per window."""
        torch = self._torch
        codes = [
            torch.from_numpy(np.stack([w[level] for w in windows])).to(self._device)
            for level in range(3)
        ]
        with torch.inference_mode():
            audio = self._decode(codes)
        self.batch_sizes.append(len(windows))
        rows = audio[:, 0, :].float().cpu().numpy()
        return [row for row in rows]

    def warm_up(self, frames: int, batch_sizes: Iterable[int]) -> None:
        """Run (and, when compiled, compile) the decode for each batch size in advance."""
        rng = np.random.default_rng(0)
        for size in batch_sizes:
            window = [
                rng.integers(0, CODEBOOK_SIZE, frames * (2**level), dtype=np.int64)
                for level in range(3)
            ]
            self.decode_batch([window] * size)
        self.batch_sizes.clear()

    def submit(self, window: list[np.ndarray]) -> Future[np.ndarray]:
        """Queue a window for the next batched call."""
        future: Future[np.ndarray] = Future()
        self._queue.put((window, future))
        return future

    def start(self) -> None:
        """Start the decoding thread."""
        self._thread = threading.Thread(target=self._run, name="snac-batcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the decoding thread after the windows already queued."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            pending = [first]
            while len(pending) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                pending.append(item)
            by_length: dict[int, list[tuple[list[np.ndarray], Future[np.ndarray]]]] = {}
            for item in pending:
                by_length.setdefault(len(item[0][0]), []).append(item)
            for group in by_length.values():
                try:
                    audio = self.decode_batch([window for window, _ in group])
                except Exception as error:  # noqa: BLE001 - each waiting stream gets the error
                    logger.exception("SNAC decode failed")
                    for _, future in group:
                        future.set_exception(error)
                    continue
                for (_, future), samples in zip(group, audio, strict=True):
                    future.set_result(samples)


class SlidingWindowDecoder:
    """Renders a stream's frames through SNAC, each frame as part of a window of neighbours.

    Once ``window`` frames exist, every new frame shifts the window by one and the frame at
    ``emit`` (its left neighbour in the window's past, the rest in its future) is released:
    the edges of a window, where SNAC lacks context, are never played, except the stream's
    first frames (nothing precedes them) and its last ones (flushed at the end).
    """

    def __init__(self, batcher: SnacBatcher, window: int = 4, emit: int = 1) -> None:
        if not 0 <= emit < window:
            raise ValueError("emit must index a frame inside the window")
        self._batcher = batcher
        self._window = window
        self._emit = emit
        self._frames: list[Frame] = []  # the newest frames, at most one window
        self._total = 0  # frames pushed so far
        self._released = 0  # frames already played

    def push(self, frame: Frame) -> np.ndarray | None:
        """Add a frame; return newly released audio, if any."""
        self._frames = [*self._frames, frame][-self._window :]
        self._total += 1
        if self._total < self._window:
            return None
        start = self._total - self._window
        return self._render(start + self._emit + 1)

    def flush(self) -> np.ndarray | None:
        """The frames still unreleased at the end of the stream."""
        if self._released >= self._total:
            return None
        return self._render(self._total)

    def _render(self, stop: int) -> np.ndarray:
        """Decode the current window; return its frames from the last released up to ``stop``."""
        start = self._total - len(self._frames)  # absolute index of the window's first frame
        audio = self._batcher.submit(window_codes(self._frames)).result()
        first, self._released = self._released, stop
        return audio[(first - start) * SAMPLES_PER_FRAME : (stop - start) * SAMPLES_PER_FRAME]


class LeadingSilenceGate:
    """Holds audio back until it is audible, then releases it from ``lead_ms`` before that."""

    def __init__(self, sample_rate: int, threshold: float = 0.01, lead_ms: float = 50.0) -> None:
        self._threshold = threshold
        self._lead = int(sample_rate * lead_ms / 1000)
        self._held = np.zeros(0, np.float32)
        self.open = False

    def push(self, audio: np.ndarray) -> np.ndarray:
        """Audio to play now (possibly empty)."""
        if self.open:
            return audio
        audible = np.flatnonzero(np.abs(audio) > self._threshold)
        if audible.size == 0:
            self._held = (
                np.concatenate([self._held, audio])[-self._lead :] if self._lead else audio[:0]
            )
            return audio[:0]
        self.open = True
        joined = np.concatenate([self._held, audio])
        first = len(self._held) + int(audible[0])
        self._held = np.zeros(0, np.float32)
        return joined[max(0, first - self._lead) :]


class CompletionsTokenSource:
    """Orpheus served by an OpenAI-compatible ``/v1/completions`` (vLLM, trtllm-serve), streamed.

    Sampling follows Orpheus's published defaults (temperature 0.6, top_p 0.8, repetition
    penalty 1.1); generation stops at end of speech.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        max_tokens: int = 1200,
        temperature: float = 0.6,
        top_p: float = 0.8,
        repetition_penalty: float = 1.1,
        timeout_s: float = 30.0,
    ) -> None:
        self._endpoint = url.rstrip("/") + "/completions"
        self._body = {
            "model": model,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "repetition_penalty": repetition_penalty,
            "stop_token_ids": [END_OF_SPEECH_ID],
            "skip_special_tokens": False,
            "stream": True,
        }
        self._timeout_s = timeout_s

    def pieces(self, prompt_text: str) -> Iterator[str]:
        """The generated text, piece by piece, as the server streams it (blocking)."""
        body = json.dumps({**self._body, "prompt": prompt_text}).encode()
        request = urllib.request.Request(
            self._endpoint, data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    return
                choices = json.loads(data).get("choices") or []
                if choices and choices[0].get("text"):
                    yield str(choices[0]["text"])


class TokenSource(Protocol):
    """Where Orpheus's generated text comes from."""

    def pieces(self, prompt_text: str) -> Iterator[str]: ...


class OrpheusSynthesizer:
    """The tts_server backend: Orpheus tokens -> SNAC frames -> windowed decode -> gated audio."""

    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        source: TokenSource,
        batcher: SnacBatcher,
        *,
        voice: str = "tara",
        window: int = 4,
        silence_threshold: float = 0.01,
        max_streams: int = 32,
    ) -> None:
        self.concurrent_streams = max_streams  # each stream blocks on its SNAC future
        self._source = source
        self._batcher = batcher
        self._voice = voice
        self._window = window
        self._threshold = silence_threshold
        self.name = f"orpheus-{voice}"

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        assembler = FrameAssembler()
        decoder = SlidingWindowDecoder(self._batcher, window=self._window)
        gate = LeadingSilenceGate(SAMPLE_RATE, threshold=self._threshold)
        for number in custom_numbers(self._source.pieces(prompt(text, self._voice))):
            frame = assembler.push(number)
            audio = decoder.push(frame) if frame is not None else None
            if audio is not None and (played := gate.push(audio)).size:
                yield played
        tail = decoder.flush()
        if tail is not None and (played := gate.push(tail)).size:
            yield played


def load_snac(path: str, device: str) -> Any:
    """SNAC 24 kHz weights from a local directory holding config.json and pytorch_model.bin."""
    from snac import SNAC

    return SNAC.from_pretrained(path).to(device).eval()
