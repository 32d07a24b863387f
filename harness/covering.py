"""An all-pairs covering design laid on top of a full product, with an optional strength-3 part
for chosen axes, deterministic and pure.

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

``later`` axes are covered after everything above is fixed: every earlier row holds each of them
at its default, and only then are rows added until every pair of a later axis's value with any
other axis's value appears in some row, the ``present`` rows (a matrix's [[product]] rows)
counted too. Adding a later axis therefore renames no existing cell: it only adds rows.

``silent(row)`` names rows that stay cells but cover nothing (issue 35): a cell whose target vLLM
refuses stops before vLLM answers anything about the draft, so a tuple it holds is not tested
there. Such a row counts toward no pair or triple, and no extra row is built that is one; a tuple
that only such rows could hold is excluded and reported like any other.

``triples`` names axes an interaction may need three of at once (issue 24: a bug that needs
generation x requested backend x one target setting falls between pairwise rows). Once every
pair is covered, more rows are added the same way until every value triple of any three of those
axes, at least one of them covered, appears in some row; triples are counted in the gain as pairs
are. The pairwise rows come first and are the rows a matrix without ``triples`` gets, so naming
triples only adds cells. A triple no row can hold is excluded and reported like a pair.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.axes import AxisValue

Factors = tuple[tuple[str, tuple[AxisValue, ...]], ...]
Row = dict[str, AxisValue]
Pair = tuple[tuple[int, int], tuple[int, int]]  # ((axis index, value index), (axis index, value index))
# A pair or a triple of (axis index, value index), in axis order.
Interaction = tuple[tuple[int, int], ...]
Named = tuple[tuple[str, AxisValue], ...]
Excluded = Callable[[Mapping[str, AxisValue]], bool]  # a partial row some exclusion already removes


@dataclass(frozen=True)
class Covering:
    base: tuple[Row, ...]  # the full product of the product axes, covered axes at their defaults
    extra: tuple[Row, ...]  # rows added to cover the remaining pairs
    excluded_pairs: tuple[Named, ...]  # two members each
    excluded_triples: tuple[Named, ...] = ()

    @property
    def rows(self) -> tuple[Row, ...]:
        return self.base + self.extra


def cover(
    product: Factors,
    covered: Factors,
    defaults: Mapping[str, AxisValue],
    excluded: Excluded,
    triples: tuple[str, ...] = (),
    silent: Excluded = lambda row: False,
    later: Factors = (),
    present: Sequence[Mapping[str, AxisValue]] = (),
) -> Covering:
    """``product`` axes in full, ``covered`` axes pairwise; ``defaults`` gives each covered axis
    the value base rows carry (it must be one of its values); ``excluded(partial)`` is True
    when the values in ``partial`` already match some exclusion completely; every value triple
    of three axes named in ``triples``, one of them covered, appears in some row too; a row
    ``silent`` matches is kept but covers nothing."""
    factors = product + covered
    names = [name for name, _ in factors]
    values = [vals for _, vals in factors]
    covered_index = set(range(len(product), len(factors)))
    triple_axes = frozenset(names.index(name) for name in triples)

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
    uncovered: set[Interaction] = {
        ((a, i), (b, j)) for a, b in axis_pairs for i in range(len(values[a])) for j in range(len(values[b]))
    }
    for row in base:
        if silent(row):
            continue
        indices = index_of(row)
        uncovered -= {((a, indices[a]), (b, indices[b])) for a, b in axis_pairs}

    extra: list[Row] = []
    impossible: list[Interaction] = []

    def refused(partial: Mapping[str, AxisValue]) -> bool:
        return excluded(partial) or silent(partial)

    def fill(uncovered: set[Interaction]) -> None:
        while uncovered:
            seed = min(uncovered)
            chosen = _complete(seed, values, names, uncovered, refused, triple_axes)
            if chosen is None:
                uncovered.discard(seed)
                impossible.append(seed)
                continue
            extra.append({names[a]: values[a][chosen[a]] for a in range(len(factors))})
            uncovered -= _interactions_of(chosen, triple_axes)

    fill(uncovered)
    all_rows = [index_of(row) for row in (*base, *extra) if not silent(row)]
    uncovered_triples: set[Interaction] = {
        ((a, i), (b, j), (c, k))
        for a, b, c in itertools.combinations(sorted(triple_axes), 3)
        if covered_index & {a, b, c}
        for i in range(len(values[a]))
        for j in range(len(values[b]))
        for k in range(len(values[c]))
    }
    for indices in all_rows:
        uncovered_triples -= _triples_of(indices, triple_axes)
    fill(uncovered_triples)

    def named(interaction: Interaction) -> Named:
        return tuple((names[a], values[a][i]) for a, i in interaction)

    pairs = tuple(named(p) for p in sorted(impossible) if len(p) == 2)
    earlier = Covering(
        tuple(base),
        tuple(extra),
        pairs,
        tuple(named(t) for t in sorted(impossible) if len(t) == 3),
    )
    if not later:
        return earlier
    return _cover_later(earlier, factors, later, defaults, excluded, silent, present)


def _cover_later(
    earlier: Covering,
    factors: Factors,
    later: Factors,
    defaults: Mapping[str, AxisValue],
    excluded: Excluded,
    silent: Excluded,
    present: Sequence[Mapping[str, AxisValue]],
) -> Covering:
    """``earlier``'s rows with every later axis at its default, then rows that cover each pair of a
    later axis's value with another axis's value that no earlier or ``present`` row holds."""
    held = {name: defaults[name] for name, _ in later}
    base = tuple(row | held for row in earlier.base)
    extra = [row | held for row in earlier.extra]
    every = factors + later
    names = [name for name, _ in every]
    values = [vals for _, vals in every]
    late = set(range(len(factors), len(every)))
    axis_pairs = [(a, b) for a, b in itertools.combinations(range(len(every)), 2) if a in late or b in late]
    uncovered: set[Interaction] = {
        ((a, i), (b, j)) for a, b in axis_pairs for i in range(len(values[a])) for j in range(len(values[b]))
    }
    for row in (*base, *extra, *present):
        if silent(row) or any(row.get(name) not in vals for name, vals in every):
            continue
        indices = [values[a].index(row[names[a]]) for a in range(len(every))]
        uncovered -= {((a, indices[a]), (b, indices[b])) for a, b in axis_pairs}

    def refused(partial: Mapping[str, AxisValue]) -> bool:
        return excluded(partial) or silent(partial)

    impossible: list[Interaction] = []
    while uncovered:
        seed = min(uncovered)
        chosen = _complete(seed, values, names, uncovered, refused, frozenset())
        if chosen is None:
            uncovered.discard(seed)
            impossible.append(seed)
            continue
        extra.append({names[a]: values[a][chosen[a]] for a in range(len(every))})
        uncovered -= _pairs_of(chosen)
    pairs = tuple(tuple((names[a], values[a][i]) for a, i in pair) for pair in sorted(impossible))
    return Covering(base, tuple(extra), earlier.excluded_pairs + pairs, earlier.excluded_triples)


def _pairs_of(indices: Sequence[int]) -> set[Interaction]:
    return {((a, indices[a]), (b, indices[b])) for a, b in itertools.combinations(range(len(indices)), 2)}


def _triples_of(indices: Sequence[int], triple_axes: frozenset[int]) -> set[Interaction]:
    return {
        ((a, indices[a]), (b, indices[b]), (c, indices[c]))
        for a, b, c in itertools.combinations(sorted(triple_axes), 3)
    }


def _interactions_of(indices: Sequence[int], triple_axes: frozenset[int]) -> set[Interaction]:
    return _pairs_of(indices) | _triples_of(indices, triple_axes)


def _complete(
    seed: Interaction,
    values: Sequence[tuple[AxisValue, ...]],
    names: Sequence[str],
    uncovered: set[Interaction],
    excluded: Excluded,
    triple_axes: frozenset[int],
) -> list[int] | None:
    chosen: dict[int, int] = dict(seed)

    def partial() -> dict[str, AxisValue]:
        return {names[k]: values[k][v] for k, v in chosen.items()}

    def gain(axis: int, value: int) -> int:
        others = [(other, v) for other, v in chosen.items() if other != axis]
        count = sum(1 for other, v in others if _key(axis, value, other, v) in uncovered)
        if axis in triple_axes:
            members = [(other, v) for other, v in others if other in triple_axes]
            count += sum(
                1
                for first, second in itertools.combinations(members, 2)
                if tuple(sorted(((axis, value), first, second))) in uncovered
            )
        return count

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
            score = gain(axis, value)
            if best is None or score > best[0]:
                best = (score, value)
        if best is None:
            return None
        chosen[axis] = best[1]
    return [chosen[k] for k in range(len(values))]


def _key(a: int, i: int, b: int, j: int) -> Pair:
    return ((a, i), (b, j)) if a < b else ((b, j), (a, i))


def pairs_present(rows: Iterable[Mapping[str, AxisValue]], first: str, second: str) -> set[tuple[AxisValue, AxisValue]]:
    """The (first, second) value pairs that appear in ``rows`` (for checks and tests)."""
    return {(row[first], row[second]) for row in rows}


def triples_present(
    rows: Iterable[Mapping[str, AxisValue]], first: str, second: str, third: str
) -> set[tuple[AxisValue, AxisValue, AxisValue]]:
    """The (first, second, third) value triples that appear in ``rows`` (for checks and tests)."""
    return {(row[first], row[second], row[third]) for row in rows}


# A value triple of the strength-3-to-the-draft block: (generation, requested backend, one axis's value).
Triple = tuple[tuple[str, AxisValue], tuple[str, AxisValue], tuple[str, AxisValue]]
Reaches = Callable[[Mapping[str, AxisValue]], bool]  # a full row the declarations say reaches the draft


@dataclass(frozen=True)
class ReachingCover:
    """The rows a [strength3] block adds and what it guarantees (issue 38)."""

    rows: tuple[Row, ...]  # rows added: none repeats a row already present
    guaranteed: tuple[Triple, ...]  # every triple some reaching row (present or added) holds
    unreachable: tuple[Triple, ...]  # triples no row the declarations accept can hold


def cover_reaching(
    over: tuple[tuple[str, tuple[AxisValue, ...]], tuple[str, tuple[AxisValue, ...]]],
    axes: Factors,
    template: Mapping[str, AxisValue],
    vary: Factors,
    reaches: Reaches,
    present: Sequence[Mapping[str, AxisValue]] = (),
    apart: Collection[tuple[str, AxisValue]] = (),
) -> ReachingCover:
    """Every (first, second, axis = value) triple of ``over``'s two axes (generation, requested
    backend) with a value of any of ``axes``, held by some row that ``reaches`` accepts.

    A ``present`` row that reaches and is the template but for those axes and ``vary`` holds its
    triples already. For each remaining triple a row is the ``template`` with the triple's values,
    or, where ``reaches`` refuses that, with the fewest changes of ``vary`` axes (then the first in
    declaration order) that ``reaches`` accepts. A triple with no such row is unreachable,
    reported, never a cell. One row carries a value of every axis at once where ``reaches``
    accepts the combination (the first still uncovered value of each axis, in order), so the rows
    per (first, second) are the most values any one axis still needs there. A value in ``apart``
    (one some release lacks) gets a row of its own, after the shared ones, so a release that
    refuses it loses no other axis's triple with it. ``reaches`` must
    refuse a row only on the axes it holds (as selectors do): a row it refuses with the ``vary``
    axes left out is refused whatever they are."""
    (first, firsts), (second, seconds) = over
    axis_names = [name for name, _ in axes]

    def triples_of(row: Mapping[str, AxisValue]) -> set[Triple]:
        if row.get(first) not in firsts or row.get(second) not in seconds:
            return set()
        return {
            ((first, row[first]), (second, row[second]), (name, row[name]))
            for name, vals in axes
            if name in row and row[name] in vals
        }

    vary_names = {name for name, _ in vary}

    @functools.cache
    def changes(free: tuple[tuple[str, AxisValue], ...]) -> tuple[tuple[AxisValue, ...], ...]:
        """The vary axes' value combinations from their current values: the fewest changes first,
        then declaration order (a stable sort of the product's order)."""
        options = [(current, *(v for v in dict(vary)[name] if v != current)) for name, current in free]
        combos = list(itertools.product(*options))
        return tuple(sorted(combos, key=lambda combo: sum(v != c for v, (_, c) in zip(combo, free, strict=True))))

    def placed(seed: Mapping[str, AxisValue]) -> Row | None:
        row = {**template, **seed}
        if not reaches({name: value for name, value in row.items() if name not in vary_names or name in seed}):
            return None  # refused on axes no change of ``vary`` touches
        free = tuple((name, row[name]) for name, _ in vary if name not in seed)
        for combo in changes(free):
            changed = {**row, **{name: value for (name, _), value in zip(free, combo, strict=True)}}
            if reaches(changed):
                return changed
        return None

    # A present row counts where it is the template but for the triple's axes and ``vary``: the
    # declarations speak for the template's neighbourhood, not for every setting a matrix crosses.
    free_axes = {first, second, *axis_names, *(name for name, _ in vary)}

    def near_template(row: Mapping[str, AxisValue]) -> bool:
        return all(row.get(name) == value for name, value in template.items() if name not in free_axes)

    held: set[Triple] = set()
    for row in present:
        if near_template(row) and reaches(row):
            held |= triples_of(row)
    added: list[Row] = []
    unreachable: list[Triple] = []
    for a, b in itertools.product(firsts, seconds):
        cell = {first: a, second: b}
        pending: dict[str, list[AxisValue]] = {}
        for name, vals in axes:
            pending[name] = []
            for value in vals:
                triple = ((first, a), (second, b), (name, value))
                if triple in held:
                    continue
                if placed({**cell, name: value}) is None:
                    unreachable.append(triple)
                else:
                    pending[name].append(value)
        while any(pending.values()):
            seed: Row = dict(cell)
            shared = {name: [v for v in pending[name] if (name, v) not in apart] for name in axis_names}
            if any(shared.values()):
                for name in axis_names:
                    for value in shared[name]:
                        if placed({**seed, name: value}) is not None:
                            seed[name] = value
                            break
            else:
                name = next(name for name in axis_names if pending[name])
                seed[name] = pending[name][0]
            new = placed(seed)
            assert new is not None  # the first axis with a pending value placed it alone above
            added.append(new)
            for name in axis_names:
                if name in seed:
                    pending[name].remove(seed[name])
            held |= triples_of(new)
    return ReachingCover(tuple(added), tuple(sorted(held, key=repr)), tuple(unreachable))


def triples_not_reached(
    rows: Iterable[tuple[Mapping[str, AxisValue], bool]], wanted: Iterable[Triple]
) -> tuple[Triple, ...]:
    """The ``wanted`` triples that no row marked as reaching the draft holds: given a measured
    report's cells, each with whether vLLM built its draft, what a history left uncovered."""
    held: dict[tuple[tuple[str, AxisValue], tuple[str, AxisValue]], set[tuple[str, AxisValue]]] = {}
    wanted = tuple(wanted)
    over = {(one[0], two[0]) for one, two, _ in wanted}
    for row, built in rows:
        for one, two in over if built else ():
            if one in row and two in row:
                held.setdefault(((one, row[one]), (two, row[two])), set()).update(row.items())
    return tuple(triple for triple in wanted if triple[2] not in held.get((triple[0], triple[1]), set()))
