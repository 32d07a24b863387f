"""Atomic file replacement: a reader sees the old file or the new one, never half of either.

A dashboard that reads junit.xml while a report step is killed (runner pre-empted, disk
full) must not find it truncated, so every report is written to a temporary file in the
same directory, flushed to disk, and renamed over the old one (rename is atomic within a
filesystem).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from harness.errors import InputError

# Reports are shared artifacts; mkstemp's private 0600 would hide them from other users.
_REPORT_MODE = 0o644


def write_atomic(path: Path, data: bytes) -> None:
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, _REPORT_MODE)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def write_all_atomic(out_dir: Path, files: Mapping[str, bytes]) -> dict[str, Path]:
    """Write already-rendered files; rendering first means bad input never creates any of them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, data in files.items():
        path = out_dir / name
        write_atomic(path, data)
        written[name] = path
    return written


def write_outputs(files: Mapping[Path, bytes]) -> None:
    """Write files a user named on the command line; a path we cannot write is their input error."""
    for path, data in files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
        except OSError as exc:
            raise InputError(path, "", f"cannot write: {exc.strerror or exc}") from None
