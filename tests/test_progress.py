"""Progress as lines: one every ``every`` steps and at the last, with pace and time left."""

from __future__ import annotations

from decentopt.driver.progress import LINES_PER_RUN, ProgressLines, progress_line


def test_the_line_gives_the_pace_and_the_time_left():
    assert progress_line(200, 1000, 40.0) == "step 200/1000  40 steps/s  about 20 s left"
    assert progress_line(100, 100_100, 10.0) == "step 100/100100  10 steps/s  about 2.8 h left"
    assert progress_line(30, 1000, 1.0) == "step 30/1000  1 steps/s  about 16 min left"
    assert progress_line(7, None, 3.5) == "step 7  3.5 steps/s"


def test_a_line_every_interval_and_at_the_last_step_from_where_a_run_resumes():
    lines: list[str] = []
    bar = ProgressLines(total=23, initial=5, say=lines.append, desc="edm", every=5)
    for n in (1, 3, 1, 7, 2, 1, 3):  # blocks of steps, as the block path reports them
        bar.update(n)
    steps = [line.split()[2] for line in lines]
    assert steps == ["10/23", "17/23", "20/23", "23/23"]  # 15 falls inside the block 11..17
    assert all(line.startswith("edm: step ") and "steps/s" in line for line in lines)


def test_without_an_interval_a_run_prints_about_twenty_lines():
    lines: list[str] = []
    bar = ProgressLines(total=1000, initial=0, say=lines.append)
    for _ in range(1000):
        bar.update(1)
    assert len(lines) == LINES_PER_RUN
