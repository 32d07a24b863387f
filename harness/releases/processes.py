"""Child processes a command owns: a lane run, a release install, a repro script.

Each starts in a process group of its own and the whole group ends with the call that started it,
however that call ends (Ctrl-C, the SIGTERM the command line turns into an exception, a timeout):
a `watch` or `history` killed by CI once left its lane child running, reparented to init, writing
reports for minutes after its parent died (issue 36). A group of its own also keeps a terminal's
Ctrl-C from reaching the lane's cell processes before the parent has decided what to do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

GRACE_S = 10.0  # a lane child's pytest writes its journal's last line on SIGTERM; then it is killed


def run_owned(
    command: Sequence[str], *, timeout: float | None = None, **options: Any
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(command, **options)`` whose process group never outlives this call."""
    with subprocess.Popen(command, start_new_session=True, **options) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            end_group(process)
            raise
        # Grandchildren the child left behind (a cell process it did not wait for) go with it.
        end_group(process)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def end_group(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the child's group, SIGKILL to whatever of it is left after the grace period."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
