"""Whisper on TensorRT-LLM engines (an encoder and a decoder engine), batched like the others.

UNTESTED: TensorRT-LLM cannot be installed or run on the development machines. The runner is
written against TensorRT-LLM's documented API as its Whisper example uses it
(examples/models/core/whisper/run.py: ``ModelRunnerCpp.from_dir(..., is_enc_dec=True)`` and
``generate(batch_input_ids=..., encoder_input_features=..., encoder_output_lengths=...)``);
only the pure-Python parts here (engine limits, the prompt, reading the output) are tested.
Engines come from infra/trtllm/build_whisper_engine.sh.

Mel features and the tokenizer come from the model's transformers directory (its processor
files), so this backend computes exactly the features the transformers backend does. There is
no no-speech rule here: the runner returns no logits at the start token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infra.stt_batcher import DEFAULT_MAX_BATCH
from infra.whisper import MODEL_SAMPLE_RATE

logger = logging.getLogger(__name__)

MEL_FRAMES = 3000
"""Frames of one 30 s window; the encoder halves them (its second convolution has stride 2)."""
MULTILINGUAL_VOCAB = 51865
"""English-only Whisper models have 51,864 tokens, multilingual ones (large-v3-turbo) more."""


@dataclass(frozen=True)
class EngineLimits:
    """What the engines were built for (their ``config.json``: pretrained and build config)."""

    max_batch_size: int
    max_seq_len: int
    max_input_len: int  # the decoder's: prompt tokens
    n_mels: int
    vocab_size: int
    dtype: str  # the encoder's, which its mel input must have: float16 or bfloat16

    @property
    def multilingual(self) -> bool:
        return self.vocab_size >= MULTILINGUAL_VOCAB

    @property
    def max_new_tokens(self) -> int:
        """The engine's output length: what its sequences hold beyond the longest prompt."""
        return self.max_seq_len - self.max_input_len


def read_engine_limits(engine_dir: str | Path) -> EngineLimits:
    """The limits of the engines in ``engine_dir`` (``encoder/`` and ``decoder/``)."""

    def config(component: str) -> dict[str, Any]:
        path = Path(engine_dir) / component / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"no {component} engine config at {path}")
        raw = json.loads(path.read_text())
        return {**raw["pretrained_config"], **raw["build_config"]}

    encoder, decoder = config("encoder"), config("decoder")
    return EngineLimits(
        max_batch_size=min(encoder["max_batch_size"], decoder["max_batch_size"]),
        max_seq_len=decoder["max_seq_len"],
        max_input_len=decoder["max_input_len"],
        n_mels=encoder["n_mels"],
        vocab_size=decoder["vocab_size"],
        dtype=encoder["dtype"],
    )


def prompt_tokens(multilingual: bool) -> list[str]:
    """The decoder prompt for English transcription without timestamps."""
    if multilingual:
        return ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    return ["<|startoftranscript|>", "<|notimestamps|>"]


def generated_ids(
    output: Sequence[int], length: int, prompt: Sequence[int], end_id: int
) -> list[int]:
    """The text tokens of one output row: its first ``length`` ids, without prompt or end.

    Rows are padded with ``end_id`` to the engine's length; whether the prompt is repeated
    at the start depends on the runtime's settings, so it is dropped when it is there.
    """
    ids = list(output[:length])
    if ids[: len(prompt)] == list(prompt):
        ids = ids[len(prompt) :]
    return ids[: ids.index(end_id)] if end_id in ids else ids


class TrtllmWhisperTranscriber:
    """Whisper engines through TensorRT-LLM's C++ runtime (``ModelRunnerCpp``), greedy."""

    def __init__(
        self,
        engine_dir: str | Path,
        model_dir: str | Path,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        try:
            from tensorrt_llm.runtime import (  # type: ignore[import-not-found]
                ModelRunnerCpp,
            )
        except ImportError as error:
            raise ImportError(
                "TensorRT-LLM is not installed (pip install tensorrt-llm on a CUDA machine;"
                f" see docs/stt-backends.md): {error}"
            ) from error
        from transformers import WhisperProcessor

        limits = read_engine_limits(engine_dir)
        if max_batch > limits.max_batch_size:
            raise ValueError(
                f"the engines were built for batches of at most {limits.max_batch_size};"
                f" use --max-batch {limits.max_batch_size} or rebuild them"
            )
        self._processor = WhisperProcessor.from_pretrained(model_dir, local_files_only=True)
        if self._processor.feature_extractor.feature_size != limits.n_mels:
            raise ValueError(
                f"{model_dir} computes {self._processor.feature_extractor.feature_size} mel bins;"
                f" the engines take {limits.n_mels}: not the same model"
            )
        self.name = Path(engine_dir).name
        tokenizer = self._processor.tokenizer
        self._prompt = tokenizer.convert_tokens_to_ids(prompt_tokens(limits.multilingual))
        self._end_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        self._max_new_tokens = limits.max_new_tokens
        self._dtype = limits.dtype
        self._runner = ModelRunnerCpp.from_dir(
            engine_dir=str(engine_dir),
            is_enc_dec=True,
            max_batch_size=max_batch,
            max_input_len=MEL_FRAMES,
            max_output_len=self._max_new_tokens,
            max_beam_width=1,
            kv_cache_free_gpu_memory_fraction=0.9,
            cross_kv_cache_fraction=0.5,
        )

    def transcribe(self, audio: np.ndarray) -> str:
        return self.transcribe_batch([audio])[0]

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        """One ``generate`` for all of ``audios``: 30 s mel windows, English, greedy."""
        import torch

        if not audios:
            return []
        features = self._processor.feature_extractor(
            list(audios), sampling_rate=MODEL_SAMPLE_RATE, return_tensors="pt"
        ).input_features
        # The runner takes one (frames, mels) tensor per request.
        mels = features.to("cuda", getattr(torch, self._dtype)).transpose(1, 2)
        with torch.inference_mode():
            outputs = self._runner.generate(
                batch_input_ids=[torch.tensor(self._prompt, dtype=torch.int32)] * len(audios),
                encoder_input_features=list(mels),
                encoder_output_lengths=[MEL_FRAMES // 2] * len(audios),
                max_new_tokens=self._max_new_tokens,
                end_id=self._end_id,
                pad_id=self._end_id,
                num_beams=1,
                output_sequence_lengths=True,
                return_dict=True,
            )
        rows = outputs["output_ids"].cpu().tolist()  # (batch, beams, tokens)
        lengths = outputs["sequence_lengths"].cpu().tolist()  # (batch, beams)
        tokenizer = self._processor.tokenizer
        return [
            tokenizer.decode(
                generated_ids(row[0], length[0], self._prompt, self._end_id),
                skip_special_tokens=True,
            ).strip()
            for row, length in zip(rows, lengths, strict=True)
        ]
