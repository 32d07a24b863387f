"""Reading the project's TOML input files (matrices, expectations, findings): every mistake is an InputError."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.errors import InputError


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise InputError(path, "", "file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, "", f"TOML syntax error: {exc}") from None
    except UnicodeDecodeError:
        raise InputError(path, "", "not a text file (not UTF-8): a TOML file was expected") from None
    except IsADirectoryError:
        raise InputError(path, "", "is a folder: a TOML file was expected") from None
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


def parse_release(text: str) -> Version:
    """A vLLM version string as a PEP 440 version; ValueError names the text."""
    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a PEP 440 version (e.g. 0.33.0)") from None


def release(path: Path, key: str, raw: object) -> Version:
    """A vLLM release written in a file (``"0.33.0"``)."""
    try:
        if not isinstance(raw, str):
            raise ValueError(f"{raw!r} is not a version string (e.g. 0.33.0)")
        return parse_release(raw)
    except ValueError as exc:
        raise InputError(path, key, str(exc)) from None


def release_range(path: Path, key: str, raw: object) -> SpecifierSet:
    """A range of vLLM releases written in a file: PEP 440 specifiers (``">=0.25,<0.30"``)."""
    try:
        if not isinstance(raw, str) or not raw.strip():
            raise InvalidSpecifier(repr(raw))
        return SpecifierSet(raw)
    except InvalidSpecifier:
        raise InputError(
            path, key, f"{raw!r} is not a PEP 440 version range", (">=0.25,<0.30", "==0.24.*", "<0.25")
        ) from None
