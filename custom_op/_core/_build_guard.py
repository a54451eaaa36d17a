"""Runs the build's command so that it dies with the process that asked for it.

Usage (custom_op/_core/_build.py does this; run as a script, so that it imports
nothing of custom_op, whose import would start another build)::

    python -I _build_guard.py BUILDER_PID COMMAND [ARG ...]

The builder starts this script in a session of its own, so the script, the
command (setup.py) and every compiler the command starts form one process
group. The script waits for the command, and every 0.2 s checks that its
parent is still BUILDER_PID; when the builder is gone (killed by the OOM
killer, kill -9, a SageMaker job stopped) or sends SIGTERM, it kills the
whole group, compilers included, which would otherwise compile on for
minutes into a folder nobody reads. It exits with the command's status.
"""

import os
import signal
import subprocess
import sys

_POLL_SECONDS = 0.2


def _kill_group(*_: object) -> None:
    """Kills this process group: the command, its compilers, and this script."""
    os.killpg(0, signal.SIGKILL)


def main() -> int:
    builder, command = int(sys.argv[1]), sys.argv[2:]
    signal.signal(signal.SIGTERM, _kill_group)
    if os.getppid() != builder:
        return 1  # the builder died before this script started
    child = subprocess.Popen(command)
    while True:
        try:
            return child.wait(timeout=_POLL_SECONDS)
        except subprocess.TimeoutExpired:
            if os.getppid() != builder:
                _kill_group()


if __name__ == "__main__":
    sys.exit(main())
