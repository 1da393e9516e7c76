"""Writes docs/reference/commands.md, every kbert command's flags with their defaults and help, from the absl flag
definitions themselves, so the page cannot drift from the code; `--check` exits 1 if the page is not current.

The commands are setup.cfg's console scripts. Each is imported in a process of its own (absl's flags are one
registry per process, and two commands may define a flag of the same name): one process imports TensorFlow, which
three of them import, then forks a child per command. Usage: `.venv/bin/python tools/flags_reference.py [--check]`.
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

# Run in a fresh process: imports TensorFlow, then for each module named in argv forks a child that imports it and
# writes its docstring and kbert's flags as JSON, the command's own module first, each module's flags in definition
# order; prints module -> [exit status, the child's output, its errors] as JSON.
_DUMPS = """
import importlib, json, os, sys, tempfile, traceback
import tensorflow  # noqa: F401 (once, before the forks)
from absl import flags


def dump(name):
    module = importlib.import_module(name)
    by_module = flags.FLAGS.flags_by_module_dict()
    owners = sorted((m for m in by_module if m.startswith("kbert.")), key=lambda m: m != module.__name__)
    print(json.dumps({
        "doc": module.__doc__ or "",
        "flags": [
            {"name": f.name, "default": f.default, "help": f.help, "choices": getattr(f.parser, "enum_values", None)}
            for owner in owners for f in by_module[owner]
        ],
    }))


found = {}
with tempfile.TemporaryDirectory() as folder:
    out, err = os.path.join(folder, "out"), os.path.join(folder, "err")
    for name in sys.argv[1:]:
        pid = os.fork()
        if pid == 0:
            code = 0
            with open(out, "w") as o, open(err, "w") as e:
                os.dup2(o.fileno(), 1)
                os.dup2(e.fileno(), 2)
                try:
                    dump(name)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        with open(out) as o, open(err) as e:
            found[name] = [os.waitstatus_to_exitcode(status), o.read(), e.read()]
print(json.dumps(found))
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


def dumps(modules: list[str]) -> dict[str, list]:
    """Each module -> [exit status, output, errors] of importing it in a process of its own (`_DUMPS`)."""
    # From the repository root, which `-c` puts first on sys.path: this tree's kbert, whatever is installed.
    run = subprocess.run([sys.executable, "-c", _DUMPS, *modules], cwd=ROOT, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"importing the commands' modules failed:\n{run.stderr}")
    return json.loads(run.stdout.splitlines()[-1])


def section(command: str, module: str, dump: list) -> str:
    code, output, errors = dump
    if code:
        sys.exit(f"{command}: importing {module} failed:\n{errors}")
    found = json.loads(output)
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
    found = dumps(list(commands().values()))
    return "\n\n".join([intro, *(section(c, m, found[m]) for c, m in commands().items())]) + "\n"


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
