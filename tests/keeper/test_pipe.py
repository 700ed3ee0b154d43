"""The frames between `serve` and the keeper's process."""
import asyncio
import struct

import pytest

from webhook.keeper.pipe import MAX_FRAME, STOP, Report, frame, read_frame


def stream(data, eof=True):
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


async def test_frames_come_out_as_they_went_in_whatever_the_reads():
    report = Report(["virtualmachineinstances: 403"], [], passes=3)
    reader = asyncio.StreamReader()
    data = frame(report) + frame(12.5) + frame(STOP)
    for k in range(0, len(data), 7):  # the pipe hands them over in pieces
        reader.feed_data(data[k:k + 7])
    reader.feed_eof()
    assert [await read_frame(reader) for _ in range(3)] == [report, 12.5, STOP]
    with pytest.raises(asyncio.IncompleteReadError):  # the other end closed
        await read_frame(reader)


async def test_a_frame_cut_short_is_the_end_of_the_pipe():
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(stream(frame(STOP)[:-2]))


async def test_a_frame_longer_than_any_report_is_refused_before_it_is_read():
    reader = stream(struct.pack(">I", MAX_FRAME + 1), eof=False)  # nothing follows, nothing is awaited
    with pytest.raises(ValueError, match="a frame of"):
        await asyncio.wait_for(read_frame(reader), 1)
