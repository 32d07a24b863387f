"""The options bisect and history share: a release range and the release envs it installs.

Not a command itself: ``bisect`` and ``history`` add these options and build their envs here,
so both check every option (a release the index does not offer, a reused env that is no venv,
an override that is no exact pin) before anything is installed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.cuda.stub_driver import cache_dir
from harness.errors import InputError
from harness.releases.bisection import releases_between
from harness.releases.envs import ReleaseEnvs, offered_releases
from harness.releases.install import NO_OVERRIDES, OverrideFileError, load_overrides, parse_overrides


def add_release_arguments(parser: argparse.ArgumentParser, *, out: str, keep_envs: int, new_required: bool) -> None:
    parser.add_argument("--old", metavar="VERSION", help="the oldest release of the range (the reference)")
    newest = "" if new_required else " (default: the newest the index offers)"
    parser.add_argument("--new", metavar="VERSION", help=f"the newest release of the range{newest}")
    parser.add_argument("--releases", nargs="+", metavar="REQ", help="instead: pip requirements in order, oldest first")
    parser.add_argument("--out", metavar="DIR", default=out, help=f"the JSON and each release's report ({out}/)")
    add_env_arguments(parser, keep_envs=keep_envs)
    parser.set_defaults(new_required=new_required)


def add_env_arguments(parser: argparse.ArgumentParser, *, keep_envs: int) -> None:
    """Where release envs live and how each is installed (bisect, history, watch)."""
    parser.add_argument("--cache", metavar="DIR", help="where the release envs live (default: the harness cache)")
    parser.add_argument(
        "--keep-envs", type=int, default=keep_envs, metavar="N", help=f"release envs kept at once (default {keep_envs})"
    )
    parser.add_argument("--reuse-env", action="append", default=[], metavar="RELEASE=PATH", help="an existing env")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="RELEASE=PINS",
        help=(
            "install RELEASE with these dependency pins replaced (0.34.0=flashinfer-python==0.7.4) instead of the "
            f"overrides recorded for it in harness/releases/overrides.toml; RELEASE={NO_OVERRIDES}: as published"
        ),
    )
    parser.add_argument("--clean", action="store_true", help="delete the release envs this run built when done")


def requirement_for(label: str) -> str:
    """A bare version means that vLLM release; anything else is a pip requirement as given."""
    try:
        Version(label)
    except InvalidVersion:
        return label
    return f"vllm=={label}"


def release_envs(args: argparse.Namespace, subfolder: str) -> ReleaseEnvs:
    """The release envs the options ask for (under the harness cache's ``subfolder``)."""
    reuse = {}
    for item in args.reuse_env:
        release, _, folder = item.partition("=")
        if not folder or not (Path(folder) / "bin" / "python").exists():
            raise InputError("--reuse-env", "", f"{item!r} is not RELEASE=PATH of a venv")
        reuse[release] = Path(folder)
    explicit = {}
    for item in args.override:
        release, _, pins = item.partition("=")
        if not release or not pins.strip() or pins.startswith("="):  # "name==1.0" alone names no release
            raise InputError("--override", "", f"{item!r} is not RELEASE=PINS such as 0.34.0=flashinfer-python==0.7.4")
        try:
            chosen = parse_overrides(pins, given_by=release)
        except ValueError as error:
            raise InputError("--override", "", str(error)) from None
        assert chosen is not None  # pins.strip() is not empty
        explicit[release] = chosen
    try:
        recorded = load_overrides()
    except OverrideFileError as error:
        raise InputError(error.path, error.key, error.problem, error.choices or None) from None
    root = Path(args.cache) if args.cache else cache_dir() / subfolder
    return ReleaseEnvs(
        root,
        keep=max(1, args.keep_envs),
        requirement=requirement_for,
        reuse=reuse,
        recorded=recorded,
        explicit=explicit,
    )


def _version(text: str, option: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise InputError(option, "", f"{text!r} is not a vLLM version such as 0.33.0") from None


def chosen_releases(args: argparse.Namespace, command: str) -> tuple[str, ...]:
    """The ordered releases (versions, or pip requirements given with --releases)."""
    if args.releases:
        if args.old or args.new:
            raise InputError("--releases", "", "give either --releases or --old/--new, not both")
        return tuple(args.releases)
    if not args.old or (args.new_required and not args.new):
        needed = "both are needed" if args.new_required else "--old is needed"
        raise InputError("--old/--new", "", f"{needed} (or --releases REQ...)")
    _version(args.old, "--old")
    if args.new and _version(args.new, "--new") <= Version(args.old):
        raise InputError("--old", "", f"{args.old} is not older than --new {args.new}")
    try:
        offered = offered_releases()
    except RuntimeError as error:
        raise InputError(command, "", str(error)) from None
    new = args.new
    if not new:
        newer = [v for v in offered if not Version(v).is_prerelease and Version(v) > Version(args.old)]
        if not newer:
            raise InputError("--old", "", f"the package index offers no release newer than {args.old}")
        new = max(newer, key=Version)
    for option, text in (("--old", args.old), ("--new", new)):
        if text not in offered:
            near = [v for v in offered if Version(v).major == Version(text).major][:12]
            raise InputError(option, "", f"vLLM {text} is not offered by the package index", near)
    return releases_between(offered, args.old, new)


def check_overridden(args: argparse.Namespace, releases: tuple[str, ...]) -> None:
    """An --override for a release the range does not hold would silently do nothing: refuse it."""
    for item in args.override:
        release = item.partition("=")[0]
        if release not in releases:
            raise InputError("--override", "", f"{release} is not a release of this range", releases)
