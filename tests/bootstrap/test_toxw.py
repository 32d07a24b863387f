"""toxw.py: pip's settings, as pip would read them, become the variables uv reads.

The pure translation is checked piece by piece; one test then runs the real uv (tox-uv's, in
`tox -e unit`) against a pip.conf that allows only a local find-links folder, and shows uv finds
the wheel there with the translation and cannot without it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


def _toxw() -> ModuleType:
    spec = importlib.util.spec_from_file_location("toxw_under_test", REPO / "toxw.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


toxw = _toxw()
NOWHERE = Path("/nowhere")

MACHINE_CONF = """
[global]
find-links = /srv/wheelhouse
extra-index-url = file:///mirror/simple file:///mirror-2/simple
constraint = /etc/xdg/pip/constraints.txt
"""


def test_a_files_install_section_outranks_any_global_section_and_the_environment_outranks_both() -> None:
    system = "[global]\nindex-url = https://system.example/simple\n[install]\npre = yes\n"
    user = "[global]\nindex-url = https://user.example/simple\ntimeout = 30\n"
    settings = toxw.pip_install_settings({"PIP_TIMEOUT": "60"}, [system, user])
    assert settings == {"index-url": "https://user.example/simple", "pre": "yes", "timeout": "60"}
    section_wins = toxw.pip_install_settings({}, ["[install]\ntimeout = 5\n", "[global]\ntimeout = 9\n"])
    assert section_wins == {"timeout": "5"}


def test_environment_names_are_normalised_like_pips() -> None:
    settings = toxw.pip_install_settings({"PIP_EXTRA_INDEX_URL": "a b", "PIP_NO_INDEX": "1", "OTHER": "x"}, [])
    assert settings == {"extra-index-url": "a b", "no-index": "1"}


def test_the_machines_settings_become_uvs() -> None:
    settings = toxw.pip_install_settings({"PIP_DEFAULT_TIMEOUT": "180"}, [MACHINE_CONF])
    env = toxw.uv_environment(settings, {}, NOWHERE, exists=lambda path: True)
    assert env == {
        "UV_FIND_LINKS": "/srv/wheelhouse",
        "UV_EXTRA_INDEX_URL": "file:///mirror/simple file:///mirror-2/simple",
        "UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
        "UV_HTTP_TIMEOUT": "180",
        # pip weighs every location alike; uv would otherwise stop at the first index listing a package
        "UV_INDEX_STRATEGY": "unsafe-best-match",
    }


def test_lists_use_uvs_separators_and_missing_find_links_folders_are_skipped_like_pip_does() -> None:
    settings = {"find-links": "/here /gone https://host/wheels/", "trusted-host": "a b"}
    env = toxw.uv_environment(settings, {}, NOWHERE, exists=lambda path: path == "/here")
    assert env["UV_FIND_LINKS"] == "/here,https://host/wheels/"
    assert env["UV_INSECURE_HOST"] == "a b"


def test_flags_certificates_and_proxies() -> None:
    settings = {"pre": "0", "cert": "/ca.pem", "proxy": "http://proxy:3128", "timeout": "12.5"}
    env = toxw.uv_environment(settings, {}, NOWHERE)
    assert env == {
        "SSL_CERT_FILE": "/ca.pem",
        "HTTPS_PROXY": "http://proxy:3128",
        "HTTP_PROXY": "http://proxy:3128",
        "UV_HTTP_TIMEOUT": "12",
    }


def test_no_index_is_an_index_that_lists_nothing_instead_of_pips_indexes() -> None:
    settings = {"no-index": "yes", "index-url": "https://pip.example/simple", "extra-index-url": "https://x/simple"}
    env = toxw.uv_environment(settings | {"find-links": "/wheels"}, {}, NOWHERE, exists=lambda path: True)
    expected = {"UV_INDEX_URL": "file:///nowhere", "UV_FIND_LINKS": "/wheels", "UV_INDEX_STRATEGY": "unsafe-best-match"}
    assert env == expected


def test_what_the_user_set_for_uv_is_never_replaced() -> None:
    settings = {"index-url": "https://pip.example/simple", "extra-index-url": "https://x/simple", "timeout": "9"}
    env = toxw.uv_environment(settings, {"UV_HTTP_TIMEOUT": "99"}, NOWHERE)
    assert "UV_HTTP_TIMEOUT" not in env and env["UV_INDEX_URL"] == "https://pip.example/simple"
    # Any index variable of uv's own means the user chose uv's indexes: none of pip's is added.
    own_index = {"UV_DEFAULT_INDEX": "https://uv.example/simple"}
    assert toxw.uv_environment(settings, own_index, NOWHERE) == {"UV_HTTP_TIMEOUT": "9"}
    assert toxw.uv_environment(settings, {"DFLASH_UV_FROM_PIP": "0"}, NOWHERE) == {}


def test_settings_uv_cannot_take_from_the_environment_are_named() -> None:
    assert toxw.untranslated({"only-binary": ":all:", "index-url": "x"}) == ["only-binary"]


def test_config_files_in_pips_order(tmp_path: Path) -> None:
    home, prefix = Path("/home/u"), Path("/venv")
    files = toxw.pip_config_files({"XDG_CONFIG_DIRS": "/a:/b"}, home, prefix)
    assert files == [
        Path("/a/pip/pip.conf"),
        Path("/b/pip/pip.conf"),
        Path("/etc/pip.conf"),
        home / ".pip/pip.conf",
        home / ".config/pip/pip.conf",
        prefix / "pip.conf",
    ]
    named = tmp_path / "pip.conf"
    named.write_text("")
    # An existing PIP_CONFIG_FILE replaces the user's files and outranks the rest; os.devnull means none.
    with_named = toxw.pip_config_files({"PIP_CONFIG_FILE": str(named)}, home, prefix)
    assert with_named[-1] == named and home / ".config/pip/pip.conf" not in with_named
    assert toxw.pip_config_files({"PIP_CONFIG_FILE": os.devnull}, home, prefix) == []


def _probe_wheel(folder: Path, version: str) -> str:
    name = f"dflash_bridge_probe-{version}"
    filename = f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(folder / filename, "w") as wheel:
        wheel.writestr("dflash_bridge_probe/__init__.py", "")
        metadata = f"Metadata-Version: 2.1\nName: dflash-bridge-probe\nVersion: {version}\n"
        wheel.writestr(f"{name}.dist-info/METADATA", metadata)
        tags = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        wheel.writestr(f"{name}.dist-info/WHEEL", tags)
        wheel.writestr(f"{name}.dist-info/RECORD", "")
    return filename


def test_real_uv_installs_from_where_pip_conf_points_only_through_the_translation(tmp_path: Path) -> None:
    """find-links holds the probe 1.0, a local simple index the probe 2.0: as pip would, uv takes
    2.0 from both, 1.0 when pip's settings say no-index, and finds nothing without the translation."""
    uv = shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if uv is None:
        pytest.skip("no uv here (tox -e unit installs it with tox-uv)")
    wheels, index = tmp_path / "wheels", tmp_path / "index"
    wheels.mkdir()
    _probe_wheel(wheels, "1.0")
    (index / "dflash-bridge-probe").mkdir(parents=True)
    newer = _probe_wheel(index / "dflash-bridge-probe", "2.0")
    (index / "dflash-bridge-probe" / "index.html").write_text(f'<a href="{newer}">{newer}</a>')
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nextra-index-url = {index.as_uri()}\nfind-links = {wheels}\n")
    base = {
        key: value for key, value in os.environ.items() if not key.startswith(("UV_", "PIP_")) and key != "VIRTUAL_ENV"
    }
    # Offline: whatever the translation leaves out, uv cannot make up from the internet.
    base |= {"PIP_CONFIG_FILE": str(conf), "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_OFFLINE": "1"}

    def resolved(env: dict[str, str]) -> str:
        command = [uv, "pip", "compile", "--no-config", "--no-header", "--quiet", "-"]
        probe = "dflash-bridge-probe\n"
        done = subprocess.run(command, input=probe, env=env, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else "nothing"

    assert resolved(base | toxw.current_uv_environment(base)[0]) == "dflash-bridge-probe==2.0"
    without_index = base | {"PIP_NO_INDEX": "1"}
    assert resolved(without_index | toxw.current_uv_environment(without_index)[0]) == "dflash-bridge-probe==1.0"
    assert resolved(base) == "nothing"
