"""How a command writes: whole files, whole sets of files, never over what it reads, one run at a time.

A dashboard that reads junit.xml while a report step is killed (runner pre-empted, disk
full) must not find it truncated, so every file is written to a temporary file in the
same directory, flushed to disk, and renamed over the old one (rename is atomic within a
filesystem). Files that belong together (a report set, a lane's expectations and its
findings) are written as a set: every temporary first, then the renames, so a full disk or
a read-only file stops the set before any of it lands (issue 36: an expectations file that
recorded a release whose findings never got written made every later command exit 2).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from harness.errors import InputError

# Reports are shared artifacts; mkstemp's private 0600 would hide them from other users.
_REPORT_MODE = 0o644
LOCK_NAME = ".dflash-matrix.lock"


def _temporary(path: Path, data: bytes) -> Path:
    """``data`` in a flushed temporary sibling of ``path``, ready to be renamed over it."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        # An existing file keeps its mode (a read-only expectations file stays read-only).
        os.chmod(temp, path.stat().st_mode & 0o7777 if path.exists() else _REPORT_MODE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return Path(temp)


def write_atomic(path: Path, data: bytes) -> None:
    write_set({path: data})


def write_set(files: Mapping[Path, bytes]) -> None:
    """Write files that belong together: all of them or, on any failure, none (the old ones stay).

    Every temporary is written before anything is renamed, so a full disk stops the set whole. A
    file we may not replace (read-only, in a read-only folder) is refused before any rename too:
    rename ignores a file's own mode, and a user who made it read-only meant it."""
    temps: dict[Path, Path] = {}
    try:
        for path in files:
            if path.exists() and not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        for path, data in files.items():
            temps[path] = _temporary(path, data)
        for path, temp in temps.items():
            os.replace(temp, path)
    except BaseException:
        for temp in temps.values():
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise


def write_all_atomic(out_dir: Path, files: Mapping[str, bytes]) -> dict[str, Path]:
    """Write already-rendered files as one set; rendering first means bad input never creates any of them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {name: out_dir / name for name in files}
    write_set({written[name]: data for name, data in files.items()})
    return written


def write_outputs(files: Mapping[Path, bytes]) -> None:
    """Write files a user named on the command line; a path we cannot write is their input error."""
    try:
        for path in files:
            path.parent.mkdir(parents=True, exist_ok=True)
        write_set(files)
    except OSError as exc:
        where = exc.filename or next(iter(files), "")
        raise InputError(where, "", f"cannot write: {exc.strerror or exc}") from None


def writable_folder(path: Path, option: str) -> Path:
    """A folder a command will write into, checked before anything runs: it is, or can be, a folder."""
    if path.exists() and not path.is_dir():
        raise InputError(path, "", f"output path exists and is not a directory ({option})")
    existing = next((parent for parent in (path, *path.parents) if parent.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(path, "", f"{option} cannot be written here ({existing} is not a writable folder)")
    return path


def refuse_overlap(outputs: Iterable[tuple[str, Path]], inputs: Iterable[Path]) -> None:
    """An output that is an input (a file the command reads, or a folder it was given) is refused before
    anything runs: ``repro --out R/matrix.json``, ``diff A B --json B/matrix.json``, ``merge A --out A``
    once replaced what they read. Callers name the files a folder input is read for (its matrix.json);
    a new file beside them destroys nothing."""
    read = {Path(os.path.abspath(path)) for path in inputs}
    for option, output in outputs:
        written = Path(os.path.abspath(output))
        if written in read:
            raise InputError(output, "", f"{option} would overwrite an input of this command: choose another path")


def report_paths(path: Path) -> tuple[Path, ...]:
    """What reading a report (a folder or its matrix.json) reads: the path, and its matrix.json."""
    return (path, path / "matrix.json") if path.is_dir() else (path,)


@contextlib.contextmanager
def locked(folder: Path, *, wait: bool) -> Iterator[None]:
    """One writer of ``folder`` at a time: an advisory lock on a file inside it, holding the holder's pid.

    flock is released by the kernel when its holder dies, so a killed run leaves no stale lock; the
    file is removed on release, so a report folder holds only its reports. A run that locked a file
    another removed meanwhile locks again (the inode check), so two runs never hold two files."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    while True:
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(path, "", f"cannot take the lock: {exc.strerror or exc}") from None
        try:
            _acquire(handle, folder, wait)
            if _same_file(handle, path):
                break
        except BaseException:
            os.close(handle)
            raise
        os.close(handle)
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(handle)  # closing releases the lock


def _acquire(handle: int, folder: Path, wait: bool) -> None:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(handle, 32, 0).decode(errors="replace").strip() or "unknown"
        if not wait:
            raise InputError(folder, "", f"another dflash-matrix run (pid {holder}) is writing here") from None
        print(f"dflash-matrix: waiting for pid {holder}, which is writing {folder}", file=sys.stderr, flush=True)
        fcntl.flock(handle, fcntl.LOCK_EX)


def _same_file(handle: int, path: Path) -> bool:
    try:
        return os.fstat(handle).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False
