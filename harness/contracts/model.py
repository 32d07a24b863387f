"""What a lane can run, as data: the axes it varies, the values they may take, and its options.

Each lane declares one ``Contract`` (``harness/contracts/lanes.py``); everything else is derived
from it, as nox derives its command line from ``_option_set.py``: the matrix check that every
process runs in ``load_matrix`` (so ``pytest --matrix``, ``dflash-matrix cells`` and tox refuse a
matrix the lane cannot run before any cell process starts), the valid choices each refusal
names, the defaults of axes a matrix leaves out, the lane's typed options, and which cells
share a cell process. An option is a field of the lane's frozen options dataclass, declared
with ``option(default, check, help)``: the field carries its own check.

Imports neither vLLM nor torch (nor the matrix model: the contract reads plain mappings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.axes import AXES_BY_NAME, AXIS_NAMES, AxisValue
from harness.contracts.machine import Machine
from harness.errors import InputError

# Turns a TOML value into the option's value, or raises OptionValueError.
Check = Callable[[object], Any]


class OptionValueError(ValueError):
    """A value an option does not accept; the message says what would be valid."""

    def __init__(self, problem: str, choices: tuple[str, ...] = ()):
        super().__init__(problem)
        self.choices = choices


def option(default: Any, check: Check, help: str) -> Any:
    """A field of a lane's options dataclass that carries its own check and help."""
    metadata = {"check": check, "help": help}
    if isinstance(default, dict):  # each options object gets its own table
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def integer(minimum: int) -> Check:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise OptionValueError(f"{value!r} is not an integer >= {minimum}")
        return value

    return check


def positive_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise OptionValueError(f"{value!r} is not a positive number")
    return float(value)


def seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise OptionValueError(f"{value!r} is not a number of seconds")
    return float(value)


def token_counts(value: object) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)
    ):
        raise OptionValueError(f"{value!r} is not a non-empty list of token counts")
    return tuple(value)


def backend_name(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise OptionValueError(f"{value!r} is not a backend name", ("an AttentionBackendEnum member such as FLASHINFER",))


def text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise OptionValueError(f"{value!r} is not a non-empty string")
    return value


def table_of(choices: tuple[str, ...], keys: str) -> Check:
    """A table of ``<keys> = one of choices``."""

    def check(value: object) -> Mapping[str, str]:
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise OptionValueError(f"must be a table of {keys} = name", choices)
        unknown = sorted(set(value.values()) - set(choices))
        if unknown:
            raise OptionValueError(f"{', '.join(map(repr, unknown))} is not allowed", choices)
        return dict(value)

    return check


@dataclass(frozen=True)
class NoOptions:
    """A lane without options."""


@dataclass(frozen=True)
class Limit:
    """An axis the lane takes, but only with these values: anything else it cannot express."""

    values: tuple[AxisValue, ...]
    why: str


@dataclass(frozen=True)
class Conflict:
    """Values of several axes the lane cannot build together (each alone it can): a matrix must
    exclude every cell that has them all."""

    values: Mapping[str, AxisValue]
    why: str

    def matches(self, cell: Mapping[str, AxisValue]) -> bool:
        return all(cell.get(name) == value for name, value in self.values.items())


@dataclass(frozen=True)
class Preload:
    """What a lane's warm parent (``harness.runner.warm``) imports once, before it forks the
    lane's cell processes, so that no cell process pays for it again.

    Whatever the warm parent does, every cell process inherits: so only imports, with the
    runner's environment, and only of modules whose import-time state is the same for every
    cell process of the lane. The warm parent also checks, for every lane, that its preload
    left no thread running, CUDA uninitialised and the device count unasked (a fork copies
    none of them correctly).

    modules:           imported in the warm parent, in order.
    optional:          those of ``modules`` skipped where not installed (a vLLM release or a
                       user's env without them), instead of failing every cell.
    platform_resolved: whether importing them may resolve vLLM's platform: only where every
                       cell process of the lane gets the same platform (never where the
                       platform is simulated per process key).
    per_key:           ``module:function`` a warm parent of one process key runs, forked from
                       the lane's warm parent, before it forks that key's cell processes; called
                       with the values of a cell of the key. It does what each cell process of
                       the key would do first for itself (install the key's simulated platform,
                       import vLLM under it), leaving the process as that cell process would be
                       before its first cell: no thread, CUDA uninitialised. A device count it
                       asks is the cell processes' own only because it sets the key's device
                       variables first. An exception it raises fails every cell of the key as
                       a start-up failure; what the lane reports per cell (unavailable) it must
                       record for the lane instead.
    why:               why importing them there cannot change a verdict.
    """

    modules: tuple[str, ...] = ()
    optional: frozenset[str] = frozenset()
    platform_resolved: bool = False
    per_key: str | None = None
    why: str = "nothing is imported before the fork"


@dataclass(frozen=True)
class Isolation:
    """What a cell process resets before each cell, so that a verdict never depends on the cells
    the process ran before it (``harness.order`` lets anyone check).

    reset: ``module:function`` the cell process calls before every cell; None where nothing
           outlives a cell.
    why:   what it clears and why that is enough (the audit: docs/explanation/isolation.md).
    """

    reset: str | None = None
    why: str = "no state outlives a cell"


@dataclass(frozen=True)
class Contract:
    """A lane's contract.

    name:     the lane's name, ``[matrix] lane`` in a matrix file.
    module:   the module a cell process imports for the lane's ``create(matrix)``.
    axes:     the axes the lane can vary; any other axis in its matrix is a mistake in the file.
    required: axes its matrices must have (beyond the ones every matrix has).
    defaults: the value an axis takes in a cell when its matrix leaves the axis out, where the
              axis itself has none (``harness.axes``) or the lane's differs.
    limits:   axes the lane takes only with certain values.
    conflicts: combinations of values the lane cannot build; no cell of its matrices may have one.
    options:  the frozen dataclass of its ``[options]`` table (fields made with ``option``).
    key:      which cell process a cell needs (``process_key``); cells with another key get
              another process. The default: one process serves every cell.
    preload:  what the warm parent that forks the lane's cell processes imports first.
    plugins:  pytest plugins a run of the lane needs besides the matrix plugin (``-p`` each):
              ``dflash-matrix run`` loads them, and the matrix plugin refuses a run without
              them, so every entry path (tox, the workflows, a user's ``run``) runs the same.
    isolation: what its cell processes reset before each cell.
    machine:  the machine its verdicts stand for, answered to vLLM whatever the host
              (``harness.contracts.machine``); None where the host is the machine under test.
    build_path: globs, relative to the harness package, of the code its verdicts are built from
              (the audit, the loaders, the lane, the runner): with its matrix, what a recorded
              release's ``measured`` fingerprint covers (``harness.watch.record``).
    """

    name: str
    module: str
    axes: tuple[str, ...] = AXIS_NAMES
    required: tuple[str, ...] = ()
    defaults: Mapping[str, AxisValue] = field(default_factory=dict)
    limits: Mapping[str, Limit] = field(default_factory=dict)
    conflicts: tuple[Conflict, ...] = ()
    options: type = NoOptions
    key: Callable[[Mapping[str, AxisValue]], str] | None = None
    preload: Preload = Preload()
    plugins: tuple[str, ...] = ()
    isolation: Isolation = Isolation()
    machine: Machine | None = None
    build_path: tuple[str, ...] = ()

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.options))

    def check(self, path: Path, axes: Mapping[str, tuple[AxisValue, ...]], raw_options: Mapping[str, Any]) -> Any:
        """Refuse, as one InputError, what a matrix asks of this lane that it cannot run; else
        return the typed options."""
        for name in axes:
            if name not in self.axes:
                raise InputError(path, f"axes.{name}", f"the {self.name} lane cannot vary this axis", self.axes)
        for name in self.required:
            if name not in axes:
                raise InputError(path, f"axes.{name}", f"the {self.name} lane needs this axis", self.required)
        for name, limit in self.limits.items():
            for value in axes.get(name, ()):
                if value not in limit.values:
                    raise InputError(path, f"axes.{name}", f"{value!r}: {limit.why}", map(_toml, limit.values))
        return self.read_options(path, raw_options)

    def check_cells(self, path: Path, cells: Sequence[Mapping[str, AxisValue]]) -> None:
        """Refuse, as one InputError, a matrix with a cell the lane cannot build (``conflicts``)."""
        for conflict in self.conflicts:
            if any(conflict.matches(cell) for cell in cells):
                named = ", ".join(f"{name} = {_toml(value)}" for name, value in conflict.values.items())
                raise InputError(path, "exclude", f"cells with {named} cannot be built: {conflict.why}; exclude them")

    def read_options(self, path: Path, raw: Mapping[str, Any]) -> Any:
        names = self.option_names
        for key in raw:
            if key not in names:
                raise InputError(path, f"options.{key}", f"unknown {self.name} lane option", names)
        values = {}
        for declared in dataclasses.fields(self.options):
            if declared.name not in raw:
                continue
            try:
                values[declared.name] = declared.metadata["check"](raw[declared.name])
            except OptionValueError as error:
                raise InputError(path, f"options.{declared.name}", str(error), error.choices) from None
        return self.options(**values)

    def value(self, cell: Mapping[str, AxisValue], axis: str) -> AxisValue | None:
        """The cell's value on ``axis``; where its matrix leaves the axis out, the lane's default,
        else the axis's own (``harness.axes``)."""
        if axis in cell:
            return cell[axis]
        return self.defaults.get(axis, AXES_BY_NAME[axis].default)

    def process_key(self, cell: Mapping[str, AxisValue]) -> str:
        return self.name if self.key is None else self.key(cell)


def _toml(value: AxisValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)
