"""Writes docs/reference/commands.md, every kbert command's flags with their defaults and help, from the absl flag
definitions themselves, so the page cannot drift from the code; `--check` exits 1 if the page is not current.

The commands are setup.cfg's console scripts. Each is imported in a process of its own (absl's flags are one
registry per process, and two commands may define a flag of the same name); three of them import TensorFlow when
imported, so a run takes about 20 s. Usage: `.venv/bin/python tools/flags_reference.py [--check]`.
"""

from __future__ import annotations

import argparse
import configparser
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "commands.md"

# Run in a fresh process: imports one command's module and prints its docstring and kbert's flags as JSON, the
# command's own module first, each module's flags in definition order.
_DUMP = """
import importlib, json, sys
from absl import flags
module = importlib.import_module(sys.argv[1])
by_module = flags.FLAGS.flags_by_module_dict()
owners = sorted((m for m in by_module if m.startswith("kbert.")), key=lambda m: m != module.__name__)
print(json.dumps({
    "doc": module.__doc__ or "",
    "flags": [
        {"name": f.name, "default": f.default, "help": f.help, "choices": getattr(f.parser, "enum_values", None)}
        for owner in owners for f in by_module[owner]
    ],
}))
"""


def commands() -> dict[str, str]:
    """setup.cfg's console scripts: command name -> its module."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = config["options.entry_points"]["console_scripts"].strip().splitlines()
    return {name.strip(): target.split(":")[0].strip() for name, target in (line.split("=") for line in scripts)}


def _default(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return f"`{','.join(map(str, value))}`" if value else "none"
    return f"`{value}`" if value != "" else '`""`'


def _help(text: str, choices: list[str] | None) -> str:
    """The help as one Markdown table cell, read as plain text outside its code spans; an enum's choices, which absl
    puts first (`<a|b>: ...`), at the end."""
    if choices:
        text = text.removeprefix(f"<{'|'.join(choices)}>: ") + f" One of: {', '.join(f'`{c}`' for c in choices)}."
    parts = " ".join(text.split()).split("`")
    parts[::2] = [re.sub(r"([|\[*])", r"\\\1", part).replace("<", "&lt;") for part in parts[::2]]  # outside `code`
    return "`".join(parts)


def section(command: str, module: str) -> str:
    # From the repository root, which `-c` puts first on sys.path: this tree's kbert, whatever is installed.
    dump = subprocess.run([sys.executable, "-c", _DUMP, module], cwd=ROOT, capture_output=True, text=True)
    if dump.returncode:
        sys.exit(f"{command}: importing {module} failed:\n{dump.stderr}")
    found = json.loads(dump.stdout)
    summary = found["doc"].strip().split("\n\n")[0]
    rows = [
        f"| `--{f['name']}` | {_default(f['default'])} | {_help(f['help'], f['choices'])} |" for f in found["flags"]
    ]
    return "\n".join([f"## {command}", "", summary, "", "| Flag | Default | Help |", "| --- | --- | --- |", *rows])


def page() -> str:
    intro = (
        "# Command-line flags\n\n"
        "<!-- Written by tools/flags_reference.py from the flag definitions; do not edit: rerun it. -->\n\n"
        "Every flag of every kbert command, with its default and help, as `COMMAND --help` gives them. A boolean\n"
        "flag is set with `--name` or `--noname`. Each command also takes absl's own flags (`--flagfile`,\n"
        "`--helpfull`, logging's).\n"
    )
    return "\n\n".join([intro, *(section(c, m) for c, m in commands().items())]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from the flags")
    text = page()
    if parser.parse_args().check:
        if PAGE.read_text() != text:
            sys.exit(f"{PAGE.relative_to(ROOT)} is out of date: run `.venv/bin/python tools/flags_reference.py`.")
        return
    PAGE.write_text(text)


if __name__ == "__main__":
    main()
