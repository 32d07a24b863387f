"""The journal: one JSON line per event, appended and flushed as it happens.

Everything a crash or kill can reach is here first; reports are rebuilt from it.
Each writer (a pytest process or xdist worker) owns one file, so no two processes
ever append to the same file.

    {"kind": "run",  "run": {...metadata...}, "planned": ["cell-id", ...]}
    {"kind": "env",  "env": {...}}       # the lane's environment, once its process is up
    {"kind": "cell", "cell": {...CellResult.to_json()...}}
    {"kind": "end",  "at": "2026-12-02T10:00:00+00:00"}
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from harness.errors import InputError
from harness.result import CellResult, RecordError

JOURNAL_SUFFIX = ".jsonl"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class JournalWriter:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: IO[str] = path.open("a", encoding="utf-8")

    def _append(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, sort_keys=True) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def start(self, run: dict[str, Any], planned: Iterable[str]) -> None:
        self._append({"kind": "run", "run": run, "planned": list(planned)})

    def env(self, env: dict[str, Any]) -> None:
        self._append({"kind": "env", "env": env})

    def cell(self, result: CellResult) -> None:
        self._append({"kind": "cell", "cell": result.to_json()})

    def end(self) -> None:
        self._append({"kind": "end", "at": now_iso()})

    def close(self) -> None:
        self._handle.close()


@dataclass
class JournalContents:
    runs: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    planned: list[str] = field(default_factory=list)
    cells: list[CellResult] = field(default_factory=list)
    ended: bool = False
    files: list[Path] = field(default_factory=list)

    @property
    def not_run(self) -> list[str]:
        done = {cell.id for cell in self.cells}
        seen: set[str] = set()
        missing = []
        for ident in self.planned:
            if ident not in done and ident not in seen:
                missing.append(ident)
            seen.add(ident)
        return missing


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
        if not isinstance(record, dict) or record.get("kind") not in ("run", "env", "cell", "end"):
            raise InputError(path, f"line {number}", "not a journal record", ("kind = run", "env", "cell", "end"))
        yield number, record


def read_journals(paths: Iterable[str | Path]) -> JournalContents:
    contents = JournalContents()
    latest: dict[str, CellResult] = {}
    for path in journal_files(paths):
        contents.files.append(path)
        for number, record in _records(path):
            kind = record["kind"]
            if kind == "run":
                if not isinstance(record.get("run"), dict) or not isinstance(record.get("planned"), list):
                    raise InputError(path, f"line {number}", "run record needs 'run' (object) and 'planned' (list)")
                contents.runs.append(record["run"])
                contents.planned.extend(str(p) for p in record["planned"])
            elif kind == "env":
                if not isinstance(record.get("env"), dict):
                    raise InputError(path, f"line {number}", "env record needs 'env' (object)")
                contents.env.update(record["env"])
            elif kind == "cell":
                try:
                    result = CellResult.from_json(record.get("cell"))
                except RecordError as exc:
                    raise InputError(path, f"line {number}", str(exc)) from None
                latest[result.id] = result  # a resumed or retried cell: the later record stands
            else:
                contents.ended = True
    contents.cells = list(latest.values())
    return contents
