"""Versioned prompt texts from ``prompts/``; the version is stored with each call."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"


@dataclass(frozen=True)
class PromptSet:
    """The fixed texts and instructions of one prompt version."""

    version: str
    greeting: str
    system: str
    examples: tuple[tuple[str, str], ...] = ()
    templates: dict[str, str] = field(default_factory=dict)
    #: The per-turn instruction of production mode (``LLM_MODE=phrase``), if any.
    turn: str = ""

    def example_messages(self) -> list[dict[str, str]]:
        """The example exchanges as chat messages: they show a small model the form."""
        role = {"caller": "user", "agent": "assistant"}
        return [{"role": role[who], "content": text} for who, text in self.examples]

    @classmethod
    def load(cls, version: str, root: Path = PROMPTS_DIR) -> PromptSet:
        folder = root / version
        if not folder.is_dir():
            known = sorted(p.name for p in root.iterdir() if p.is_dir())
            raise ValueError(f"unknown prompt version {version!r}; known: {', '.join(known)}")
        examples = folder / "examples.txt"
        templates = folder / "templates.toml"
        turn = folder / "turn.txt"
        return cls(
            version=version,
            greeting=(folder / "greeting.txt").read_text().strip(),
            system=(folder / "system.txt").read_text().strip(),
            examples=_examples(examples) if examples.exists() else (),
            templates=_templates(templates) if templates.exists() else {},
            turn=turn.read_text().strip() if turn.exists() else "",
        )


def _templates(path: Path) -> dict[str, str]:
    """The fixed texts of the conversation policy: ``key = "text with {placeholders}"``."""
    with path.open("rb") as f:
        texts = tomllib.load(f)
    bad = [key for key, value in texts.items() if not isinstance(value, str)]
    if bad:
        raise ValueError(f"{path}: every template must be a string; not: {', '.join(bad)}")
    return texts


def _examples(path: Path) -> tuple[tuple[str, str], ...]:
    """``caller: ...`` / ``agent: ...`` lines, in order."""
    exchanges = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        who, sep, text = line.partition(":")
        if not sep or who.strip() not in ("caller", "agent") or not text.strip():
            raise ValueError(f"{path}:{number}: expected 'caller: ...' or 'agent: ...'")
        exchanges.append((who.strip(), text.strip()))
    return tuple(exchanges)
