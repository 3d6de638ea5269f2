"""``bench endpoint``: the corpus, the false-cut rule, the verdict, and real runs.

The units use fakes (a tone "voice", made-up outcomes); the runs use the real Piper
voice, the real VAD and pipecat's real smart-turn, on the CPU.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime
import pytest

from agent.config import Settings
from tools.bench_endpoint import run_endpoint_bench, run_endpoint_command
from tools.bench_endpoint_corpus import (
    LEAD_S,
    CorpusTurn,
    _voiced_windows,
    boundary_gaps,
    build_corpus,
    speak_turns,
    split_clauses,
)
from tools.bench_endpoint_driver import (
    Config,
    ConfigResult,
    TurnOutcome,
    _AudioClock,
    audio_time,
    classify,
    measure,
)
from tools.bench_endpoint_report import pause_table, recommend, table

RATE = 16000


# --- units ---------------------------------------------------------------------------


def test_lines_split_after_sentence_ends_and_commas():
    assert split_clauses("My date of birth is March fifth, nineteen eighty.") == (
        "My date of birth is March fifth,",
        "nineteen eighty.",
    )
    assert split_clauses("Next Monday. I will pay with a check.") == (
        "Next Monday.",
        "I will pay with a check.",
    )
    assert split_clauses("Speaking.") == ("Speaking.",)


def test_corpus_repeats_lines_with_pauses_per_pause_and_rendition_and_dedupes():
    lines = [("a", "Speaking."), ("b", "Yes, it's me."), ("c", "Yes, it's me.")]
    hesitation = [("I could do, um,", "two hundred a month.")]
    turns = build_corpus(lines, (300, 700), hesitation)
    singles = [t for t in turns if len(t.clauses) == 1]
    assert [(t.source, t.pause_ms) for t in singles] == [("a", 0)]
    multi = {(t.source, t.pause_ms, t.rendition) for t in turns if len(t.clauses) > 1}
    assert multi == {
        (source, pause, rendition)
        for source in ("b", "hesitation")  # "c" says the same line as "b"
        for pause in (300, 700)
        for rendition in ("apart", "in-context")
    }
    assert next(t for t in turns if t.hesitation).clauses == hesitation[0]


@pytest.mark.parametrize(
    ("commit", "kind"),
    [(None, "never"), (1.9, "false_cut"), (2.0, "early"), (2.9, "early"), (3.0, "ok")],
)
def test_a_commit_before_the_last_clause_is_a_false_cut(commit, kind):
    assert classify(commit, last_clause_start_s=2.0, voiced_end_s=3.0) == kind


def _outcomes(*commits: float | None, source: str = "x") -> list[TurnOutcome]:
    """Turns whose last clause starts at 2 s and whose voice ends at 3 s."""
    turn = CorpusTurn(source, ("a,", "b."), 500)
    return [TurnOutcome(turn, c, 2.0, 3.0, cpu_ms=1.0) for c in commits]


def test_endpoint_delay_is_counted_from_the_end_of_the_voice_for_turns_not_cut():
    outcome = _outcomes(3.25)[0]
    assert outcome.outcome == "ok" and outcome.delay_ms == pytest.approx(250.0)
    assert _outcomes(1.5)[0].delay_ms is None  # cut: no delay
    # The wall time the pipeline waits for the decision counts in the delay, not in the cut.
    waited = TurnOutcome(outcome.turn, 1.99, 2.0, 3.0, cpu_ms=1.0, wait_ms=50.0)
    assert waited.outcome == "false_cut"
    late = TurnOutcome(outcome.turn, 3.25, 2.0, 3.0, cpu_ms=1.0, wait_ms=40.0)
    assert late.delay_ms == pytest.approx(290.0)


def test_the_verdict_is_the_lowest_p95_that_cuts_no_more_than_the_baseline():
    baseline = ConfigResult(
        Config(0.2, "smart-turn"), _outcomes(1.0, 3.3, 3.4, 6.3), baseline=True
    )  # 25 % false cuts, p95 3300 ms
    faster_cutting = ConfigResult(Config(0.1, "vad"), _outcomes(1.0, 1.0, 3.2, 3.2))
    safer_slower = ConfigResult(Config(0.5, "vad"), _outcomes(3.6, 3.6, 3.6, 3.6))
    # No false cut, but one commit inside the last clause: 25 % cut in all, as the baseline.
    cutting_late = ConfigResult(Config(0.3, "vad"), _outcomes(2.5, 3.7, 3.7, 3.7))
    results = [baseline, faster_cutting, safer_slower, cutting_late]
    assert recommend(results) is safer_slower  # p95 600 ms; cutting_late's is 700
    assert recommend([baseline, faster_cutting]) is baseline  # 50 % false cuts
    assert recommend([baseline, cutting_late]) is cutting_late
    # Cuts inside the last clause count: 50 % of all turns cut is worse than 25 %.
    worse = ConfigResult(Config(0.3, "vad"), _outcomes(2.5, 2.5, 3.5, 3.5))
    assert recommend([baseline, worse]) is baseline


def test_held_to_the_hesitations_a_setting_that_cuts_more_of_them_is_not_chosen():
    baseline = ConfigResult(
        Config(0.2, "smart-turn"),
        _outcomes(1.0, 1.0, 3.3, 6.3) + _outcomes(3.3, 6.3, source="hesitation"),
        baseline=True,
    )  # 2 of 6 cut, none of the hesitations
    vad = ConfigResult(
        Config(0.5, "vad"), _outcomes(1.0, 3.6, 3.6, 3.6) + _outcomes(1.0, 3.6, source="hesitation")
    )  # 2 of 6 cut too, but one of the two hesitations
    assert vad.hesitation_cut_pct == 50.0 and baseline.hesitation_cut_pct == 0.0
    assert recommend([baseline, vad]) is vad
    assert recommend([baseline, vad], hesitations_too=True) is baseline


def test_the_table_marks_the_baseline_and_the_recommendation():
    baseline = ConfigResult(Config(0.2, "smart-turn"), _outcomes(1.0, 3.3), baseline=True)
    other = ConfigResult(Config(0.5, "vad"), _outcomes(3.6, 3.6))
    fallback = ConfigResult(Config(0.2, "smart-turn", 1.0), _outcomes(3.4, 3.5))
    text = table([baseline, other, fallback], recommended=other)
    rows = text.splitlines()
    assert len(rows) == 5 and rows[0].startswith("| configuration | turns | false cuts % |")
    assert (
        "| **VAD stop 0.20 s + smart-turn v3 (as the pipeline) (baseline)** | 2 | 50.0 |"
        in (rows[2])
    )
    assert "VAD stop 0.50 s + VAD stop alone (recommended) | 2 | 0.0 |" in rows[3]
    assert "smart-turn v3, fallback 1 s" in rows[4]
    by_pause = pause_table([baseline], (500,)).splitlines()
    assert by_pause[0] == "| configuration | pause 500 ms | hesitations |"
    assert by_pause[2].endswith("| 50.0 / - | - / - |")  # apart / in context


class ToneVoice:
    """A fake voice: each clause is 300 ms of tone between 100 ms of silence, and a
    clause boundary inside one text is a 200 ms silence (as Piper pauses at commas)."""

    sample_rate = RATE

    def say(self, text: str) -> bytes:
        t = np.arange(int(0.3 * RATE)) / RATE
        tone = (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
        edge = np.zeros(int(0.1 * RATE), dtype=np.int16)
        gap = np.zeros(int(0.2 * RATE), dtype=np.int16)
        parts: list[np.ndarray] = [edge]
        for i, _ in enumerate(split_clauses(text)):
            parts += [gap, tone] if i else [tone]
        return np.concatenate([*parts, edge]).tobytes()


@pytest.mark.parametrize("rendition", ["apart", "in-context"])
def test_a_turn_is_its_clauses_trimmed_with_exactly_the_pause_between(rendition):
    turn = CorpusTurn("x", ("one,", "two, three."), 700, rendition)
    (audio,) = speak_turns([turn], ToneVoice(), tail_s=2.0)
    # "two, three." keeps its own 200 ms boundary; the turn's pause is 700 ms.
    assert audio.last_clause_start_s == pytest.approx(LEAD_S + 0.3 + 0.7)
    assert audio.voiced_end_s == pytest.approx(LEAD_S + 0.3 + 0.7 + 0.3 + 0.2 + 0.3)
    assert audio.duration_s == pytest.approx(audio.voiced_end_s + 2.0)
    pcm = np.frombuffer(audio.pcm, dtype=np.int16)
    voiced = _voiced_windows(pcm, RATE)
    assert voiced.sum() == 90  # three 300 ms tones; the -60 dBFS noise floor is not voice
    assert 20 < np.abs(pcm[: int(LEAD_S * RATE)]).mean() < 40  # the noise is there


def test_clause_boundaries_must_stand_out_from_silences_inside_clauses():
    tone = np.full(int(0.2 * RATE), 5000, dtype=np.int16)
    quiet = {ms: np.zeros(int(ms * RATE / 1000), dtype=np.int16) for ms in (50, 200, 250)}
    audio = np.concatenate([tone, quiet[200], tone, quiet[50], tone, quiet[250], tone])
    assert boundary_gaps(audio, RATE, 2) == [
        (int(0.2 * RATE), int(0.4 * RATE)),
        (int(0.85 * RATE), int(1.1 * RATE)),
    ]
    with pytest.raises(ValueError):
        boundary_gaps(audio, RATE, 3)  # the 50 ms closure is no boundary
    with pytest.raises(ValueError):
        boundary_gaps(audio, RATE, 1)  # two silences as long as the boundary: ambiguous


def test_smart_turn_reads_audio_time_inside_the_run_and_the_wall_clock_after():
    from pipecat.audio.turn.smart_turn import base_smart_turn

    clock = _AudioClock()
    with audio_time(clock):
        clock.now = 1234.5
        assert base_smart_turn.time.monotonic() == 1234.5
        assert base_smart_turn.time.perf_counter() == pytest.approx(time.perf_counter(), abs=1)
    assert base_smart_turn.time is time


def test_bad_command_line_values_are_refused(tmp_path):
    args = argparse.Namespace(
        stops="0.2,fast",
        pauses="500",
        fallbacks="",
        scenarios=None,
        no_hesitations=False,
        output=str(tmp_path / "e.md"),
    )
    assert run_endpoint_command(args, Settings()) == 2
    args.stops, args.pauses = "0.2", "0"
    assert run_endpoint_command(args, Settings()) == 2
    args.pauses, args.scenarios = "500", "no_such_scenario"
    assert run_endpoint_command(args, Settings()) == 2
    assert not (tmp_path / "e.md").exists()


# --- the real voice, VAD and smart-turn ----------------------------------------------


@pytest.fixture(scope="module")
def voice():
    from tools.simulate import CallerVoice

    onnxruntime.set_seed(7)
    return CallerVoice(RATE)


@pytest.fixture(scope="module")
def smart_turn():
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

    return LocalSmartTurnAnalyzerV3()


async def test_a_pause_longer_than_the_stop_cuts_under_the_vad_alone(voice):
    turns = [
        CorpusTurn("x", ("I can pay it all.", "By debit card."), 1500, "apart"),
        CorpusTurn("x", ("I can pay it all.",), 0),
    ]
    audios = speak_turns(turns, voice, tail_s=1.5)
    (result,) = await measure(audios, Settings(), [0.2], smart_turn=None)
    paused, whole = result.outcomes
    assert result.config == Config(0.2, "vad")
    assert paused.outcome == "false_cut"
    assert audios[0].last_clause_start_s - 1.5 < paused.commit_s < audios[0].last_clause_start_s
    assert whole.outcome == "ok"
    assert whole.delay_ms is not None and whole.delay_ms >= 200  # never before the stop time
    assert result.false_cut_pct == 50.0 and result.cpu_ms_per_turn > 0


async def test_smart_turn_decides_at_the_vad_stop_and_never_sooner(voice, smart_turn):
    turns = [
        CorpusTurn("x", ("Yes, I can pay it all.",), 0),
        CorpusTurn("x", ("Friday,", "by debit card."), 300, "in-context"),
    ]
    audios = speak_turns(turns, voice, tail_s=0.5 + 3.0 + 1.0)
    results = await measure(audios, Settings(), [0.5], smart_turn, fallbacks=(0.8,))
    by = {(r.config.decision, r.config.fallback_secs): r for r in results}
    assert set(by) == {("vad", None), ("smart-turn", None), ("smart-turn", 0.8)}
    vad = by["vad", None]
    assert [o.outcome for o in vad.outcomes] == ["ok", "ok"]  # 300 ms: the VAD never stops
    for r in (by["smart-turn", None], by["smart-turn", 0.8]):
        for smart, plain in zip(r.outcomes, vad.outcomes, strict=True):
            assert smart.outcome == "ok" and smart.model_calls >= 1
            assert smart.commit_s is not None and plain.commit_s is not None
            assert smart.commit_s >= plain.commit_s  # asked at the VAD stop, not before
            if smart.by_fallback:
                fallback = r.config.fallback_secs or 3.0
                assert smart.commit_s - plain.commit_s >= fallback - 0.05


def test_a_small_real_run_writes_the_report(tmp_path):
    output = tmp_path / "endpointing.md"
    status = run_endpoint_bench(
        str(output), [0.3, 0.5], ["partial_payment"], [500], hesitations=False
    )
    assert status == 0
    text = output.read_text()
    assert text.startswith("# Endpointing")
    assert "Measured " in text and "`python -m agent bench endpoint --stops 0.3,0.5" in text
    # The baseline is the pipeline's own VAD stop (agent/config.py's default, 0.3 s).
    assert "**VAD stop 0.30 s + smart-turn v3 (as the pipeline) (baseline)** | 8 |" in text
    assert "| VAD stop 0.50 s + VAD stop alone" in text
    assert "| VAD stop 0.50 s + smart-turn v3, fallback 1 s |" in text
    assert "## Recommendation" in text and "## Corpus" in text
    assert "- partial_payment: I can't pay all of that. | I could do two hundred dollars" in text
