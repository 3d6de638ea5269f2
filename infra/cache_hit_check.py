"""Does an OpenAI-compatible server reuse a shared system prompt's KV cache? Measured, not assumed.

Each repetition sends two streamed chat requests that share a ~1,500-token system prompt (made
unique per repetition so the first one is cold) and differ in the user turn. If the server
reuses the cached prefix, the second request's time to first token is far below the first's.
TensorRT-LLM has shipped releases where block reuse is disabled or broken for Gemma's
sliding-window layers, so the engine is chosen by this measurement (docs/llm-serving.md).

    python -m infra.cache_hit_check --url http://host:port/v1 --model M [--repetitions 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass

import aiohttp

logger = logging.getLogger(__name__)

# Policy-like filler: ~17 tokens a sentence (Gemma's tokenizer), so 88 make about 1,500 tokens.
_SENTENCE = "Rule {n}: speak politely, confirm identity first, and never discuss the debt early."


def system_prompt(nonce: str, sentences: int = 88) -> str:
    """A long system prompt whose first tokens (``nonce``) make it new to the server."""
    rules = " ".join(_SENTENCE.format(n=n) for n in range(sentences))
    return f"Session {nonce}. You are Sam of Acme Collections. {rules}"


@dataclass(frozen=True)
class CacheHitReport:
    cold_ttft_ms: list[float]
    warm_ttft_ms: list[float]
    ratio: float  # median warm / median cold
    verdict: str  # "reused" or "not reused"


def verdict(cold_ms: list[float], warm_ms: list[float], threshold: float = 0.5) -> CacheHitReport:
    """Reuse is declared when the warm median is below ``threshold`` times the cold median."""
    ratio = statistics.median(warm_ms) / statistics.median(cold_ms)
    return CacheHitReport(
        cold_ttft_ms=[round(v, 1) for v in cold_ms],
        warm_ttft_ms=[round(v, 1) for v in warm_ms],
        ratio=round(ratio, 3),
        verdict="reused" if ratio < threshold else "not reused",
    )


async def first_token_ms(
    session: aiohttp.ClientSession, url: str, model: str, system: str, user: str
) -> float:
    """Milliseconds from sending a streamed chat request to its first content chunk."""
    body = {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "stream": True,
        "max_tokens": 4,
        "temperature": 0.0,
    }
    started = time.perf_counter()
    async with session.post(f"{url.rstrip('/')}/chat/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {await response.text()}")
        first: float | None = None
        line = ""
        async for raw in response.content:
            line = raw.decode().strip() or line
            if first is None and line.startswith("data:") and line != "data: [DONE]":
                choices = json.loads(line.removeprefix("data:")).get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    first = time.perf_counter()
    if first is None:
        raise RuntimeError(f"the server streamed no content; its last line: {line[:200]}")
    return (first - started) * 1000.0


async def measure(url: str, model: str, repetitions: int = 3) -> CacheHitReport:
    cold: list[float] = []
    warm: list[float] = []
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for _ in range(repetitions):
            system = system_prompt(uuid.uuid4().hex)
            cold.append(await first_token_ms(session, url, model, system, "Hello, who is this?"))
            warm.append(await first_token_ms(session, url, model, system, "Can I pay tomorrow?"))
            logger.info("cold %.0f ms, warm %.0f ms", cold[-1], warm[-1])
    return verdict(cold, warm)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's OpenAI base URL (…/v1)")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    report = asyncio.run(measure(args.url, args.model, args.repetitions))
    sys.stdout.write(json.dumps(asdict(report)) + "\n")


if __name__ == "__main__":
    main()
