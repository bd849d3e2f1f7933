"""The live progress line: its text, its drawing on a real pseudo-terminal, and silence elsewhere."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import pty
import struct
import termios

import pytest

from ticdc_delta.jobs.live_progress import ProgressLine, messages_read, render
from ticdc_delta.schema_cache.events import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def set_columns(fd: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))


@pytest.fixture
def terminal():
    """A pseudo-terminal: the line is written to its slave side; `read()` gives what arrived at the master."""
    master, slave = pty.openpty()
    set_columns(slave, 120)
    stream = os.fdopen(slave, "w", encoding="utf-8")

    def read() -> str:
        chunks = []
        os.set_blocking(master, False)
        while True:
            try:
                chunk = os.read(master, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()

    yield stream, read
    stream.close()
    os.close(master)


def test_render():
    assert render(1500, 6000, 1200, 2, 12.4) == "ticdc-delta: 1,500 of 6,000 messages (25%), 1,200 rows merged, 2 tables, 12s"
    assert render(0, 0, 0, 1, 0.0) == "ticdc-delta: 0 of 0 messages (100%), 0 rows merged, 1 table, 0s"
    assert "(100%)" in render(7, 5, 0, 0, 1.0)  # messages beyond the noted end never show more than 100%


def test_messages_read_against_the_end_offsets_noted_at_start():
    start, end = {A: 10, B: 0}, {A: 30, B: 5}
    assert messages_read(start, end, start) == (0, 25)
    assert messages_read(start, end, {A: 20, B: 5}) == (15, 25)
    assert messages_read(start, end, {A: 40, B: 9}) == (25, 25)  # read past the noted end (continuing writes)
    assert messages_read({A: 50}, {A: 30}, {A: 50}) == (0, 0)  # resumed beyond an end offset: nothing to drain


def test_only_an_until_idle_run_on_a_terminal_gets_a_line(terminal, tmp_path):
    stream, _ = terminal
    assert ProgressLine.for_run("until-idle", stream) is not None
    assert ProgressLine.for_run("continuous", stream) is None
    assert ProgressLine.for_run("until-idle", io.StringIO()) is None
    with open(tmp_path / "log", "w") as file:
        assert ProgressLine.for_run("until-idle", file) is None
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe:
        assert ProgressLine.for_run("until-idle", pipe) is None
    os.close(read_end)


def test_the_line_is_redrawn_in_place_at_most_every_fifth_of_a_second_and_ended_at_close(terminal):
    stream, read = terminal
    clock = Clock()
    line = ProgressLine(stream, clock=clock)
    line.start({A: 0, B: 0}, {A: 60, B: 40})
    assert read() == "\rticdc-delta: 0 of 100 messages (0%), 0 rows merged, 0 tables, 0s"
    clock.now += 0.1
    line.read({A: 30, B: 0})
    assert read() == ""  # too soon after the last draw
    clock.now += 0.2
    line.read({A: 30, B: 20})
    line.applied(rows=40, tables=1)
    assert read() == "\rticdc-delta: 50 of 100 messages (50%), 0 rows merged, 0 tables, 0s"
    clock.now += 1.0
    line.read({A: 60, B: 40})
    clock.now += 2.0
    line.applied(rows=1234, tables=2)
    line.close()
    final = "\rticdc-delta: 100 of 100 messages (100%), 1,234 rows merged, 2 tables, 3s"
    assert read() == (
        "\rticdc-delta: 100 of 100 messages (100%), 40 rows merged, 1 table, 1s"
        + final
        + final  # close draws the final state even right after a draw, then ends the line
        + "\r\n"  # the terminal's newline
    )


def test_a_shorter_line_pads_over_the_longer_one_and_log_records_blank_it(terminal):
    stream, read = terminal
    clock = Clock()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        line = ProgressLine(stream, clock=clock)
        line.start({A: 0}, {A: 100_000})
        first = read()
        logging.getLogger("ticdc_delta.test").warning("something happened")
        blanked = read()
        assert blanked == "\r" + " " * (len(first) - 1) + "\r" + "something happened\r\n"
        line.read({A: 5})  # drawn at once after a log record, though within the interval
        assert read().startswith("\rticdc-delta: 5 of 100,000")
        line.close()
        read()
        logging.getLogger("ticdc_delta.test").warning("after")
        assert read() == "after\r\n"  # the filter is gone with the line
    finally:
        root.removeHandler(handler)


def test_the_line_fits_the_terminal(terminal):
    stream, read = terminal
    set_columns(stream.fileno(), 40)
    line = ProgressLine(stream, clock=Clock())
    line.start({A: 0}, {A: 100})
    assert read() == "\r" + "ticdc-delta: 0 of 100 messages (0%), 0 rows"[:39]  # 39 characters: no wrap


def test_a_phase_under_way_shows_what_it_works_on_until_the_batch_ends(terminal):
    # Setup: the pipeline's phase timer watched by the line, as the job wires them; a batch merging the
    # third of twenty tables, then the batch's end.
    # Expect: the line names the phase and the table as the MERGE begins (not a stalled count), and drops
    # it once the batch is applied.
    from ticdc_delta.apply.base.phases import PhaseTimes

    stream, read = terminal
    clock = Clock()
    line = ProgressLine(stream, clock=clock)
    times = PhaseTimes()
    times.watch(line.doing)
    line.start({A: 0}, {A: 100})
    read()
    times.working_on("shop.orders (3 of 20 tables)")
    with times.phase("merge"):
        during = read()
        assert during.endswith("0 tables, 0s; merging shop.orders (3 of 20 tables)")
    times.working_on("")
    clock.now += 1
    line.applied(rows=10, tables=3)
    after = "\rticdc-delta: 0 of 100 messages (0%), 10 rows merged, 3 tables, 1s"
    assert read() == after.ljust(len(during))  # padded over the longer line
