"""An all-pairs covering design laid on top of a full product, deterministic and pure.

The matrix keeps the full product on the axes bugs live in (backend, causal, sink, capability,
loader, ...): those rows are the *base*, every covered axis at its default. The covered axes
(method, head size, draft KV dtype, layer layout, ...) would multiply that product by their
sizes; instead, extra rows are added until every pair of values of any two axes, at least one of
them covered, appears in some row (base or extra) that no exclusion removes.

Extra rows are built greedily (AETG-style, without its randomness): take the first pair still
uncovered in a fixed order (axes in declaration order, values in declaration order), then give
every other axis, in order, the value that covers the most pairs still uncovered together with
the values already chosen (ties go to the value declared first), never a value that completes
an exclusion. The result depends only on the declared axes, values and exclusions, so two
expansions of one matrix file give the same rows in the same order.

A pair every completion of which some exclusion removes is *excluded*, reported, never covered.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.axes import AxisValue

Factors = tuple[tuple[str, tuple[AxisValue, ...]], ...]
Row = dict[str, AxisValue]
Pair = tuple[tuple[int, int], tuple[int, int]]  # ((axis index, value index), (axis index, value index))
Excluded = Callable[[Mapping[str, AxisValue]], bool]  # a partial row some exclusion already removes


@dataclass(frozen=True)
class Covering:
    base: tuple[Row, ...]  # the full product of the product axes, covered axes at their defaults
    extra: tuple[Row, ...]  # rows added to cover the remaining pairs
    excluded_pairs: tuple[tuple[tuple[str, AxisValue], tuple[str, AxisValue]], ...]

    @property
    def rows(self) -> tuple[Row, ...]:
        return self.base + self.extra


def cover(
    product: Factors,
    covered: Factors,
    defaults: Mapping[str, AxisValue],
    excluded: Excluded,
) -> Covering:
    """``product`` axes in full, ``covered`` axes pairwise; ``defaults`` gives each covered axis
    the value base rows carry (it must be one of its values); ``excluded(partial)`` is True
    when the values in ``partial`` already match some exclusion completely."""
    factors = product + covered
    names = [name for name, _ in factors]
    values = [vals for _, vals in factors]
    covered_index = set(range(len(product), len(factors)))

    base: list[Row] = []
    default_row = {name: defaults[name] for name, _ in covered}
    for combo in itertools.product(*(vals for _, vals in product)):
        row = dict(zip([n for n, _ in product], combo, strict=True)) | default_row
        if not excluded(row):
            base.append(row)

    def index_of(row: Mapping[str, AxisValue]) -> list[int]:
        return [values[a].index(row[names[a]]) for a in range(len(factors))]

    # Only pairs with a covered axis are to be covered: a base row removes just those of its pairs
    # (the gpu matrix's 10k base rows would otherwise build a million product-only pairs for nothing).
    axis_pairs = [
        (a, b) for a, b in itertools.combinations(range(len(factors)), 2) if a in covered_index or b in covered_index
    ]
    uncovered: set[Pair] = {
        ((a, i), (b, j)) for a, b in axis_pairs for i in range(len(values[a])) for j in range(len(values[b]))
    }
    for row in base:
        indices = index_of(row)
        uncovered -= {((a, indices[a]), (b, indices[b])) for a, b in axis_pairs}

    extra: list[Row] = []
    impossible: list[Pair] = []
    while uncovered:
        seed = min(uncovered)
        chosen = _complete(seed, values, names, uncovered, excluded)
        if chosen is None:
            uncovered.discard(seed)
            impossible.append(seed)
            continue
        row = {names[a]: values[a][chosen[a]] for a in range(len(factors))}
        extra.append(row)
        uncovered -= _pairs_of(chosen)

    def named(pair: Pair) -> tuple[tuple[str, AxisValue], tuple[str, AxisValue]]:
        (a, i), (b, j) = pair
        return (names[a], values[a][i]), (names[b], values[b][j])

    return Covering(tuple(base), tuple(extra), tuple(named(p) for p in sorted(impossible)))


def _pairs_of(indices: Sequence[int]) -> set[Pair]:
    return {((a, indices[a]), (b, indices[b])) for a, b in itertools.combinations(range(len(indices)), 2)}


def _complete(
    seed: Pair,
    values: Sequence[tuple[AxisValue, ...]],
    names: Sequence[str],
    uncovered: set[Pair],
    excluded: Excluded,
) -> list[int] | None:
    (a, i), (b, j) = seed
    chosen: dict[int, int] = {a: i, b: j}

    def partial() -> dict[str, AxisValue]:
        return {names[k]: values[k][v] for k, v in chosen.items()}

    if excluded(partial()):
        return None
    for axis in range(len(values)):
        if axis in chosen:
            continue
        best: tuple[int, int] | None = None  # (gain, value index)
        for value in range(len(values[axis])):
            chosen[axis] = value
            if excluded(partial()):
                continue
            gain = sum(1 for other, v in chosen.items() if other != axis and _key(axis, value, other, v) in uncovered)
            if best is None or gain > best[0]:
                best = (gain, value)
        if best is None:
            return None
        chosen[axis] = best[1]
    return [chosen[k] for k in range(len(values))]


def _key(a: int, i: int, b: int, j: int) -> Pair:
    return ((a, i), (b, j)) if a < b else ((b, j), (a, i))


def pairs_present(rows: Iterable[Mapping[str, AxisValue]], first: str, second: str) -> set[tuple[AxisValue, AxisValue]]:
    """The (first, second) value pairs that appear in ``rows`` (for checks and tests)."""
    return {(row[first], row[second]) for row in rows}
