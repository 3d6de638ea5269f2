"""A step's runs summed up: the share it must pass, the figure it holds to, the interval."""

from __future__ import annotations

import math

import pytest

from telephony.rtp.sender import LatenessHistogram
from tools.bench_sip_runs import (
    ANSWER_SLACK_MS,
    Interval,
    Packets,
    Step,
    StepRuns,
    calls_per_core,
    highest_held,
    holds,
    required_passes,
)


@pytest.mark.parametrize(("runs", "required"), [(1, 1), (2, 2), (3, 3), (5, 4), (10, 8)])
def test_a_step_must_pass_four_in_five_of_its_runs_rounded_up(runs, required):
    assert required_passes(runs) == required


def test_a_stated_majority_can_be_asked_and_nonsense_is_refused():
    assert required_passes(5, share=0.5) == 3
    assert required_passes(4, share=0.5) == 2
    with pytest.raises(ValueError, match="at least one run"):
        required_passes(0)
    with pytest.raises(ValueError, match="share"):
        required_passes(5, share=0.0)


def test_one_failed_run_in_five_holds_two_do_not():
    assert holds([True, True, False, True, True])
    assert not holds([True, False, True, False, True])
    assert not holds([False])


def test_the_figure_is_the_most_calls_of_a_step_that_held():
    assert highest_held({1: True, 2: True, 4: False, 8: True, 16: False}) == 8
    assert highest_held({1: False}) == 0
    assert highest_held({}) == 0


def test_the_interval_is_students_t_over_the_runs():
    interval = Interval.of([10.0, 12.0, 14.0])  # mean 12, s = 2, t(2) = 4.303

    assert interval.mean == 12.0
    assert interval.low == pytest.approx(12 - 4.303 * 2 / math.sqrt(3))
    assert interval.high == pytest.approx(12 + 4.303 * 2 / math.sqrt(3))
    assert str(interval) == "12 [7, 17]"
    # Many runs: the normal quantile.
    many = Interval.of([0.0, 2.0] * 20)
    assert many.high - many.mean == pytest.approx(1.96 * 1.0129 / math.sqrt(40), rel=1e-3)


def test_one_run_has_no_interval_and_none_is_refused():
    single = Interval.of([7.0])
    assert single.mean == 7.0 and math.isnan(single.low)
    assert str(single) == "7 (one run)"
    with pytest.raises(ValueError):
        Interval.of([])


def step(
    answers_ms=(400.0,) * 20,
    lines=20,
    reference_ms=None,
    late=0,
    calls=4,
    run=1,
    cpu_s=2.0,
):
    """A run of 1,000 packets, ``late`` of them 10 ms late, over a 20 s window."""
    counts = [1000 - late] + [0] * LatenessHistogram.BUCKETS
    counts[100] = late
    packets = Packets.from_counts(counts, 0, 0.01 if late else 0.0001)
    return Step(
        "ours", calls, 20.0, cpu_s, 3.0, 1.0, packets, packets, list(answers_ms), lines,
        reference_ms=reference_ms, run=run, answers_all=len(answers_ms), llm_requests=lines,
    )  # fmt: skip


def test_a_run_passes_with_its_packets_on_time_and_its_answers_close_to_the_lightest():
    assert step().passed
    assert step(late=1).passed  # 99.9 %
    assert not step(late=2).passed
    assert step([300.0] * 20, reference_ms=400.0).passed
    assert step([400.0 + ANSWER_SLACK_MS] * 20, reference_ms=400.0).passed
    assert not step([401.0 + ANSWER_SLACK_MS] * 20, reference_ms=400.0).passed


def test_a_line_left_unanswered_counts_as_never_answered():
    assert step([300.0] * 19).answer_p95_ms == 300.0  # one in twenty: the top 5%
    slow = step([300.0] * 18, reference_ms=300.0)
    assert slow.answer_p95_ms == math.inf and not slow.passed


def test_a_run_that_was_not_measured_fails_and_is_left_out_of_the_figures():
    failed = Step.unmeasured("ours", 4, 3, "only 3 of 4 calls were up at once")
    assert not failed.passed
    group = StepRuns("ours", 4, [step(run=1, cpu_s=2.0), step(run=2, cpu_s=4.0), failed])

    assert group.passes == 2 and group.required == 3 and not group.held
    cpu = group.cpu_per_call()  # 2 s and 4 s over 4 calls x 20 s: 25 and 50 core-ms
    assert cpu is not None and cpu.mean == pytest.approx(37.5)
    assert group.within() == (1.0, 1.0)


def test_a_steps_runs_give_the_median_and_the_worst():
    runs = [step(late=late, run=i) for i, late in enumerate([0, 1, 3, 0, 0], 1)]
    group = StepRuns("ours", 4, runs)

    assert group.passes == 4 and group.held
    assert group.within() == (1.0, pytest.approx(0.997))
    median, worst = group.p999_s()
    assert median == pytest.approx(0.0001) and worst == pytest.approx(0.0101)
    assert group.llm_per_answer() == 1.0


def test_runs_are_grouped_by_variant_and_step_and_the_held_step_is_found():
    steps = [
        *(step(calls=1, run=r) for r in (1, 2, 3)),
        *(step(calls=2, run=r, late=5 if r < 3 else 0) for r in (1, 2, 3)),
        *(step(calls=4, run=r) for r in (1, 2, 3)),
    ]
    groups = StepRuns.group(steps)

    assert [(g.calls, len(g.runs), g.held) for g in groups] == [
        (1, 3, True),
        (2, 3, False),
        (4, 3, True),
    ]
    best = calls_per_core(groups, "ours")
    assert best is not None and best.calls == 4
    assert calls_per_core(groups, "plain") is None


def test_a_steps_failed_runs_say_what_they_failed_on():
    runs = [
        step(late=5),
        step([900.0] * 20, reference_ms=400.0),
        step(late=5, answers_ms=[900.0] * 20, reference_ms=400.0),
        Step.unmeasured("ours", 4, 4, "sipp failed"),
        step(),
    ]

    assert StepRuns("ours", 4, runs).failures() == "packets 2, answers 2, not measured 1"
    assert StepRuns("ours", 4, [step()]).failures() == "–"
