"""Write each repro template (harness/repro/*.tmpl) as the script it becomes, its markers filled with
stand-ins of the right kind (``harness.commands.repro.MARKERS``), so that the lint env runs ruff and
mypy over the scripts ``dflash-matrix repro`` writes, as over the rest of the code:

    python tools/repro_scripts.py OUT_DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.commands.repro import MARKERS, TEMPLATES, fill

STAND_INS = {
    "text": "stand-in text",
    "a str literal of JSON": repr(json.dumps({})),
    "a str literal, or None": "None",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write one script per template into")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    replacements = {marker: STAND_INS[kind] for marker, kind in MARKERS.items()}
    for template in sorted(set(TEMPLATES.values())):
        (args.out / template.name.removesuffix(".tmpl")).write_text(fill(template.read_text(), replacements))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
