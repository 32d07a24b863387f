"""The matrices and expectations this harness ships, found by lane name.

In a source checkout they are the repository's ``matrices/``; in an installed wheel the same
files are ``harness/matrices/`` (setup.py maps the folder into the package). Either way
``--matrix selection`` means the shipped ``selection.toml``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).parent


def matrices_dir() -> Path:
    installed = _PACKAGE / "matrices"
    return installed if installed.is_dir() else _PACKAGE.parent / "matrices"


def shipped_matrices() -> tuple[str, ...]:
    return tuple(sorted(path.stem for path in matrices_dir().glob("*.toml")))


def matrix_path(name_or_path: str) -> Path:
    """A matrix file: an existing path as given, else the shipped matrix of that name."""
    given = Path(name_or_path)
    if given.exists() or given.suffix == ".toml" or "/" in name_or_path:
        return given
    return matrices_dir() / f"{name_or_path}.toml"
