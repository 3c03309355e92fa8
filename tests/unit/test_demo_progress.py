"""`make demo`'s progress output: a section's title when it starts, and counter lines a CI log can read."""

from __future__ import annotations

import io

from devtools.demo_progress import Progress, section


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_phase_off_a_terminal_prints_a_counter_line_at_most_every_interval_and_one_at_the_end() -> None:
    # Given a phase of 50,000 events counted into a stream that is not a terminal (a CI log)
    clock, log = Clock(), io.StringIO()
    counter = Progress("event log: appending", 50_000, "events", stream=log, every=30, clock=clock)
    # When 12,000 are done within the first 30 s
    for _ in range(12):
        clock.now += 2
        counter.update(1000)
    # Then nothing is printed yet
    assert log.getvalue() == ""
    # When the interval has passed at the next update, Then one line says how far it is
    clock.now += 10
    counter.update(1000)
    assert log.getvalue() == "  event log: appending: 13,000/50,000 events (26 %, 34 s)\n"
    # When the rest is done at once and the phase ends, Then one more line, with no carriage return anywhere
    clock.now += 5
    counter.update(37_000)
    counter.close()
    assert log.getvalue().splitlines()[-1] == "  event log: appending: 50,000/50,000 events (100 %, 39 s)"
    assert "\r" not in log.getvalue()


def test_a_phase_of_unknown_length_counts_without_a_share() -> None:
    # Given a phase whose total is not known, When 7 steps are done and it ends
    clock, log = Clock(), io.StringIO()
    counter = Progress("event log: building snapshots", 0, "deliveries", stream=log, clock=clock)
    counter.update(7)
    counter.close()
    # Then the line counts them, with no percentage
    assert log.getvalue() == "  event log: building snapshots: 7 deliveries (0 s)\n"


def test_a_section_prints_its_title_when_it_starts_and_its_time_when_it_ends() -> None:
    # Given a section
    out = io.StringIO()
    with section("taxi saga: 2,000 real rows", stream=out):
        # Then its title is there while its work runs
        assert out.getvalue() == "\n== taxi saga: 2,000 real rows ...\n"
    # and at its end, one line with its wall and CPU seconds
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("== taxi saga: 2,000 real rows: ") and last.endswith(" s CPU)")
