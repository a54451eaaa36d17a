"""A real Ctrl-C for the prepare tool's tests: the tool in its own session, SIGINT to the group."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence

REPO = pathlib.Path(__file__).resolve().parent.parent


def interrupt_prepare(args: Sequence[str], started: Callable[[], bool],
                      hold_after: int = 1) -> tuple[int, bytes]:
    """Runs ``python -m custom_op.prepare ARGS``, sends Ctrl-C once ``started()``; (status, stderr).

    SIGINT goes to the whole process group, parent and workers, as a terminal
    sends it. Each worker, once it has finished ``hold_after`` files (or shard
    members), waits for the run to be stopped (pool.HOLD_AFTER_VARIABLE), so
    the run cannot end before the signal arrives, however loaded the machine:
    the interrupt lands at a known point, with no sleep that depends on speed.
    Fails the test if ``started()`` is not true within 60 s.
    """
    environment = {**os.environ, "CUSTOM_OP_PREPARE_TEST_HOLD_AFTER": str(hold_after)}
    process = subprocess.Popen([sys.executable, "-m", "custom_op.prepare", *args], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, env=environment)
    try:
        deadline = time.monotonic() + 60
        while not started() and process.poll() is None:
            assert time.monotonic() < deadline, "the run did not start writing within 60 s"
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stderr
