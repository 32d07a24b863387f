"""Reading the project's TOML input files (matrices, expectations): every mistake is an InputError."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import InputError


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise InputError(path, "", "file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, "", f"TOML syntax error: {exc}") from None
    except OSError as exc:
        raise InputError(path, "", f"cannot read: {exc.strerror}") from None


def only_keys(path: Path, where: str, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise InputError(path, f"{where}.{key}" if where else key, "unknown key", allowed)


def array_of_tables(path: Path, raw: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    tables = raw.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise InputError(path, key, f"must be an array of tables ([[{key}]])")
    return tables
