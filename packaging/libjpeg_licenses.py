"""Writes libjpeg-turbo's licence notices, for the wheel's dist-info, from a Debian copyright file.

Usage: python packaging/libjpeg_licenses.py COPYRIGHT_FILE OUT_DIR

libjpeg-turbo's code is under three licences, and each asks for its notice
with every binary copy: the IJG licence (the libjpeg code), the Modified BSD
licence (libjpeg-turbo's own additions) and the zlib licence (the SIMD code).
The static archive we link carries no licence file, so the texts come from
the machine-readable copyright file of Debian's libjpeg-turbo package
(DEP-5: "Files:" paragraphs with their "Copyright:" holders, and stand-alone
"License:" paragraphs with the texts). For each licence this writes one file:
the copyright lines of every file under it, then its text, as Debian gives
them. A licence missing from the file is an error: the wheel must not ship
without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Debian's short name of each licence -> the file written into the dist-info.
LICENCES = {
    "BSD-BY-LC-NE": "libjpeg-turbo-LICENSE-IJG.txt",
    "BSD-3-clause": "libjpeg-turbo-LICENSE-BSD-3-Clause.txt",
    "Zlib": "libjpeg-turbo-LICENSE-Zlib.txt",
}


def _paragraphs(text: str) -> list[dict[str, list[str]]]:
    """DEP-5 paragraphs as {field: [first line, continuation lines...]}, field names lowercase."""
    paragraphs, fields, current = [], {}, None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if fields:
                paragraphs.append(fields)
            fields, current = {}, None
        elif line[0] in " \t" and current is not None:
            stripped = line.strip()
            fields[current].append("" if stripped == "." else stripped)
        elif ":" in line:
            name, value = line.split(":", 1)
            current = name.strip().lower()
            fields[current] = [value.strip()]
    return paragraphs


def notices(text: str) -> dict[str, str]:
    """{Debian licence name: notice text} for LICENCES, from a DEP-5 copyright file's text."""
    paragraphs = _paragraphs(text)
    holders: dict[str, list[str]] = {name: [] for name in LICENCES}
    texts: dict[str, str] = {}
    for fields in paragraphs:
        licence = fields.get("license", [""])[0].lower()
        name = next((n for n in LICENCES if n.lower() == licence), None)
        if name is None:
            continue
        if "files" in fields:
            for line in fields.get("copyright", []):
                if line and line not in holders[name]:
                    holders[name].append(line)
        elif len(fields["license"]) > 1:
            texts[name] = "\n".join(fields["license"][1:]).strip() + "\n"
    missing = [name for name in LICENCES if name not in texts]
    if missing:
        raise ValueError(f"the copyright file has no text for {', '.join(missing)}")
    return {name: "Copyright holders (as Debian's libjpeg-turbo package lists them):\n"
                  + "".join(f"  {line}\n" for line in holders[name]) + "\n" + texts[name]
            for name in LICENCES}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, out = Path(argv[1]), Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in notices(source.read_text(encoding="utf-8")).items():
        header = (f"libjpeg-turbo, linked into custom_op's native module, is under this licence "
                  f"({name}).\nSource of this notice: {source}\n\n")
        (out / LICENCES[name]).write_text(header + text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
