"""When a release gave no verdict here: environment failures, told apart from vLLM's answers.

A release whose install fails, whose lane does not start, or whose cells crash while vLLM (or a
dependency) is being imported has said nothing about DFlash: reading its ``crash`` as a verdict
made a bisect across 0.27.x (flashinfer's import fails on Python 3.11) report a change that was
an install problem. bisect and history report such a release or cell as an environment failure,
with its reason, step around it, and never count it as a change.

The rule for a cell, from what its report records (verdict, stage, message), is narrow on
purpose, since some releases really do crash importing a package (ROCm's AITER backend imports
``aiter`` while it is built: a verdict, recorded in the expectations):

- ``LaneStartup`` (any stage): the harness could not start the lane's cell process;
- at stage ``config``, where the lanes first import vLLM, an ``ImportError`` or
  ``ModuleNotFoundError``, or a message naming an ``undefined symbol`` (an extension built against
  another torch or CUDA);
- any stage: the crash message the overrides file records for this release as what it does without
  its pins (``error`` of a ``fails = "import"`` entry), e.g. flashinfer's ``TypeError`` on 0.27.x.

Pure, stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# What kept a release (or one cell of it) from giving a verdict.
INSTALL = "install"  # the installer failed
LANE = "lane"  # the lane did not start, died, or wrote no verdict for the cell
IMPORT = "import"  # the cell crashed importing vLLM or a dependency
KINDS = (INSTALL, LANE, IMPORT)

_IMPORT_ERRORS = ("ImportError:", "ModuleNotFoundError:")


@dataclass(frozen=True)
class EnvironmentFailure:
    """A release (or one of its cells) this host could not give a verdict in, and why."""

    release: str
    kind: str  # one of KINDS
    reason: str

    def line(self) -> str:
        return f"environment failure: vLLM {self.release} ({self.kind}): {self.reason}"

    def to_json(self) -> dict[str, str]:
        return {"release": self.release, "kind": self.kind, "reason": self.reason}


def cell_failure(
    release: str, verdict: str, stage: str | None, message: str, symptoms: Sequence[str] = ()
) -> EnvironmentFailure | None:
    """The environment failure a cell's recorded crash is (None: it is a verdict).

    ``symptoms``: the crash messages the overrides file records for this release and Python."""
    if verdict != "crash":
        return None
    if message.startswith("LaneStartup:"):
        return EnvironmentFailure(release, LANE, message)
    if stage == "config" and (message.startswith(_IMPORT_ERRORS) or "undefined symbol" in message):
        return EnvironmentFailure(release, IMPORT, message)
    known = next((symptom for symptom in symptoms if symptom in message), None)
    if known is not None:
        return EnvironmentFailure(release, IMPORT, f"{message} (recorded for this release without its overrides)")
    return None
