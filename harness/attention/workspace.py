"""The per-process state a kernel lane's cells share (cpu, gpu, gpu-emulated): the single-rank
distributed group, the checkpoints (written once, in a temp dir) and one target model per
dtype, which a draft only borrows (its embedding and lm_head).

A lane creates one ``Workspace`` in its cell process, on its first cell, from plain settings;
the cell flow (``harness.attention.cell``) reads drafts and targets from it. Imports vLLM
lazily.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cell_process import freeze_process_state
from harness.deployment.models import DraftSpec, DraftTruth, ModelShape
from harness.deployment.settings import Axes, draft_shape


@dataclass(frozen=True)
class WorkspaceSettings:
    """dist_backend: the distributed backend of the process's world of one (gloo, nccl).
    target_shape:   the target checkpoint's dimensions.
    draft_shape:    a draft's dimensions where its cell varies neither its head size nor its heads.
    prefix:         the temp dir's name prefix (which lane wrote it)."""

    dist_backend: str
    target_shape: ModelShape
    draft_shape: ModelShape
    prefix: str


class Workspace:
    def __init__(self, settings: WorkspaceSettings) -> None:
        from harness.attention.checkpoint import write_target
        from harness.attention.draft import init_single_process_group

        self.settings = settings
        self._dir = tempfile.TemporaryDirectory(prefix=settings.prefix)
        self.root = Path(self._dir.name)
        init_single_process_group(self.root, settings.dist_backend)
        self.target_path = write_target(self.root, settings.target_shape)
        self._target_paths = {"qwen3": self.target_path}
        # The target built for each (dtype, family), by the cell flow, the first time a cell needs it.
        self.targets: dict[tuple[str, str], Any] = {}
        self._drafts: dict[tuple[DraftSpec, ModelShape], DraftTruth] = {}
        freeze_process_state()

    def target_of(self, family: str) -> Path:
        """The target checkpoint of a family (harness.axes.TARGET_MODELS), written on first use."""
        from harness.attention.checkpoint import write_target

        if family not in self._target_paths:
            self._target_paths[family] = write_target(self.root, self.settings.target_shape, family=family)
        return self._target_paths[family]

    def draft(self, spec: DraftSpec, axes: Axes) -> DraftTruth:
        """The draft checkpoint for ``spec`` in the dimensions the cell's ``axes`` ask for (its
        head size and own heads, where it sets them: ``draft_shape``'s otherwise)."""
        from harness.attention.checkpoint import write_draft

        shape = draft_shape(axes, self.settings.draft_shape)
        if (spec, shape) not in self._drafts:
            self._drafts[spec, shape] = write_draft(self.root, spec, shape)
        return self._drafts[spec, shape]
