"""The order a run visits its cells in, as a run option anyone can change to check isolation.

A verdict is a function of the cell and the vLLM release: never of the cells a cell process ran
before it. vLLM keeps answers in process-level caches (the selector's ``_cached_get_attn_backend``
and others, docs/explanation/isolation.md), and a cell process serves many cells, so the order
is a variable a run can leave unchecked. ``--order reverse`` and ``--order shuffle:SEED`` make it
one a user sets: the same matrix in another order must give every cell the same verdict and
message (``dflash-matrix diff --exact`` ignoring timings).

Cells that share a process key stay together in every order (each key's cell process starts once,
as in the default order); the order of the keys and the order of the cells within each key change.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from harness.errors import InputError

CHOICES = ("default", "reverse", "shuffle:SEED")
_SHUFFLE = re.compile(r"^shuffle:(-?\d+)$")

T = TypeVar("T")


@dataclass(frozen=True)
class CellOrder:
    """``default``: by process key, then as the matrix expands; ``reverse``: the default order
    backwards; ``shuffle``: keys and the cells within each key permuted by ``seed``."""

    kind: str = "default"
    seed: int | None = None

    def __str__(self) -> str:
        return f"shuffle:{self.seed}" if self.kind == "shuffle" else self.kind

    def arrange(self, items: Iterable[T], key: Callable[[T], str]) -> tuple[T, ...]:
        """``items`` grouped by ``key`` (a stable sort), then ordered as this order says."""
        grouped = sorted(items, key=key)
        if self.kind == "default":
            return tuple(grouped)
        if self.kind == "reverse":
            return tuple(reversed(grouped))
        groups: dict[str, list[T]] = {}
        for item in grouped:
            groups.setdefault(key(item), []).append(item)
        rng = random.Random(self.seed)
        names = sorted(groups)
        rng.shuffle(names)
        arranged: list[T] = []
        for name in names:
            members = groups[name]
            rng.shuffle(members)
            arranged.extend(members)
        return tuple(arranged)


DEFAULT = CellOrder()


def parse_order(text: str | None, where: str = "--order") -> CellOrder:
    """``default``, ``reverse`` or ``shuffle:<int>``; anything else is the user's input error."""
    if text is None or text == "default":
        return DEFAULT
    if text == "reverse":
        return CellOrder("reverse")
    match = _SHUFFLE.match(text)
    if match is None:
        raise InputError(where, "", f"{text!r} is not a cell order", CHOICES)
    return CellOrder("shuffle", int(match.group(1)))
