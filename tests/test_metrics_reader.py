"""The incremental metrics reader: :func:`runs.read_metrics_cached` returns what
:func:`runs.read_metrics` returns, reading only the bytes appended since its last call."""

from __future__ import annotations

import json
import os
import random

import pytest

from admm_core import rundir
from admm_core.rundir import append_metrics, read_metrics, read_metrics_cached, reset_metrics


def line(epoch: int, **kw) -> bytes:
    return (json.dumps({"epoch": epoch, "test_accuracy": epoch / 100, "residuals": [epoch, 2.5], **kw}) + "\n").encode()


@pytest.fixture
def parsed(monkeypatch):
    """The byte counts the reader parsed, call by call (how it proves it read only new lines)."""
    seen: list[int] = []
    real = rundir._metrics_lines

    def spy(data: bytes):
        seen.append(len(data))
        return real(data)

    monkeypatch.setattr(rundir, "_metrics_lines", spy)
    return seen


def test_same_records_as_read_metrics_while_a_writer_appends_in_random_cuts(tmp_path):
    """A writer appending whole lines cut at random bytes (a half-written last line, a line in
    several writes), a garbled line, a number and blank lines: at every cut both readers agree."""
    rng = random.Random(36)
    body = b"".join(line(e) for e in range(40))
    body = body.replace(line(7), b'{"epoch": 7, "test_acc\n')  # a line cut by a crash, then the run went on
    body += b"12\n\n" + b"".join(line(e) for e in range(40, 80))
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"")
    pos = 0
    while pos < len(body):
        step = rng.randint(1, 200)
        with open(path, "ab") as f:
            f.write(body[pos : pos + step])
        pos += step
        assert read_metrics_cached(tmp_path) == read_metrics(tmp_path), pos
    assert [m["epoch"] for m in read_metrics_cached(tmp_path)] == [e for e in range(80) if e != 7]


def test_only_the_new_lines_are_parsed(tmp_path, parsed):
    for e in range(1000):
        append_metrics(tmp_path, {"epoch": e, "test_accuracy": 0.5})
    assert len(read_metrics_cached(tmp_path)) == 1000
    first = parsed[-1]
    append_metrics(tmp_path, {"epoch": 1000, "test_accuracy": 0.6})
    parsed.clear()
    ms = read_metrics_cached(tmp_path)
    assert [m["epoch"] for m in ms] == list(range(1001)) and ms[-1]["test_accuracy"] == 0.6
    assert parsed == [len(json.dumps({"epoch": 1000, "test_accuracy": 0.6}) + "\n")], parsed
    assert parsed[0] < first / 500
    parsed.clear()
    assert len(read_metrics_cached(tmp_path)) == 1001 and parsed == []  # nothing new: nothing parsed


def test_a_half_written_last_line_is_read_again_when_it_is_complete(tmp_path, parsed):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(line(0) + line(1) + line(2)[:10])
    assert [m["epoch"] for m in read_metrics_cached(tmp_path)] == [0, 1]
    with open(path, "ab") as f:
        f.write(line(2)[10:-1])  # the whole record but not its newline yet: read_metrics takes it
    assert (
        [m["epoch"] for m in read_metrics_cached(tmp_path)] == [0, 1, 2] == [m["epoch"] for m in read_metrics(tmp_path)]
    )
    with open(path, "ab") as f:
        f.write(b"\n" + line(3))
    parsed.clear()
    assert [m["epoch"] for m in read_metrics_cached(tmp_path)] == [0, 1, 2, 3]
    assert parsed == [len(line(2)) + len(line(3))]  # from the start of the unfinished line, not the file's


def test_a_truncated_a_replaced_and_a_rewritten_file_are_read_from_the_start(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"".join(line(e) for e in range(10)))
    assert len(read_metrics_cached(tmp_path)) == 10
    os.truncate(path, len(line(0) + line(1) + line(2)))  # shrank (a user's cleanup)
    assert read_metrics_cached(tmp_path) == read_metrics(tmp_path) and len(read_metrics(tmp_path)) == 3

    new = tmp_path / "metrics.new"  # replaced by a rename with a longer file: another inode
    new.write_bytes(b"".join(line(e, lr=0.1) for e in range(20)))
    new.replace(path)
    ms = read_metrics_cached(tmp_path)
    assert ms == read_metrics(tmp_path) and len(ms) == 20 and all(m["lr"] == 0.1 for m in ms)

    # rewritten in place (same inode) and grown past the old offset: a resume keeps epochs 0..4,
    # then the worker appends new epochs 5.. with other values
    reset_metrics(tmp_path, keep_through=4, stale=())
    for e in range(5, 30):
        append_metrics(tmp_path, {"epoch": e, "test_accuracy": 0.9, "resumed": True})
    assert path.stat().st_size > len(b"".join(line(e, lr=0.1) for e in range(20)))
    ms = read_metrics_cached(tmp_path)
    assert ms == read_metrics(tmp_path) and [m["epoch"] for m in ms] == list(range(30))
    assert all(m.get("resumed") for m in ms[5:])


def test_missing_file_and_returned_lists_are_the_callers(tmp_path):
    assert read_metrics_cached(tmp_path) == [] and read_metrics_cached(tmp_path / "nope") == []
    append_metrics(tmp_path, {"epoch": 0})
    ms = read_metrics_cached(tmp_path)
    ms.append({"epoch": 99})  # a caller's list: appending to it changes nothing kept
    assert read_metrics_cached(tmp_path) == [{"epoch": 0}]
    (tmp_path / "metrics.jsonl").unlink()
    assert read_metrics_cached(tmp_path) == []


def test_the_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir, "TAIL_FILES", 3)
    monkeypatch.setattr(rundir, "TAIL_LINES", 25)
    monkeypatch.setattr(rundir, "_TAILS", type(rundir._TAILS)())
    for i in range(5):
        d = tmp_path / str(i)
        d.mkdir()
        for e in range(10):
            append_metrics(d, {"epoch": e})
        assert len(read_metrics_cached(d)) == 10
    assert len(rundir._TAILS) == 2  # 3 files would keep 30 records, over 25: the least recently read went
    assert list(rundir._TAILS) == [str(tmp_path / "3" / "metrics.jsonl"), str(tmp_path / "4" / "metrics.jsonl")]


def test_metrics_since_gives_only_new_lines_and_starts_over_after_a_rewrite(tmp_path):
    """The generation/offset API (for app.dashboard.tail): a reader holding n lines of generation
    gen gets only the rest; after a rewrite in place (a resume's reset_metrics) the generation
    changes and it gets every line from 0."""
    from admm_core.rundir import metrics_since

    for e in range(5):
        append_metrics(tmp_path, {"epoch": e})
    gen, start, got = metrics_since(tmp_path)
    assert start == 0 and [m["epoch"] for m in got] == [0, 1, 2, 3, 4]
    append_metrics(tmp_path, {"epoch": 5})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 6}')  # being written: parses, but not complete
    g2, start, got = metrics_since(tmp_path, 5, gen, partial=False)
    assert (g2, start, [m["epoch"] for m in got]) == (gen, 5, [5])
    assert [m["epoch"] for m in metrics_since(tmp_path, 5, gen)[2]] == [5, 6]
    reset_metrics(tmp_path, keep_through=2)
    g3, start, got = metrics_since(tmp_path, 6, gen)
    assert g3 != gen and start == 0 and [m["epoch"] for m in got] == [0, 1, 2]
