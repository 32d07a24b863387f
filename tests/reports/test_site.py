"""The compatibility site's page model and files (harness/site, ``dflash-matrix site``): which cells a
form query picks, what changed between releases, that every link resolves within the folder, that the
same reports give the same bytes, and that bad input writes nothing."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.reports.inputs import Inputs, read_matrix_json
from harness.reports.merge import merge
from harness.site.pages import Site, build_site, grid, select

from .shards import write_shard
from .site_links import broken_links, link_count
from .site_plants import FINDING, SELECTION_ENV, site_cell, write_site_reports

pytestmark = pytest.mark.pure


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_site_reports(tmp_path_factory.mktemp("site-reports"))


@pytest.fixture(scope="module")
def site(planted: dict[str, Path]) -> Site:
    results = [run for folder in planted.values() for run in read_matrix_json(folder / "matrix.json")]
    return build_site(merge(Inputs(tuple(results), ())))


@pytest.fixture(scope="module")
def built(planted: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("built") / "site"
    assert main(["site", *map(str, planted.values()), "--out", str(out)]) == 0
    return out


def _answer(site: Site, **query: str) -> dict[str, str]:
    return {item.backend: item.cell.verdict.value for item in select(site.cells, query)}


def test_a_page_per_lane_and_release_with_the_axes_the_lane_varies(site: Site) -> None:
    assert [(page.lane, page.release) for page in site.pages] == [
        ("cpu", "0.32.0"),
        ("selection", "0.33.0"),
        ("selection", "0.34.0"),
    ]
    selection = site.pages[1]
    assert selection.generations == ("SM90", "SM100")
    assert selection.backends[0] == "auto"
    assert [(item.axis, item.values) for item in selection.filters] == [
        ("method", ("dflash", "dspark")),
        ("causal", ("false", "true")),
        ("sink", ("false", "true")),
        ("kv_cache_dtype", ("auto", "fp8")),
    ]
    assert [item.axis for item in site.pages[0].filters] == ["dtype"]  # the cpu lane varies only its dtype
    assert site.pages[0].generations == ("CPU x86_64",)  # no capability: the run's device


def test_the_query_picks_the_cells_of_each_deployment(site: Site) -> None:
    sm90_sinks = {"generation": "SM90", "causal": "true", "sink": "true"}
    assert _answer(site, release="0.33.0", **sm90_sinks) == {
        "FLASH_ATTN": "pass",
        "FLASHINFER": "unsupported",
        "TRITON_ATTN": "pass",
        "auto": "pass",
    }
    assert _answer(site, release="0.34.0", **sm90_sinks)["FLASH_ATTN"] == "unsupported"
    assert _answer(site, release="0.33.0", generation="SM100", method="dspark", kv_cache_dtype="fp8") == {
        "FLASH_ATTN": "crash",
        "TRITON_ATTN": "pass",
        "FLASHINFER": "unsupported",
    }
    assert _answer(site, release="0.33.0", generation="SM100", method="dflash") == {}
    # An empty value is "any": without the sink choice, SM90's FLASH_ATTN cells of both sink values.
    picked = select(site.cells, {"release": "0.33.0", "generation": "SM90", "backend": "FLASH_ATTN", "sink": ""})
    assert sorted(item.option("sink") for item in picked) == ["false", "true"]


def test_the_grid_counts_the_cells_that_match(site: Site) -> None:
    page = site.pages[2]
    entries = grid(page, {"sink": "true"})
    assert entries["SM90", "FLASH_ATTN"].counts[0][0].value == "unsupported"
    assert entries["SM90", "auto"].observed == ("TRITON_ATTN",)
    assert ("SM90", "FLASH_ATTN") in grid(page, {}) and grid(page, {"sink": "false"})["SM90", "FLASH_ATTN"].total == 1


def test_what_changed_lists_the_cells_whose_verdict_differs(site: Site) -> None:
    assert [(page.lane, page.before, page.after) for page in site.changes] == [("selection", "0.33.0", "0.34.0")]
    (slot,) = site.changes[0].slots
    # auto still passes (through another backend): the verdict did not change, so it is not listed.
    changed = [(item.cell, item.before.cell.verdict.value, item.after.cell.verdict.value) for item in slot.changes]
    assert changed == [("sm90-FLASH_ATTN-causal-sink", "pass", "unsupported")]
    assert slot.compared == 9 and not slot.only_before and not slot.only_after
    assert slot.changes[0].before.href.startswith("selection-0.33.0-cells.html#")


def test_a_finding_page_lists_its_cells_per_release(site: Site) -> None:
    (page,) = site.findings
    assert page.finding.id == FINDING["id"]
    assert [(item.run.vllm_version, len(cells)) for item, cells in page.shown] == [("0.33.0", 1), ("0.34.0", 1)]


def test_every_link_resolves_within_the_folder(built: Path) -> None:
    assert broken_links(built) == []
    assert link_count(built) > 50
    names = sorted(path.name for path in built.iterdir())
    assert names == [
        "changes-selection-0.33.0-to-0.34.0.html",
        "cpu-0.32.0-cells.html",
        "cpu-0.32.0.html",
        f"finding-{FINDING['id']}.html",
        "index.html",
        "reports",
        "selection-0.33.0-cells.html",
        "selection-0.33.0.html",
        "selection-0.34.0-cells.html",
        "selection-0.34.0.html",
    ]


def test_a_cell_permalink_says_verdict_message_finding_and_repro(built: Path) -> None:
    text = (built / "selection-0.33.0-cells.html").read_text(encoding="utf-8")
    crash = text[text.index('id="sm100-FLASH_ATTN-dspark-noncausal-sink-kv-fp8"') :].split("</section>")[0]
    assert "RuntimeError: planted" in crash
    assert f'href="finding-{FINDING["id"]}.html"' in crash
    assert (
        "dflash-matrix repro sm100-FLASH_ATTN-dspark-noncausal-sink-kv-fp8 "
        "--report reports/selection-0.33.0.json --out repro.py"
    ) in crash
    # The report the command names holds the page's run alone, as a matrix.json repro reads.
    document = json.loads((built / "reports" / "selection-0.33.0.json").read_text(encoding="utf-8"))
    assert [run["vllm_version"] for run in document["runs"]] == ["0.33.0"] and len(document["cells"]) == 9
    assert document["sources"] == []


def test_the_same_reports_give_the_same_bytes(planted: dict[str, Path], built: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert main(["site", *map(str, reversed(list(planted.values()))), "--out", str(again)]) == 0
    first = {path.relative_to(built): path.read_bytes() for path in built.rglob("*") if path.is_file()}
    second = {path.relative_to(again): path.read_bytes() for path in again.rglob("*") if path.is_file()}
    assert first == second


def test_a_site_replaces_an_older_site_whole(planted: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert main(["site", str(planted["cpu-0.32.0"]), "--out", str(out)]) == 0
    assert main(["site", str(planted["selection-0.33.0"]), "--out", str(out)]) == 0
    assert not (out / "cpu-0.32.0.html").exists() and (out / "selection-0.33.0.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no staging or old folder left beside it


@pytest.mark.parametrize("problem", ["missing", "not-a-report", "junit", "out-is-input", "out-holds-others"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    problem: str, planted: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = planted["selection-0.33.0"]
    out = tmp_path / "site"
    arguments = [str(report)]
    if problem == "missing":
        arguments.append(str(tmp_path / "nowhere" / "matrix.json"))
    elif problem == "not-a-report":
        (tmp_path / "other.json").write_text('{"schema": "something else", "cells": []}')
        arguments.append(str(tmp_path / "other.json"))
    elif problem == "junit":
        arguments.append(str(report / "junit.xml"))
    elif problem == "out-is-input":
        out = report
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    before = sorted(p.name for p in out.iterdir()) if out.exists() else None
    assert main(["site", *arguments, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dflash-matrix: ")
    assert (sorted(p.name for p in out.iterdir()) if out.exists() else None) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_history_report_keeps_no_verdict_cells_out_of_what_changed(planted: dict[str, Path], tmp_path: Path) -> None:
    history = tmp_path / "history"
    releases = [str(planted["selection-0.33.0"]), str(planted["selection-0.34.0"])]
    assert main(["merge", *releases, "--out", str(history)]) == 0
    document = json.loads((history / "matrix.json").read_text(encoding="utf-8"))
    runs = {run["vllm_version"]: run["key"] for run in document["runs"]}
    cell = "sm90-FLASH_ATTN-causal-sink"
    slot = {
        "slot": "x",
        "releases": ["0.33.0", "0.34.0"],
        "runs": [runs["0.33.0"], runs["0.34.0"]],
        "cells": [{"id": cell, "no_verdict_in": ["0.34.0"]}],
    }
    (history / "history.json").write_text(json.dumps({"slots": [slot]}))
    out = tmp_path / "site"
    assert main(["site", str(history / "history.json"), "--out", str(out)]) == 0
    page = (out / "changes-selection-0.33.0-to-0.34.0.html").read_text(encoding="utf-8")
    assert "0 of 8 cells run in both releases changed verdict" in page


def test_a_2240_cell_report_builds_in_seconds(tmp_path: Path) -> None:
    # The shape of the selection matrix: 4 generations x 20 backends x the draft's options, 2240 cells.
    shape = itertools.product(
        ("8.0", "9.0", "10.0", "12.0"), range(20), (True, False), (True, False), ("dflash", "dspark"), ("auto", "fp8")
    )
    cells = [
        site_cell(
            f"BACKEND_{backend}",
            "pass" if causal or kv == "auto" else "unsupported",
            capability=capability,
            causal=causal,
            sink=sink,
            method=method,
            kv_cache_dtype=kv,
            loader=loader,
        )
        for (capability, backend, causal, sink, method, kv), loader in itertools.product(
            itertools.islice(shape, 1120), ("v1", "v2")
        )
    ]
    assert len(cells) == 2240
    report = write_shard(tmp_path / "big", cells, lane="selection", env=SELECTION_ENV)
    started = time.perf_counter()
    assert main(["site", str(report), "--out", str(tmp_path / "site")]) == 0
    took = time.perf_counter() - started
    assert took < 20, f"{took:.1f} s"  # about 1 s on a 2-core machine (benchmarks/README.md)
    assert broken_links(tmp_path / "site") == []
