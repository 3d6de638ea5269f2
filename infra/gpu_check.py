"""Timing of the production model architectures on a lent GPU, with random weights.

The GPU machine has no network, so no weights can be downloaded; speed does not depend on the
weights' values, so each model is built from its published config with random weights, directly
on the GPU in bf16, timed with CUDA events on random inputs, and freed before the next.
``--dry-run`` runs the same code on the CPU with tiny configs so CI knows the script works
before a GPU session spends its minutes on it.

    python -m infra.gpu_check [--dry-run] [--out FILE]

The report knows nothing of the agent; ``python -m tools.gpu_profile FILE`` turns it into the
planner's stage profile (``agent/ledger/profiles/gpu.json``) in a checkout.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import logging
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

logger = logging.getLogger(__name__)

# Whisper large-v3-turbo: openai/whisper-large-v3-turbo config.json.
WHISPER_TURBO: dict[str, Any] = {
    "d_model": 1280,
    "encoder_layers": 32,
    "decoder_layers": 4,
    "encoder_attention_heads": 20,
    "decoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "decoder_ffn_dim": 5120,
    "num_mel_bins": 128,
    "vocab_size": 51866,
    "max_source_positions": 1500,
    "max_target_positions": 448,
}
WHISPER_TINY: dict[str, Any] = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "num_mel_bins": 128,
    "vocab_size": 51866,
    "max_source_positions": 1500,
    "max_target_positions": 448,
}

# Gemma 3 27B text model: google/gemma-3-27b-it config.json, "text_config" (transformers'
# Gemma3TextConfig defaults are the 1B/4B shapes, so every size field is set here).
GEMMA3_27B: dict[str, Any] = {
    "hidden_size": 5376,
    "num_hidden_layers": 62,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 128,
    "intermediate_size": 21504,
    "sliding_window": 1024,
    "query_pre_attn_scalar": 168,
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
}
GEMMA3_TINY: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "sliding_window": 64,
    "query_pre_attn_scalar": 16,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
}

# Orpheus 3B (canopylabs/orpheus-3b-0.1-ft) is Llama 3.2 3B (meta-llama/Llama-3.2-3B config.json)
# with the vocabulary extended by 7 x 4096 SNAC code tokens plus control tokens: 156940.
ORPHEUS_3B: dict[str, Any] = {
    "hidden_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 8192,
    "vocab_size": 156940,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
}
ORPHEUS_TINY: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 1024,
    "tie_word_embeddings": True,
    "max_position_embeddings": 4096,
}

# SNAC 24 kHz: hubertsiuzdak/snac_24khz config.json.
SNAC_24KHZ: dict[str, Any] = {
    "sampling_rate": 24000,
    "encoder_dim": 48,
    "encoder_rates": [2, 4, 8, 8],
    "decoder_dim": 1024,
    "decoder_rates": [8, 8, 4, 2],
    "attn_window_size": None,
    "codebook_size": 4096,
    "codebook_dim": 8,
    "vq_strides": [4, 2, 1],
    "noise": True,
    "depthwise": True,
}
SNAC_TINY: dict[str, Any] = {**SNAC_24KHZ, "encoder_dim": 8, "decoder_dim": 32, "noise": False}

# Orpheus emits one 7-token group per coarse SNAC frame. The coarse codebook runs at
# sampling_rate / prod(encoder_rates) / vq_strides[0] = 24000 / 512 / 4 = 11.72 frames/s, so a
# stream needs 82.03 tokens/s and a decode step (one token for every stream in the batch) must
# take at most 1000 / 82.03 = 12.19 ms to keep up: the "12 ms" real-time budget.
ORPHEUS_TOKENS_PER_FRAME = 7


def orpheus_step_budget_ms(snac_config: dict[str, Any]) -> float:
    """The longest decode step that still produces audio in real time, in milliseconds."""
    hop = 1
    for rate in snac_config["encoder_rates"]:
        hop *= rate
    frames_per_s = snac_config["sampling_rate"] / hop / snac_config["vq_strides"][0]
    return 1000.0 / (frames_per_s * ORPHEUS_TOKENS_PER_FRAME)


@dataclass(frozen=True)
class Plan:
    """Model configs and workload sizes for one run (the real one or the dry run)."""

    device: str
    dtype: torch.dtype
    whisper: dict[str, Any]
    gemma: dict[str, Any]
    orpheus: dict[str, Any]
    snac: dict[str, Any]
    whisper_batches: tuple[int, ...]
    whisper_frames: int  # mel frames per window: 3000 = 30 s
    whisper_decode_tokens: int
    gemma_prefix: int
    gemma_new_cached: int
    gemma_full_prompt: int
    gemma_batches: tuple[int, ...]
    orpheus_prompt: int
    orpheus_batches: tuple[int, ...]
    snac_batches: tuple[int, ...]
    snac_frames: int  # coarse frames per decode call (the streaming window)
    compile_backend: str
    warmup: int
    iters: int
    decode_steps: int


REAL_PLAN = Plan(
    device="cuda",
    dtype=torch.bfloat16,
    whisper=WHISPER_TURBO,
    gemma=GEMMA3_27B,
    orpheus=ORPHEUS_3B,
    snac=SNAC_24KHZ,
    whisper_batches=(1, 8, 16, 32),
    whisper_frames=3000,
    whisper_decode_tokens=32,
    gemma_prefix=1500,
    gemma_new_cached=100,
    gemma_full_prompt=2000,
    gemma_batches=(1, 8, 32),
    orpheus_prompt=64,
    orpheus_batches=(1, 4, 8, 16, 32, 64, 128),
    snac_batches=(1, 8, 32),
    snac_frames=4,
    compile_backend="inductor",
    warmup=3,
    iters=10,
    decode_steps=16,
)

DRY_PLAN = Plan(
    device="cpu",
    dtype=torch.float32,
    whisper=WHISPER_TINY,
    gemma=GEMMA3_TINY,
    orpheus=ORPHEUS_TINY,
    snac=SNAC_TINY,
    whisper_batches=(1, 2),
    whisper_frames=3000,
    whisper_decode_tokens=4,
    # The prefix outgrows the tiny sliding window, as 1,500 tokens outgrow Gemma's 1,024.
    gemma_prefix=96,
    gemma_new_cached=8,
    gemma_full_prompt=128,
    gemma_batches=(1, 2),
    orpheus_prompt=8,
    orpheus_batches=(1, 2),
    snac_batches=(1, 2),
    snac_frames=4,
    # Dynamo still traces the model; inductor's C++ code generation would take the dry run
    # past a few seconds on two cores.
    compile_backend="eager",
    warmup=1,
    iters=2,
    decode_steps=3,
)


class Timer:
    """Milliseconds for a callable: CUDA events on the GPU, the wall clock on the CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"

    def once(self, fn: Callable[[], Any]) -> float:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        began = time.perf_counter()
        fn()
        return (time.perf_counter() - began) * 1000.0

    def median(self, fn: Callable[[], Any], warmup: int, iters: int) -> float:
        for _ in range(warmup):
            fn()
        return statistics.median(self.once(fn) for _ in range(iters))


@contextmanager
def built_on(plan: Plan, dtype: torch.dtype | None = None) -> Iterator[None]:
    """Construct modules directly on the plan's device in its dtype (no CPU copy of weights)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype or plan.dtype)
    try:
        with torch.device(plan.device):
            yield
    finally:
        torch.set_default_dtype(previous)


def free(plan: Plan) -> None:
    """Release a model's memory before the next one is built."""
    gc.collect()
    torch._dynamo.reset()  # compiled graphs hold their model's parameters
    if plan.device == "cuda":
        torch.cuda.empty_cache()


def guarded(results: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    """Record ``fn()`` under ``key``, or the error, so one failure leaves the rest running."""
    began = time.perf_counter()
    try:
        results[key] = fn()
    except Exception as error:  # noqa: BLE001 - every failure is recorded, none stops the run
        logger.exception("%s failed", key)
        results[key] = {"error": f"{type(error).__name__}: {error}"}
    logger.info("%s done in %.1f s", key, time.perf_counter() - began)


def random_ids(batch: int, length: int, vocab: int, device: str) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), device=device)


def check_whisper(plan: Plan, timer: Timer) -> dict[str, Any]:
    """Encoder plus a short cached decode per batch, and what that means in streams per GPU."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    with built_on(plan):
        model = WhisperForConditionalGeneration(WhisperConfig(**plan.whisper)).eval()
    window_s = plan.whisper_frames / 100.0  # 10 ms mel hop
    out: dict[str, Any] = {"window_s": window_s, "decode_tokens": plan.whisper_decode_tokens}
    vocab = plan.whisper["vocab_size"]
    for batch in plan.whisper_batches:
        features = torch.randn(
            batch, plan.whisper["num_mel_bins"], plan.whisper_frames, device=plan.device
        ).to(plan.dtype)

        def transcribe(features: torch.Tensor = features, batch: int = batch) -> None:
            encoded = model.model.encoder(features)
            past = None
            ids = random_ids(batch, 4, vocab, plan.device)  # the start-of-transcript prompt
            for _ in range(plan.whisper_decode_tokens):
                step = model(
                    encoder_outputs=encoded,
                    decoder_input_ids=ids,
                    past_key_values=past,
                    use_cache=True,
                )
                past = step.past_key_values
                ids = random_ids(batch, 1, vocab, plan.device)

        def run(batch: int = batch, transcribe: Callable[[], None] = transcribe) -> dict[str, Any]:
            with torch.inference_mode():
                ms = timer.median(transcribe, plan.warmup, plan.iters)
            rtf = batch * window_s / (ms / 1000.0)
            return {
                "ms": round(ms, 3),
                "audio_s_per_s": round(rtf, 1),
                # Continuous speech sent as back-to-back 30 s windows.
                "streams_30s_windows": round(rtf, 1),
                # Whisper pads every utterance to 30 s: a typical 3 s utterance costs a window.
                "streams_3s_utterances": round(batch / (ms / 1000.0) * 3.0, 1),
            }

        guarded(out, f"batch_{batch}", run)
    return out


def check_gemma(plan: Plan, timer: Timer) -> dict[str, Any]:
    """Prefill of a full prompt vs only the new tokens after a cached system prefix; decode."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    with built_on(plan):
        model = Gemma3ForCausalLM(Gemma3TextConfig(**plan.gemma)).eval()
    vocab = plan.gemma["vocab_size"]
    out: dict[str, Any] = {
        "prefix_tokens": plan.gemma_prefix,
        "new_tokens_cached": plan.gemma_new_cached,
        "full_prompt_tokens": plan.gemma_full_prompt,
    }

    def prefill_full() -> dict[str, Any]:
        ids = random_ids(1, plan.gemma_full_prompt, vocab, plan.device)
        with torch.inference_mode():
            ms = timer.median(
                lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1),
                plan.warmup,
                plan.iters,
            )
        return {"ms": round(ms, 3)}

    def prefill_cached() -> dict[str, Any]:
        with torch.inference_mode():
            prefix = random_ids(1, plan.gemma_prefix, vocab, plan.device)
            cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
            new = random_ids(1, plan.gemma_new_cached, vocab, plan.device)
            samples = []
            for i in range(plan.warmup + plan.iters):
                fresh = copy.deepcopy(cache)  # a forward pass appends to the cache it is given
                ms = timer.once(
                    partial(
                        model,
                        input_ids=new,
                        past_key_values=fresh,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                )
                if i >= plan.warmup:
                    samples.append(ms)
        return {"ms": round(statistics.median(samples), 3)}

    guarded(out, "prefill_full", prefill_full)
    guarded(out, "prefill_after_cached_prefix", prefill_cached)
    for batch in plan.gemma_batches:
        guarded(
            out,
            f"decode_batch_{batch}",
            partial(decode_steps, model, plan, timer, plan.gemma_prefix, batch),
        )
    return out


def decode_steps(model: Any, plan: Plan, timer: Timer, prompt: int, batch: int) -> dict[str, Any]:
    """Mean ms per decode step for ``batch`` sequences after a cached ``prompt``-token context."""
    vocab = model.config.vocab_size
    with torch.inference_mode():
        ids = random_ids(batch, prompt, vocab, plan.device)
        cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
        step_ids = [random_ids(batch, 1, vocab, plan.device) for _ in range(plan.decode_steps)]

        def step(ids: torch.Tensor) -> None:
            model(input_ids=ids, past_key_values=cache, use_cache=True)

        for ids in step_ids[: plan.warmup]:
            step(ids)
        total = sum(timer.once(partial(step, ids)) for ids in step_ids[plan.warmup :])
    steps = len(step_ids) - plan.warmup
    ms = total / steps
    return {
        "context_tokens": prompt,
        "ms_per_step": round(ms, 3),
        "tokens_per_s": round(batch * 1000 / ms, 1),
    }


def check_orpheus(plan: Plan, timer: Timer) -> dict[str, Any]:
    """Decode step time by batch, and the largest batch that keeps every stream real time."""
    from transformers import LlamaConfig, LlamaForCausalLM

    with built_on(plan):
        model = LlamaForCausalLM(LlamaConfig(**plan.orpheus)).eval()
    budget = orpheus_step_budget_ms(plan.snac)
    out: dict[str, Any] = {"step_budget_ms": round(budget, 3), "engine": "transformers eager"}
    for batch in plan.orpheus_batches:
        step = partial(decode_steps, model, plan, timer, plan.orpheus_prompt, batch)
        guarded(out, f"batch_{batch}", step)
    real_time = [
        b
        for b in plan.orpheus_batches
        if "ms_per_step" in out[f"batch_{b}"] and out[f"batch_{b}"]["ms_per_step"] <= budget
    ]
    out["largest_real_time_batch"] = max(real_time) if real_time else 0
    return out


def snac_codes(plan: Plan, batch: int) -> list[torch.Tensor]:
    """Random codes for ``snac_frames`` coarse frames: 1, 2 and 4 codes per frame per level."""
    size = plan.snac["codebook_size"]
    return [
        torch.randint(0, size, (batch, plan.snac_frames * (2**level)), device=plan.device)
        for level in range(len(plan.snac["vq_strides"]))
    ]


def check_snac(plan: Plan, timer: Timer) -> dict[str, Any]:
    """SNAC decode of one streaming window by batch, eager and under ``torch.compile``."""
    from snac import SNAC

    with built_on(plan, torch.float32):  # SNAC runs in fp32, as its reference decoder does
        model = SNAC(**plan.snac).eval()
    out: dict[str, Any] = {"frames_per_call": plan.snac_frames, "compile": plan.compile_backend}
    hop_ms = 1000.0 * model.hop_length / plan.snac["sampling_rate"]
    compiled = torch.compile(model.decode, backend=plan.compile_backend, dynamic=False)
    for name, decode in (("eager", model.decode), ("compiled", compiled)):
        for batch in plan.snac_batches:
            codes = snac_codes(plan, batch)

            def run(decode: Callable[..., Any] = decode, codes: list[torch.Tensor] = codes) -> Any:
                with torch.inference_mode():
                    first = timer.once(lambda: decode(codes))  # includes compiling this shape
                    ms = timer.median(lambda: decode(codes), plan.warmup, plan.iters)
                audio_ms = codes[-1].shape[1] * hop_ms
                return {"first_call_ms": round(first, 3), "ms": round(ms, 3), "audio_ms": audio_ms}

            guarded(out, f"{name}_batch_{batch}", run)
    return out


CHECKS: dict[str, Callable[[Plan, Timer], dict[str, Any]]] = {
    "whisper": check_whisper,
    "gemma": check_gemma,
    "orpheus": check_orpheus,
    "snac": check_snac,
}


def run_checks(plan: Plan, only: list[str] | None = None) -> dict[str, Any]:
    """Every check in turn, each guarded, with the environment that produced the numbers."""
    import transformers

    began = time.perf_counter()
    torch.manual_seed(0)
    report: dict[str, Any] = {
        "dry_run": plan.device == "cpu",
        "device": torch.cuda.get_device_name() if plan.device == "cuda" else platform.machine(),
        "dtype": str(plan.dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "results": {},
    }
    timer = Timer(plan.device)
    for name, check in CHECKS.items():
        if only and name not in only:
            continue
        if plan.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        guarded(report["results"], name, partial(check, plan, timer))
        free(plan)  # the check's model went with its frame; give its memory back before the next
        if plan.device == "cuda":
            peak = torch.cuda.max_memory_allocated() / 2**30
            report["results"][name]["peak_gib"] = round(peak, 2)
    report["elapsed_s"] = round(time.perf_counter() - began, 1)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny configs on the CPU")
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--only", nargs="*", choices=sorted(CHECKS), help="run only these checks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA device: use --dry-run on the CPU")
    report = run_checks(DRY_PLAN if args.dry_run else REAL_PLAN, args.only)
    text = json.dumps(report, indent=2)
    sys.stdout.write(text + "\n")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            file.write(text + "\n")


if __name__ == "__main__":
    main()
