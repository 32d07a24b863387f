"""Matrix files (TOML) and their expansion into cells.

A matrix file names the lane that runs it, the axes and their values, optional
exclusions, per-dtype tolerances, a per-cell time limit and the expectations file::

    [matrix]
    name = "cpu"
    lane = "cpu"
    expectations = "expectations/cpu.toml"   # relative to this file
    timeout_s = 120

    [axes]
    backend = ["CPU_ATTN", "FLASH_ATTN", "auto"]
    causal = [true, false]
    sink = [true, false]

    [cover]             # optional: axes covered pairwise rather than in full (harness/covering.py)
    method = ["dflash", "dflash2", "dspark"]

    [cover_later]       # optional: covered pairwise after every other row is fixed, [[product]] rows
    draft_heads = ["2/1", "4/4"]  # counted too, so adding one renames no existing cell

    [triples]           # optional: every value triple of any three of these axes (one covered) appears
    axes = ["capability", "backend", "method"]

    [[product]]         # optional, repeatable: a further full product of the axes it names,
    capability = ["9.0"]  # every other axis at its default (one that has none must be named)
    backend = ["FLASH_ATTN"]
    causal = [false]
    sink = [false]
    block_size = [128, 256]

    [[exclude]]
    backend = "auto"
    sink = [true]

    [strength3]         # optional: every (capability, backend, value of each axis) in a cell that reaches
    axes = ["kv_cache_dtype"]  # the draft, cells added as needed (harness/covering.py, cover_reaching)
    with = { causal = false, sink = false, loader = "v2" }  # the row an added cell starts from
    vary = ["target_dtype"]  # axes an added cell may change where the declarations refuse it
    apart = { kv_cache_dtype = ["fp8_inc"] }  # values some release lacks: a cell of their own each

    [[misses_draft]]    # optional, repeatable: rows [strength3] counts as not reaching the draft, why
    backend = "NO_ATTENTION"
    reason = "the release's module is missing"

    [[stops_before_draft]]  # optional, repeatable: cells vLLM stops at the target, kept as cells
    target_dtype = "float32"  # but covering no tuple (harness/covering.py); a reason is required
    target_attention = "FLASHINFER"
    reason = "FlashInfer serves no float32 target"

    [tolerance]
    bfloat16 = 2e-2

    [options]           # the lane's options, declared in harness/contracts/lanes.py
    seed = 1
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.axes import AXES_BY_NAME, AXIS_NAMES, DTYPE_TOKENS, REQUIRED_AXES, AxisValue, AxisValueError, cell_id
from harness.contracts.lanes import CONTRACTS, GPU_EMULATED, LANES
from harness.contracts.model import Contract
from harness.covering import Covering, Factors, ReachingCover, cover, cover_reaching
from harness.errors import InputError
from harness.tomlfile import array_of_tables, only_keys, read_toml

DEFAULT_TIMEOUT_S = 300.0
_MATRIX_KEYS = ("name", "lane", "expectations", "timeout_s", "description")
_TOP_KEYS = (
    "matrix",
    "axes",
    "cover",
    "cover_later",
    "triples",
    "product",
    "exclude",
    "stops_before_draft",
    "strength3",
    "misses_draft",
    "tolerance",
    "options",
)


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: what a lane is asked to try."""

    id: str
    lane: str
    axes: tuple[tuple[str, AxisValue], ...]
    tolerance: float | None
    timeout_s: float

    @property
    def values(self) -> dict[str, AxisValue]:
        return dict(self.axes)

    def get(self, name: str, default: AxisValue | None = None) -> AxisValue | None:
        return self.values.get(name, default)

    @property
    def seed(self) -> int:
        """Fixed per cell and derived from its id, so two runs draw the same tensors."""
        return int.from_bytes(hashlib.sha256(self.id.encode()).digest()[:4], "big")

    @property
    def requested_backend(self) -> str | None:
        """None means auto-selection."""
        backend = self.values["backend"]
        return None if backend == "auto" else str(backend)


@dataclass(frozen=True)
class Matrix:
    path: Path
    name: str
    lane: str
    axes: tuple[tuple[str, tuple[AxisValue, ...]], ...]
    exclusions: tuple[tuple[tuple[str, tuple[AxisValue, ...]], ...], ...] = ()
    # Axes covered pairwise on top of the full product of ``axes`` (see harness/covering.py).
    cover: tuple[tuple[str, tuple[AxisValue, ...]], ...] = ()
    # Those of ``cover`` read from [cover_later]: covered after every other row is fixed, held at
    # their defaults in those rows, so adding one only adds cells (harness/covering.py, ``later``).
    cover_later: tuple[str, ...] = ()
    # Axes covered to strength 3: every value triple of any three of them, one covered, is in a cell.
    triples: tuple[str, ...] = ()
    # Further full products ([[product]]): where a few axes must be crossed in full (every
    # triple, not every pair) without multiplying the whole matrix by them.
    products: tuple[tuple[tuple[str, tuple[AxisValue, ...]], ...], ...] = ()
    # Cells that stop before vLLM answers for the draft (its target refused), each with why: they
    # stay cells, but a covered tuple counts only where a cell reaches the draft (issue 35).
    stops_before_draft: tuple[StopBeforeDraft, ...] = ()
    # [strength3] with its [[misses_draft]]: generation x requested backend x each value of its axes in
    # a cell that reaches the draft (issue 38), cells added after every other row, so none is renamed.
    strength3: Strength3 | None = None
    tolerances: tuple[tuple[str, float], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    expectations_path: Path | None = None
    description: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def tolerance_for(self, dtype: AxisValue | None) -> float | None:
        return _tolerance(self.tolerances, dtype)

    @property
    def all_axes(self) -> tuple[tuple[str, tuple[AxisValue, ...]], ...]:
        """Product, covered and [[product]] axes, each with every value some cell may have."""
        return _all_axes(self.axes, self.cover, self.products)

    @property
    def contract(self) -> Contract:
        return CONTRACTS[self.lane]

    @property
    def lane_options(self) -> Any:
        """The [options] table as the lane's typed options dataclass (checked when loaded)."""
        return self.contract.read_options(self.path, self.options)

    def process_key(self, cell: Cell) -> str:
        """Cells with different keys need different cell processes (the lane's contract says which)."""
        return self.contract.process_key(cell.values)

    def with_options(self, overrides: Mapping[str, Any]) -> Matrix:
        """This matrix with some [options] replaced (planted-fault runs), checked as a file's would be."""
        options = {**self.options, **overrides}
        self.contract.read_options(self.path, options)
        return replace(self, options=options)


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    raw = read_toml(path)
    only_keys(path, "", raw, _TOP_KEYS)
    head = raw.get("matrix")
    if not isinstance(head, dict):
        raise InputError(path, "matrix", "missing [matrix] table", ("name", "lane"))
    only_keys(path, "matrix", head, _MATRIX_KEYS)
    lane = head.get("lane")
    if lane not in LANES:
        raise InputError(path, "matrix.lane", f"{lane!r} is not a lane", LANES)
    name = head.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise InputError(path, "matrix.name", "must be a non-empty string")
    timeout = head.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise InputError(path, "matrix.timeout_s", f"{timeout!r} is not a positive number of seconds")
    expectations = head.get("expectations")
    if expectations is not None and not isinstance(expectations, str):
        raise InputError(path, "matrix.expectations", "must be a path relative to the matrix file")

    axes = _read_axes(path, raw.get("axes"))
    early = _read_cover(path, raw.get("cover", {}), axes)
    later = _read_cover(path, raw.get("cover_later", {}), axes + early, "cover_later")
    covered = early + later
    triples = _read_triples(path, raw.get("triples"), axes, early)
    products = tuple(
        _read_product(path, f"product[{i}]", block, axes + covered)
        for i, block in enumerate(array_of_tables(path, raw, "product"))
    )
    matrix = Matrix(
        path=path,
        name=name,
        lane=lane,
        axes=axes,
        cover=covered,
        cover_later=tuple(name for name, _ in later),
        triples=triples,
        products=products,
    )
    exclusions = tuple(
        read_selector(path, f"exclude[{i}]", rule, matrix.all_axes)
        for i, rule in enumerate(array_of_tables(path, raw, "exclude"))
    )
    stops = tuple(
        _read_stop(path, f"stops_before_draft[{i}]", rule, matrix.all_axes)
        for i, rule in enumerate(array_of_tables(path, raw, "stops_before_draft"))
    )
    strength3 = _read_strength3(path, raw, matrix.all_axes)
    tolerances = _read_tolerances(path, raw.get("tolerance", {}))
    options = raw.get("options", {})
    if not isinstance(options, dict):
        raise InputError(path, "options", "must be a table")
    # What the lane cannot run is a mistake in this file, refused here, before any cell process.
    CONTRACTS[lane].check(path, dict(matrix.all_axes), options)
    matrix = replace(
        matrix,
        exclusions=exclusions,
        stops_before_draft=stops,
        strength3=strength3,
        tolerances=tolerances,
        timeout_s=float(timeout),
        expectations_path=(path.parent / expectations) if expectations else None,
        description=str(head.get("description", "")),
        options=options,
    )
    # Duplicate ids are a file error, found now rather than mid-run; so is a cell the lane cannot build.
    CONTRACTS[lane].check_cells(path, [cell.values for cell in expand(matrix)])
    return matrix


def covering(matrix: Matrix) -> Covering:
    """The matrix's rows: the full product of its axes, then the rows covering its [cover] axes."""
    stops = _selectors(matrix.stops_before_draft)
    present = product_rows(matrix)
    return _covering(matrix.axes, matrix.cover, matrix.triples, matrix.exclusions, stops, matrix.cover_later, present)


def _covering(
    axes: Factors,
    covered: Factors,
    triples: tuple[str, ...],
    exclusions: tuple[Selector, ...],
    silent: tuple[Selector, ...] = (),
    later: tuple[str, ...] = (),
    present: tuple[dict[str, AxisValue], ...] = (),
) -> Covering:
    defaults = {name: AXES_BY_NAME[name].default for name, _ in covered}
    return cover(
        axes,
        tuple((name, values) for name, values in covered if name not in later),
        {name: value for name, value in defaults.items() if value is not None},
        lambda partial: any(selector_matches(rule, partial) for rule in exclusions),
        triples,
        lambda row: any(selector_matches(rule, row) for rule in silent),
        tuple((name, values) for name, values in covered if name in later),
        present,
    )


def _selectors(stops: tuple[StopBeforeDraft, ...]) -> tuple[Selector, ...]:
    return tuple(stop.when for stop in stops)


def stops_before_draft(matrix: Matrix, cell: Cell) -> StopBeforeDraft | None:
    """The declaration saying vLLM stops this cell before the draft (its target refused), or None."""
    return next((stop for stop in matrix.stops_before_draft if selector_matches(stop.when, cell.values)), None)


def _all_axes(axes: Factors, covered: Factors, products: tuple[Factors, ...]) -> Factors:
    values = {name: list(vals) for name, vals in axes + covered}
    for block in products:
        for name, vals in block:
            known = values.setdefault(name, [])
            known.extend(v for v in vals if v not in known)
    return tuple((name, tuple(vals)) for name, vals in values.items())


def product_rows(matrix: Matrix) -> tuple[dict[str, AxisValue], ...]:
    """The rows of the [[product]] blocks, after exclusions. An axis a block does not name takes
    its default; an axis only the blocks vary is left out of a row at its default, as the other
    rows leave it out, so a row the covering already has is that same cell."""
    return _product_rows(matrix.axes, matrix.cover, matrix.products, matrix.exclusions)


def _product_rows(
    axes: Factors, covered: Factors, products: tuple[Factors, ...], exclusions: tuple[Selector, ...]
) -> tuple[dict[str, AxisValue], ...]:
    main = {name for name, _ in axes + covered}
    every = _all_axes(axes, covered, products)
    rows = []
    for block in products:
        named = dict(block)
        # _read_product refused a block that leaves out an axis without a default.
        fixed = {name: _default(name) for name, _ in every if name not in named}
        for combo in itertools.product(*named.values()):
            row = {**fixed, **dict(zip(named, combo, strict=True))}
            row = {n: v for n, v in row.items() if n in main or v != AXES_BY_NAME[n].default}
            if not any(selector_matches(rule, row) for rule in exclusions):
                rows.append({n: row[n] for n, _ in every if n in row})
    return tuple(rows)


def _default(name: str) -> AxisValue:
    default = AXES_BY_NAME[name].default
    if default is None:
        raise ValueError(f"axis {name} has no default")
    return default


def expand(matrix: Matrix) -> tuple[Cell, ...]:
    cells, duplicate = _cells(
        matrix.lane,
        matrix.axes,
        matrix.cover,
        matrix.cover_later,
        matrix.triples,
        matrix.products,
        matrix.exclusions,
        _selectors(matrix.stops_before_draft),
        matrix.tolerances,
        matrix.timeout_s,
        matrix.strength3,
    )
    if duplicate is not None:
        raise InputError(matrix.path, "axes", f"duplicate cell id {duplicate!r} (an axis lists the same value twice?)")
    return cells


@functools.lru_cache(maxsize=32)
def _cells(
    lane: str,
    axes: Factors,
    covered: Factors,
    later: tuple[str, ...],
    triples: tuple[str, ...],
    products: tuple[Factors, ...],
    exclusions: tuple[Selector, ...],
    silent: tuple[Selector, ...],
    tolerances: tuple[tuple[str, float], ...],
    timeout_s: float,
    strength3: Strength3 | None = None,
) -> tuple[tuple[Cell, ...], str | None]:
    """The cells, and the first duplicate id if any. They depend only on these declared fields, so a
    process expands each matrix once: loading checks it, then the runner, the reports, `cells` and the
    findings expand it again, the same file under other paths included (cells are frozen)."""
    cells: list[Cell] = []
    seen: dict[str, dict[str, AxisValue]] = {}
    present = _product_rows(axes, covered, products, exclusions)
    rows = _covering(axes, covered, triples, exclusions, silent, later, present).rows
    reaching: tuple[dict[str, AxisValue], ...] = ()
    if strength3 is not None:
        cover3 = _reaching(axes, covered, products, exclusions, silent, strength3, rows + present)
        reaching = _rows_as_cells(axes, covered, products, cover3.rows)
    for index, values in enumerate(rows + present + reaching):
        ident = cell_id(values)
        if index >= len(rows) and seen.get(ident) == values:
            continue  # a [[product]] or [strength3] row the covering (or another block) already has
        if ident in seen:
            return (), ident
        seen[ident] = values
        cells.append(
            Cell(
                id=ident,
                lane=lane,
                axes=tuple((name, values[name]) for name in AXIS_NAMES if name in values),
                tolerance=_tolerance(tolerances, values.get("dtype")),
                timeout_s=timeout_s,
            )
        )
    return tuple(cells), None


def reaching_cover(matrix: Matrix) -> ReachingCover | None:
    """The [strength3] block's added rows and the triples it guarantees or reports unreachable."""
    if matrix.strength3 is None:
        return None
    silent = _selectors(matrix.stops_before_draft)
    present = product_rows(matrix)
    rows = _covering(
        matrix.axes, matrix.cover, matrix.triples, matrix.exclusions, silent, matrix.cover_later, present
    ).rows
    return _reaching(
        matrix.axes, matrix.cover, matrix.products, matrix.exclusions, silent, matrix.strength3, rows + present
    )


def _reaching(
    axes: Factors,
    covered: Factors,
    products: tuple[Factors, ...],
    exclusions: tuple[Selector, ...],
    silent: tuple[Selector, ...],
    strength3: Strength3,
    present: tuple[dict[str, AxisValue], ...],
) -> ReachingCover:
    every = dict(_all_axes(axes, covered, products))
    defaults = {name: _default(name) for name in every if AXES_BY_NAME[name].default is not None}
    template: dict[str, AxisValue] = {**defaults, **{name: values[0] for name, values in strength3.template}}
    refusals = exclusions + silent + tuple(miss.when for miss in strength3.misses)

    def reaches(row: Mapping[str, AxisValue]) -> bool:
        return not any(selector_matches(rule, row) for rule in refusals)

    return cover_reaching(
        (("capability", every["capability"]), ("backend", every["backend"])),
        tuple((name, every[name]) for name in strength3.axes),
        template,
        tuple((name, every[name]) for name in strength3.vary),
        reaches,
        tuple({**template, **row} for row in present),
        frozenset((name, value) for name, values in strength3.apart for value in values),
    )


def _rows_as_cells(
    axes: Factors, covered: Factors, products: tuple[Factors, ...], added: tuple[dict[str, AxisValue], ...]
) -> tuple[dict[str, AxisValue], ...]:
    """Added rows as [[product]] rows are written: an axis only blocks vary is left out at its default."""
    main = {name for name, _ in axes + covered}
    every = [name for name, _ in _all_axes(axes, covered, products)]
    return tuple(
        {n: row[n] for n in every if n in row and (n in main or row[n] != AXES_BY_NAME[n].default)} for row in added
    )


def _tolerance(tolerances: tuple[tuple[str, float], ...], dtype: AxisValue | None) -> float | None:
    return dict(tolerances).get(str(dtype)) if dtype is not None else None


Selector = tuple[tuple[str, tuple[AxisValue, ...]], ...]


@dataclass(frozen=True)
class StopBeforeDraft:
    """[[stops_before_draft]]: cells whose target vLLM refuses, so nothing about the draft is
    answered there (the selection lane says "the target failed first"), and why."""

    when: Selector
    reason: str


def _read_stop(path: Path, key: str, raw: Mapping[str, Any], axes: Selector) -> StopBeforeDraft:
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InputError(path, f"{key}.reason", "required: why vLLM stops these cells before the draft")
    return StopBeforeDraft(read_selector(path, key, {k: v for k, v in raw.items() if k != "reason"}, axes), reason)


def selector_matches(selector: Selector, values: Mapping[str, AxisValue]) -> bool:
    """A selector maps axes to accepted values; every named axis must match."""
    return all(name in values and values[name] in accepted for name, accepted in selector)


def _check_value(path: Path, key: str, axis_name: str, value: object) -> AxisValue:
    try:
        return AXES_BY_NAME[axis_name].check(value)
    except AxisValueError as exc:
        raise InputError(path, key, str(exc), exc.choices) from None


def _read_axes(path: Path, raw: object) -> tuple[tuple[str, tuple[AxisValue, ...]], ...]:
    if not isinstance(raw, dict):
        raise InputError(path, "axes", "missing [axes] table", AXIS_NAMES)
    for required in REQUIRED_AXES:
        if required not in raw:
            raise InputError(path, f"axes.{required}", "required axis is missing", REQUIRED_AXES)
    axes = []
    for name, values in raw.items():
        if name not in AXES_BY_NAME:
            raise InputError(path, f"axes.{name}", "unknown axis", AXIS_NAMES)
        if not isinstance(values, list) or not values:
            raise InputError(path, f"axes.{name}", "an axis needs a non-empty list of values")
        checked = tuple(_check_value(path, f"axes.{name}", name, v) for v in values)
        axes.append((name, checked))
    return tuple(axes)


def _read_triples(
    path: Path,
    raw: object,
    axes: tuple[tuple[str, tuple[AxisValue, ...]], ...],
    covered: tuple[tuple[str, tuple[AxisValue, ...]], ...],
) -> tuple[str, ...]:
    """[triples] axes = [...]: axes of this matrix, at least three, one of them under [cover]
    (triples of product axes alone are in the product already)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise InputError(path, "triples", "must be a table with axes = [axis names]")
    only_keys(path, "triples", raw, ("axes",))
    names = raw.get("axes")
    known = tuple(name for name, _ in axes + covered)
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise InputError(path, "triples.axes", "must be a list of axis names", known)
    for name in names:
        if name not in known:
            raise InputError(path, "triples.axes", f"{name!r} is not an axis of this matrix", known)
    if len(set(names)) != len(names):
        raise InputError(path, "triples.axes", "lists an axis twice")
    if len(names) < 3:
        raise InputError(path, "triples.axes", "a triple needs at least three axes")
    if not set(names) & {name for name, _ in covered}:
        raise InputError(path, "triples.axes", "names no [cover] axis", tuple(name for name, _ in covered))
    return tuple(names)


def _read_cover(
    path: Path, raw: object, axes: tuple[tuple[str, tuple[AxisValue, ...]], ...], table: str = "cover"
) -> tuple[tuple[str, tuple[AxisValue, ...]], ...]:
    """[cover] (or [cover_later]) axes: each must have a default (the value the product's cells carry,
    which adds no id token) and list it, so the product's cell ids are those of a matrix without them."""
    if not isinstance(raw, dict):
        raise InputError(path, table, "must be a table of axis = [values]")
    coverable = tuple(axis.name for axis in AXES_BY_NAME.values() if axis.default is not None)
    product = dict(axes)
    covered = []
    for name, values in raw.items():
        if name in product:
            where = "an axis of the full product under [axes]" if table == "cover" else "under [axes] or [cover]"
            raise InputError(path, f"{table}.{name}", f"already {where}")
        if name not in coverable:
            raise InputError(path, f"{table}.{name}", "cannot be covered (no default value)", coverable)
        if not isinstance(values, list) or not values:
            raise InputError(path, f"{table}.{name}", "a covered axis needs a non-empty list of values")
        checked = tuple(_check_value(path, f"{table}.{name}", name, v) for v in values)
        if len(set(checked)) != len(checked):
            raise InputError(path, f"{table}.{name}", "lists a value twice")
        default = AXES_BY_NAME[name].default
        if default not in checked:
            raise InputError(
                path, f"{table}.{name}", f"must list its default {default!r}, which the product's cells carry"
            )
        covered.append((name, checked))
    return tuple(covered)


def _read_product(path: Path, key: str, raw: Mapping[str, Any], axes: Selector) -> Selector:
    """A [[product]] block: axis = [values], in full product; an axis of the matrix it does not
    name must have a default (the value its rows carry)."""
    block = read_selector(path, key, raw, None)
    named = dict(block)
    main = dict(axes)
    for name in named:
        if name not in main and AXES_BY_NAME[name].default is None:
            raise InputError(
                path, f"{key}.{name}", "an axis only [[product]] varies needs a default, the value other cells carry"
            )
    for name in main:
        if name not in named and AXES_BY_NAME[name].default is None:
            raise InputError(path, f"{key}.{name}", "must be named: the axis has no default", tuple(named))
    return block


def read_selector(
    path: Path, key: str, raw: Mapping[str, Any], axes: tuple[tuple[str, tuple[AxisValue, ...]], ...] | None
) -> Selector:
    """Read ``{axis = value | [values]}``; with ``axes`` given, the axis must be in the matrix."""
    known = dict(axes) if axes is not None else None
    valid = tuple(known) if known is not None else AXIS_NAMES
    if not raw:
        raise InputError(path, key, "selects every cell; name at least one axis", valid)
    selector = []
    for name, value in raw.items():
        if name not in valid:
            raise InputError(path, f"{key}.{name}", "names an axis this matrix does not have", valid)
        values = value if isinstance(value, list) else [value]
        if not values:
            raise InputError(path, f"{key}.{name}", "empty list matches nothing")
        selector.append((name, tuple(_check_value(path, f"{key}.{name}", name, v) for v in values)))
    return tuple(selector)


def _read_tolerances(path: Path, raw: object) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, dict):
        raise InputError(path, "tolerance", "must be a table of dtype = max abs error", tuple(DTYPE_TOKENS))
    tolerances = []
    for dtype, tol in raw.items():
        if dtype not in DTYPE_TOKENS:
            raise InputError(path, f"tolerance.{dtype}", "unknown dtype", tuple(DTYPE_TOKENS))
        if isinstance(tol, bool) or not isinstance(tol, int | float) or tol <= 0:
            raise InputError(path, f"tolerance.{dtype}", f"{tol!r} is not a positive number")
        tolerances.append((dtype, float(tol)))
    return tuple(tolerances)


@dataclass(frozen=True)
class Strength3:
    """[strength3]: each of ``axes`` to strength 3 with generation x requested backend, counting only
    rows the declarations say reach the draft (harness/covering.py, ``cover_reaching``)."""

    axes: tuple[str, ...]
    template: Selector  # ``with``: the row an added cell starts from, beyond the axes' defaults
    vary: tuple[str, ...]  # axes an added cell may change, one of them, where its row is refused
    misses: tuple[StopBeforeDraft, ...]  # [[misses_draft]]: rows counted as not reaching, each with why
    # Values some release lacks: each in a cell of its own, so that release loses no other triple with it.
    apart: Selector = ()


def _read_strength3(path: Path, raw: Mapping[str, Any], axes: Selector) -> Strength3 | None:
    block = raw.get("strength3")
    misses = tuple(
        _read_stop(path, f"misses_draft[{i}]", rule, axes)
        for i, rule in enumerate(array_of_tables(path, raw, "misses_draft"))
    )
    if block is None:
        if misses:
            raise InputError(path, "misses_draft", "declares rows for a [strength3] block this file lacks")
        return None
    if not isinstance(block, dict):
        raise InputError(path, "strength3", "must be a table with axes, with and vary")
    only_keys(path, "strength3", block, ("axes", "with", "vary", "apart"))
    known = tuple(name for name, _ in axes)
    names = _axis_names(path, "strength3.axes", block.get("axes"), known)
    if not names:
        raise InputError(path, "strength3.axes", "names no axis", known)
    if {"capability", "backend"} & set(names):
        raise InputError(path, "strength3.axes", "capability and backend are the block's other two axes", known)
    vary = _axis_names(path, "strength3.vary", block.get("vary", []), known)
    template_raw = block.get("with", {})
    if not isinstance(template_raw, dict):
        raise InputError(path, "strength3.with", "must be a table of axis = value")
    template = read_selector(path, "strength3.with", template_raw, axes) if template_raw else ()
    for name, values in template:
        if len(values) != 1:
            raise InputError(path, f"strength3.with.{name}", "takes one value")
    named = {name for name, _ in template}
    for name in known:
        if name not in named and name not in ("capability", "backend") and AXES_BY_NAME[name].default is None:
            raise InputError(path, f"strength3.with.{name}", "must be named: the axis has no default", known)
    apart_raw = block.get("apart", {})
    if not isinstance(apart_raw, dict):
        raise InputError(path, "strength3.apart", "must be a table of axis = [values]")
    apart = read_selector(path, "strength3.apart", apart_raw, axes) if apart_raw else ()
    for name, _ in apart:
        if name not in names:
            raise InputError(path, f"strength3.apart.{name}", "is not one of the block's axes", names)
    return Strength3(names, tuple((name, values) for name, values in template), vary, misses, apart)


def _axis_names(path: Path, key: str, raw: object, known: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        raise InputError(path, key, "must be a list of axis names", known)
    for name in raw:
        if name not in known:
            raise InputError(path, key, f"{name!r} is not an axis of this matrix", known)
    if len(set(raw)) != len(raw):
        raise InputError(path, key, "lists an axis twice")
    return tuple(raw)


def emulated_generations(matrix: Matrix) -> tuple[str, ...]:
    """The compute capabilities a lane run needs one emulated runner each for: the gpu_emulated lane
    runs one generation per run, as a GPU runner does (harness.plugins.gpu, --emulated-gpus); () for
    every other lane, which runs once."""
    if matrix.lane != GPU_EMULATED.name:
        return ()
    return tuple(str(value) for value in dict(matrix.axes).get("capability", ()))
