"""Versioned prompt texts from ``prompts/``; the version is stored with each call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@dataclass(frozen=True)
class PromptSet:
    """The fixed texts and instructions of one prompt version."""

    version: str
    greeting: str
    system: str

    @classmethod
    def load(cls, version: str, root: Path = PROMPTS_DIR) -> PromptSet:
        folder = root / version
        if not folder.is_dir():
            known = sorted(p.name for p in root.iterdir() if p.is_dir())
            raise ValueError(f"unknown prompt version {version!r}; known: {', '.join(known)}")
        return cls(
            version=version,
            greeting=(folder / "greeting.txt").read_text().strip(),
            system=(folder / "system.txt").read_text().strip(),
        )
