"""The cpu lane's tests: one plant log for the whole session of a worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from . import plants


@pytest.fixture(scope="session", autouse=True)
def plant_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One file the plants log to, named in the environment of every test here, from the first
    to the last: a variable set for some tests only (or set anew, to another path) would start the
    shared warm parent again, a vLLM import, at each switch (``harness.runner.warm.SharedWarmParent``
    keys on the environment). A test that reads it empties it first."""
    path = tmp_path_factory.mktemp("plants") / "plant.log"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(plants.PLANT_LOG, str(path))
        yield path
