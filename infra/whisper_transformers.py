"""Whisper through PyTorch and transformers: the GPU backend with ``torch.compile``.

One batch of finals is one padded feature batch, one encoder run and one greedy ``generate``
(English transcription, no timestamps). With ``compile=True`` the encoder is compiled and
decoding runs on a static KV cache, which transformers' ``generate`` compiles by itself on a
CUDA device (``cache_implementation="static"`` and a ``CompileConfig``): a 4-layer decoder such
as large-v3-turbo's spends most of an eager step launching kernels, not computing.

A compiled model recompiles for every new input shape, so batches are padded up to one of a
few sizes (powers of two up to ``max_batch``), all compiled and captured at start-up. Padding
repeats the batch's last utterance: a copy finishes decoding when its original does, so it
never makes the batch decode longer. All model work runs on one thread of this object's own,
because the CUDA graphs that ``reduce-overhead`` captures belong to the thread that captured
them: warm-up and serving must share it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import CompileConfig, WhisperForConditionalGeneration, WhisperProcessor
from transformers.modeling_outputs import BaseModelOutput

from infra.stt_batcher import DEFAULT_MAX_BATCH
from infra.whisper import LOG_PROB_THRESHOLD, MODEL_SAMPLE_RATE, NO_SPEECH_THRESHOLD

logger = logging.getLogger(__name__)

WARM_UP_TOKENS = 4
"""Tokens each warm-up row must decode, so the compiled decode step runs (and is captured)."""


def batch_sizes(max_batch: int) -> tuple[int, ...]:
    """The batch sizes a batch is padded to: powers of two below ``max_batch``, then it."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    sizes = []
    size = 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return (*sizes, max_batch)


def padded_size(rows: int, sizes: Sequence[int]) -> int:
    """The smallest of ``sizes`` that holds ``rows``."""
    for size in sizes:
        if size >= rows:
            return size
    raise ValueError(f"{rows} rows exceed the largest batch size {sizes[-1]}")


class TransformersWhisperTranscriber:
    """A transformers Whisper checkpoint directory (config, weights, processor files), greedy.

    ``dtype`` defaults to bfloat16 on CUDA and float32 elsewhere. A row Whisper itself judges
    to be silence (the no-speech rule faster-whisper and OpenAI use: no-speech probability
    above 0.6 and average log probability below -1) is ``""``.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        device: str = "cuda",
        dtype: torch.dtype | None = None,
        compile: bool = False,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        path = Path(model_dir)
        if not path.is_dir():
            raise FileNotFoundError(f"no Whisper model directory at {path}")
        on_cuda = torch.device(device).type == "cuda"
        if compile and not on_cuda:
            raise ValueError("compile needs a CUDA device: generate compiles decoding there only")
        self.name = path.name
        self.max_batch = max_batch
        self._sizes = batch_sizes(max_batch)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="whisper-torch")
        self._processor = WhisperProcessor.from_pretrained(path, local_files_only=True)
        model = WhisperForConditionalGeneration.from_pretrained(
            path,
            local_files_only=True,
            dtype=dtype or (torch.bfloat16 if on_cuda else torch.float32),
            attn_implementation="sdpa",
        )
        # In place; transformers' own ``to`` wrapper hides the signature from type checkers.
        torch.nn.Module.to(model, torch.device(device))
        self._model = model.eval()
        generation = self._model.generation_config
        self._generate_kwargs: dict[str, Any] = {"do_sample": False, "num_beams": 1}
        if getattr(generation, "is_multilingual", False):
            self._generate_kwargs.update(language="en", task="transcribe")
        self._start_id = generation.decoder_start_token_id
        self._end_id = generation.eos_token_id
        # transformers' own convention: <|nospeech|> (<|nocaptions|> in .en models) comes
        # right before <|notimestamps|>.
        self._no_speech_id = generation.no_timestamps_token_id - 1
        self._encode = self._model.get_encoder()
        if compile:
            generation.cache_implementation = "static"
            generation.compile_config = CompileConfig(dynamic=False)
            self._encode = torch.compile(self._encode, dynamic=False)
            self._warm_up()

    def transcribe(self, audio: np.ndarray) -> str:
        return self.transcribe_batch([audio])[0]

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        """The texts of ``audios``: a model call per ``max_batch`` of them, on the model thread."""
        texts: list[str] = []
        for start in range(0, len(audios), self.max_batch):
            chunk = audios[start : start + self.max_batch]
            texts += self._thread.submit(self._transcribe, chunk).result()
        return texts

    def _warm_up(self) -> None:
        """Compile and capture every padded batch size before the first caller waits on it."""
        noise = np.random.default_rng(0).normal(0, 0.1, MODEL_SAMPLE_RATE).astype(np.float32)
        for size in self._sizes:
            started = time.perf_counter()
            self._thread.submit(
                self._transcribe, [noise] * size, min_new_tokens=WARM_UP_TOKENS
            ).result()
            logger.info("batch of %d compiled in %.1f s", size, time.perf_counter() - started)

    @torch.inference_mode()
    def _transcribe(self, audios: Sequence[np.ndarray], **generate_kwargs: Any) -> list[str]:
        rows = len(audios)
        padded = list(audios) + [audios[-1]] * (padded_size(rows, self._sizes) - rows)
        model = self._model
        features = self._processor.feature_extractor(
            padded, sampling_rate=MODEL_SAMPLE_RATE, return_tensors="pt"
        ).input_features.to(model.device, model.dtype)
        encoded = self._encode(features).last_hidden_state
        no_speech = self._no_speech_probs(encoded)
        output = model.generate(
            encoder_outputs=BaseModelOutput(last_hidden_state=encoded),
            return_dict_in_generate=True,
            output_scores=True,
            **self._generate_kwargs,
            **generate_kwargs,
        )
        logprobs = model.compute_transition_scores(
            output.sequences, output.scores, normalize_logits=True
        )
        generated = output.sequences[:, -logprobs.shape[1] :].tolist()
        texts = []
        for row in range(rows):
            tokens = generated[row]
            length = tokens.index(self._end_id) if self._end_id in tokens else len(tokens)
            # OpenAI's average: the end token's log probability counts, over len(tokens) + 1.
            counted = min(length + 1, len(tokens))
            avg_logprob = float(logprobs[row, :counted].sum()) / (length + 1)
            silent = no_speech[row] > NO_SPEECH_THRESHOLD and avg_logprob < LOG_PROB_THRESHOLD
            text = self._processor.tokenizer.decode(tokens[:length], skip_special_tokens=True)
            texts.append("" if silent else text.strip())
        return texts

    def _no_speech_probs(self, encoded: torch.Tensor) -> list[float]:
        """P(<|nospeech|>) after the start token, per row: one decoder step, no cache."""
        model = self._model
        start = torch.full((encoded.shape[0], 1), self._start_id, device=encoded.device)
        hidden = model.model.decoder(
            input_ids=start, encoder_hidden_states=encoded, use_cache=False
        ).last_hidden_state
        probs = model.proj_out(hidden[:, 0]).float().softmax(dim=-1)
        result: list[float] = probs[:, self._no_speech_id].tolist()
        return result
