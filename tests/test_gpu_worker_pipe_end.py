"""The GPU worker's child ends quietly however its pool worker goes (``evaluator.worker``).

A job stopped by SIGTERM kills its pool workers; their GPU worker children then find the pipe
ended, by end of file or, when the pool worker left an answer unread, by ECONNRESET (the pipe is
a socket pair). The second printed a ``ConnectionResetError`` traceback under the job's stop
line on the lent H200 (2026-12-02). No GPU needed: a task of an unknown kind is answered with
its error, as any task's exception is.
"""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from evaluator.worker import _serve


@pytest.mark.parametrize("unread_answers", [0, 1, 3])
def test_the_child_exits_0_when_its_pipe_ends_with_answers_unread(unread_answers: int) -> None:
    context = mp.get_context("spawn")  # as evaluator.worker starts it
    ours, theirs = context.Pipe()
    child = context.Process(target=_serve, args=(theirs, 0, os.getpid()))
    child.start()
    theirs.close()
    for _ in range(unread_answers):
        ours.send({"kind": "no-such-kind"})
    if unread_answers:
        assert ours.poll(60), "the child did not answer"  # at least one answer is waiting
    ours.close()
    child.join(60)
    assert child.exitcode == 0  # an uncaught ConnectionResetError exits 1, with a traceback


def test_a_task_error_is_answered_and_the_child_serves_on() -> None:
    context = mp.get_context("spawn")
    ours, theirs = context.Pipe()
    child = context.Process(target=_serve, args=(theirs, 0, os.getpid()))
    child.start()
    theirs.close()
    try:
        for _ in range(2):
            ours.send({"kind": "no-such-kind"})
            assert ours.poll(60)
            reply = ours.recv()
            assert (reply["ok"], reply["cuda_error"]) == (False, False)
            assert reply["error"]
    finally:
        ours.close()
        child.join(60)
    assert child.exitcode == 0
