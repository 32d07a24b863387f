"""The journal: one JSON line per event, appended and flushed as it happens.

Everything a crash or kill can reach is here first; reports are rebuilt from it.
Each writer (a pytest process or xdist worker) owns one file, so no two processes
ever append to the same file.

    {"kind": "run",  "run": {"lane": "cpu", ...metadata...}, "planned": ["cell-id", ...], "at": "..."}
    {"kind": "env",  "env": {...}}       # the lane's environment, once its process is up
    {"kind": "cell", "cell": {...CellResult.to_json()...}}
    {"kind": "end",  "at": "2026-12-02T10:00:00+00:00"}

The run metadata is free-form except for ``lane`` (required: it places the planned cells)
and ``stale_expectations`` (optional list of strings); reports show every string value.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from harness.axes import CELL_ID
from harness.errors import InputError
from harness.matrix import LANES
from harness.result import CellResult, RecordError

JOURNAL_SUFFIX = ".jsonl"
# A flushed record survives the death of the process that wrote it (kill, OOM, a crash
# of pytest); only the host going down can lose what the OS has not yet written out. An
# fsync per cell cost a large share of a cpu cell (benchmarks/README.md, "Figures behind the
# code"), so a cell record is synced only when this long has passed since the last sync (else
# with a later record, or at close): a host crash loses the last cells, which --resume runs
# again. Other records sync at once.
SYNC_INTERVAL_S = 1.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class JournalWriter:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(path)
        self._handle: IO[str] = path.open("a", encoding="utf-8")
        self._synced = time.monotonic()

    def _append(self, record: dict[str, Any], sync: bool = True) -> None:
        self._handle.write(json.dumps(record, sort_keys=True) + "\n")
        self._handle.flush()
        if sync or time.monotonic() - self._synced >= SYNC_INTERVAL_S:
            self._sync()

    def _sync(self) -> None:
        os.fsync(self._handle.fileno())
        self._synced = time.monotonic()

    def start(self, run: dict[str, Any], planned: Iterable[str]) -> None:
        self._append({"kind": "run", "run": run, "planned": list(planned), "at": now_iso()})

    def env(self, env: dict[str, Any]) -> None:
        self._append({"kind": "env", "env": env})

    def cell(self, result: CellResult) -> None:
        self._append({"kind": "cell", "cell": result.to_json()}, sync=False)

    def end(self) -> None:
        self._append({"kind": "end", "at": now_iso()})

    def close(self) -> None:
        if not self._handle.closed:
            self._sync()
        self._handle.close()


def _drop_torn_tail(path: Path) -> None:
    """A run killed mid-write leaves a partial last line; a resumed run appending after it
    would bury that fragment mid-file, where it reads as corruption. The cell it belonged
    to never finished, so dropping the fragment loses nothing."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


@dataclass
class JournalContents:
    runs: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    planned: list[str] = field(default_factory=list)
    cells: list[CellResult] = field(default_factory=list)
    ended: bool = False
    files: list[Path] = field(default_factory=list)
    # (lane, cell id) for every planned cell: ids are unique within a lane only.
    plan: list[tuple[str, str]] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None

    @property
    def not_run(self) -> list[str]:
        return [ident for _, ident in self.not_run_cells]

    @property
    def not_run_cells(self) -> list[tuple[str, str]]:
        """Planned (lane, id) pairs that no cell record answers, in plan order."""
        done = {(cell.lane, cell.id) for cell in self.cells}
        return [key for key in dict.fromkeys(self.plan) if key not in done]


def journal_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly, or every *.jsonl inside a named directory."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.glob(f"*{JOURNAL_SUFFIX}")))
        elif path.exists():
            found.append(path)
        else:
            raise InputError(path, "", "journal not found")
    if not found:
        raise InputError(", ".join(str(p) for p in paths), "", "no journal files (*.jsonl) found")
    return found


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "", "not UTF-8 text") from None
    except OSError as exc:
        raise InputError(path, "", f"cannot read: {exc.strerror}") from None
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not text.endswith("\n"):
                # A torn last line is what a kill mid-write leaves; everything before it stands.
                return
            raise InputError(path, f"line {number}", f"not JSON ({exc.msg})") from None
        except RecursionError:
            raise InputError(path, f"line {number}", "JSON nested too deeply") from None
        except ValueError:  # an integer past Python's int_max_str_digits limit
            raise InputError(path, f"line {number}", "JSON number too long to read") from None
        if not isinstance(record, dict) or record.get("kind") not in ("run", "env", "cell", "end"):
            raise InputError(path, f"line {number}", "not a journal record", ("kind = run", "env", "cell", "end"))
        yield number, record


def read_journals(paths: Iterable[str | Path]) -> JournalContents:
    contents = JournalContents()
    latest: dict[tuple[str, str], CellResult] = {}
    starts: list[str] = []
    ends: list[str] = []
    for path in journal_files(paths):
        contents.files.append(path)
        empty = True
        for number, record in _records(path):
            empty = False
            kind = record["kind"]
            if kind == "run":
                run, planned = _run_record(path, number, record)
                contents.runs.append(run)
                contents.planned.extend(planned)
                contents.plan.extend((run["lane"], ident) for ident in planned)
                starts.extend(_stamp(path, number, record))
            elif kind == "env":
                if not isinstance(record.get("env"), dict):
                    raise InputError(path, f"line {number}", "env record needs 'env' (object)")
                contents.env.update(record["env"])
            elif kind == "cell":
                try:
                    result = CellResult.from_json(record.get("cell"))
                except RecordError as exc:
                    raise InputError(path, f"line {number}", str(exc)) from None
                latest[(result.lane, result.id)] = result  # a resumed or retried cell: the later record stands
            else:
                contents.ended = True
                ends.extend(_stamp(path, number, record))
        if empty:
            raise InputError(path, "", "empty journal: no run, env, cell or end record")
    contents.cells = list(latest.values())
    # ISO-8601 UTC stamps written by now_iso() order as text.
    contents.started_at = min(starts, default=None)
    contents.ended_at = max(ends, default=None)
    return contents


def _run_record(path: Path, number: int, record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    run, planned = record.get("run"), record.get("planned")
    where = f"line {number}"
    if not isinstance(run, dict) or not isinstance(planned, list):
        raise InputError(path, where, "run record needs 'run' (object) and 'planned' (list)")
    if run.get("lane") not in LANES:
        raise InputError(path, f"{where}: run.lane", f"{run.get('lane')!r} is not a lane", LANES)
    for ident in planned:
        if not isinstance(ident, str) or not CELL_ID.match(ident):
            raise InputError(path, f"{where}: planned", f"{ident!r} is not a cell id")
    stale = run.get("stale_expectations", [])
    if not isinstance(stale, list) or not all(isinstance(line, str) for line in stale):
        raise InputError(path, f"{where}: run.stale_expectations", "must be a list of strings")
    return run, planned


def _stamp(path: Path, number: int, record: dict[str, Any]) -> list[str]:
    at = record.get("at")
    if at is None:
        return []
    try:
        datetime.fromisoformat(at)
    except (TypeError, ValueError):
        raise InputError(path, f"line {number}: at", f"{at!r} is not an ISO-8601 time") from None
    return [at]
