"""``bench compliance``: the spread it takes, the report it writes, and real speech over
a phone line through Whisper (the bundled Piper voice and espeak-ng, 8 kHz mu-law)."""

from __future__ import annotations

import argparse
import shutil
from collections import Counter

import pytest

from agent.conversation.prompts import PromptSet
from tools.bench_compliance import AudioPath, render, run_compliance_command, spread
from tools.corpus import hold, load_corpus

PROMPTS = PromptSet.load("collections-v3")
CORPUS = load_corpus()


def test_the_audio_spread_takes_every_family_evenly():
    chosen = spread(CORPUS, 32)
    assert len(chosen) == 32 and len({s.name for s in chosen}) == 32
    families = Counter(s.family for s in chosen)
    assert set(families) == {s.family for s in CORPUS}
    assert max(families.values()) - min(families.values()) <= 1


def test_the_report_counts_by_family_and_shows_each_failure():
    outcomes = [hold(s, PROMPTS) for s in CORPUS[:5]]
    outcomes[0].problems.append("C3: line 2 tells an unverified listener of the debt")
    report = render(outcomes, {}, 1.0)
    assert "| **all** | 5 | 4 | 1 |" in report
    assert f"### text: {CORPUS[0].family}/{CORPUS[0].name}" in report
    assert "C3: line 2" in report


def test_a_bad_argument_is_a_clear_error(capsys):
    args = argparse.Namespace(audio=-1, phrase=0, voices="piper", prompt_version="collections-v3")
    assert run_compliance_command(args) == 2
    assert "--audio and --phrase must be >= 0" in capsys.readouterr().err


@pytest.mark.models
@pytest.mark.parametrize("voice", ["piper", "espeak"])
def test_speech_over_a_phone_line_is_heard_and_held(voice):
    if voice == "espeak" and shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is missing: make test installs it")
    path = AudioPath()
    heard = path.hear("Stop calling me.", voice)
    assert "stop calling" in heard.lower(), heard
    script = next(s for s in CORPUS if s.name == "stop-calling@greeting")
    [outcome] = path.hold_all([script], PROMPTS, voice)
    assert outcome.outcome.passed and not outcome.unsafe, outcome.outcome.problems
