"""Open or update one GitHub issue per watched vLLM release from the watch's deltas (with `gh`).

    dflash-matrix watch-issues watch/ --repo OWNER/NAME --run-url URL

Reads every delta.json (and the delta.md beside it) under the folders given, one issue per
release, labelled vllm-watch and titled "vLLM X: what dflash-matrix watch saw change": created
the first time, edited in place later, left alone when its deltas are the same. Runs `gh` only
(GH_TOKEN from the environment); reads the deltas as data and runs nothing the watched releases
installed, so the workflow job that may write issues never executes their code.

Exit status: 0 when every issue is up to date, 1 when `gh` failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from harness.errors import InputError
from harness.reports.inputs import load_json
from harness.watch.issues import LABEL, DeltaText, actions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folders", nargs="+", metavar="DIR", help="folders holding the watch's delta.json files")
    parser.add_argument("--repo", metavar="OWNER/NAME", default=os.environ.get("GITHUB_REPOSITORY"), help="the repo")
    parser.add_argument("--run-url", metavar="URL", default="", help="the workflow run the deltas came from")
    parser.add_argument("--gh", metavar="PATH", default="gh", help="the gh executable (default: gh on PATH)")


def _deltas(folders: list[str]) -> list[DeltaText]:
    found = []
    for folder in folders:
        if not Path(folder).is_dir():
            raise InputError(folder, "", "is not a folder of watch deltas")
        for path in sorted(Path(folder).rglob("delta.json")):
            data = load_json(path)
            try:
                lane, release = str(data["lane"]), str(data.get("version") or data["release"])
                markdown = path.with_name("delta.md").read_text(encoding="utf-8")
            except (OSError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as error:
                raise InputError(path, "", f"not a delta written by dflash-matrix watch: {error}") from None
            if not lane or not release:
                raise InputError(path, "release", "names no lane or release: not a delta to publish")
            found.append(DeltaText(lane, release, markdown))
    return found


def run(args: argparse.Namespace) -> int:
    if not args.repo:
        raise InputError("--repo", "", "name the repository (OWNER/NAME), or set GITHUB_REPOSITORY")
    deltas = _deltas(args.folders)
    if not deltas:
        print("watch-issues: no delta to publish")
        return 0

    def gh(*arguments: str) -> str:
        try:
            done = subprocess.run(
                [args.gh, *arguments, "--repo", args.repo], capture_output=True, text=True, check=False
            )
        except OSError as error:  # no gh on PATH (or not executable): the one line says which
            problem = f"cannot run gh: {error.strerror or error} (install GitHub's gh, or give --gh PATH)"
            raise InputError(args.gh, "", problem) from None
        if done.returncode != 0:
            raise RuntimeError(f"gh {arguments[0]} {arguments[1]}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    try:
        gh("label", "create", LABEL, "--force", "--color", "5319e7", "--description", "dflash-matrix watch")
        existing = json.loads(
            gh("issue", "list", "--label", LABEL, "--state", "all", "--limit", "200", "--json", "number,title,body")
        )
        for action in actions(deltas, existing, args.run_url):
            if action.kind == "unchanged":
                print(f"watch-issues: #{action.number} {action.title}: unchanged")
                continue
            with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as handle:
                handle.write(action.body)  # a file, never a shell word: the body quotes vLLM's messages
            try:
                if action.kind == "create":
                    url = gh("issue", "create", "--title", action.title, "--label", LABEL, "--body-file", handle.name)
                    print(f"watch-issues: opened {url.strip()}: {action.title}")
                else:
                    gh("issue", "edit", str(action.number), "--body-file", handle.name)
                    print(f"watch-issues: updated #{action.number}: {action.title}")
            finally:
                os.unlink(handle.name)
    except (RuntimeError, json.JSONDecodeError) as error:
        print(f"watch-issues: {error}")
        return 1
    return 0
