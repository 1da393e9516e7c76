"""Every command in README.md and the guides (docs/**.md, fenced code blocks) names flags its program defines, and
every kbert-pretrain or kbert-finetune command's config files and --params_override load through the config schema.

The flags of the console scripts come from docs/reference/commands.md, which tests/test_flags_reference.py keeps
equal to their absl definitions; a `python tools/NAME.py` command's come from the `flags.DEFINE_*` calls in that
file and in the kbert and tools modules it imports. A shell variable (`$OVERRIDES`) or a placeholder (`...`) is left
unchecked, and so is a checkpoint the reader has (a local directory or a bucket): it is not here to read."""

from __future__ import annotations

import ast
import functools
import glob
import os
import re
import shlex

import pytest

from kbert.errors import ConfigError
from kbert.experiment import load_experiment
from kbert.finetuning.config import load_finetune_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# absl's own flags, which every command takes (docs/reference/commands.md says so).
ABSL_FLAGS = {"flagfile", "undefok", "help", "helpfull", "helpshort", "helpxml", "logtostderr", "alsologtostderr"}
_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)?\n(.*?)^```", re.S | re.M)
_PROGRAM = re.compile(r"(kbert-[a-z-]+)(?=\s|$)|python3? (tools/\w+\.py)")
CONFIG_LOADERS = {"kbert-pretrain": load_experiment, "kbert-finetune": load_finetune_config}


def _doc_files() -> list[str]:
    guides = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    files = [os.path.join(ROOT, "README.md")] + guides
    return [f for f in files if not f.endswith(os.path.join("reference", "commands.md"))]


def _commands() -> list[tuple[str, str, list[str]]]:
    """(where, program, arguments) of every command line in the docs' code blocks."""
    found = []
    for path in _doc_files():
        text = open(path, encoding="utf-8").read()
        for block in _BLOCK.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"^\s*\$\s+", "", line)
                try:
                    words = shlex.split(line, comments=True)
                except ValueError:  # not a shell line (output, a table)
                    continue
                while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value before the program
                    words = words[1:]
                head = " ".join(words[:2])
                match = _PROGRAM.match(head)
                if not match or (match.group(1) and not head.startswith(match.group(1) + " ") and len(words) > 1):
                    continue
                program = match.group(1) or match.group(2)
                arguments = words[1:] if match.group(1) else words[2:]
                if program.startswith("kbert-") and arguments[:1] and not arguments[0].startswith("-"):
                    continue  # "kbert-pretrain: error: ...", a line of output
                found.append((f"{os.path.relpath(path, ROOT)}: {line.strip()[:100]}", program, arguments))
    return found


@functools.cache
def _console_flags() -> dict[str, set[str]]:
    """Console script -> its flags, from the generated reference page."""
    flags, program = {}, None
    for line in open(os.path.join(ROOT, "docs", "reference", "commands.md"), encoding="utf-8"):
        if line.startswith("## "):
            program = line[3:].strip()
            flags[program] = set()
        elif program and (match := re.match(r"\| `--(\w+)` \|", line)):
            flags[program].add(match.group(1))
    return flags


def _module_file(module: str, near: str) -> str | None:
    """A kbert module's file, or a module beside `near` (the tools import each other)."""
    bases = [os.path.join(ROOT, *module.split("."))] if module.startswith("kbert") else [os.path.join(near, module)]
    for base in bases:
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.exists(candidate):
                return candidate
    return None


@functools.cache
def _file_flags(path: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """The flags one Python file defines (`flags.DEFINE_*("name", ...)`, `bench_flags.define("name", ...,
    required=(...), name=default)`), and the files of the kbert and tools modules it imports."""
    names, imported = set(), []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if node.func.attr.startswith("DEFINE_") and strings:
                names.add(strings[0])
            elif node.func.attr == "define" and getattr(node.func.value, "id", "") == "bench_flags":
                names |= set(strings) | {k.arg for k in node.keywords if k.arg not in ("required", "notes")}
                for keyword in node.keywords:
                    if keyword.arg == "required":
                        names |= {e.value for e in ast.walk(keyword.value) if isinstance(e, ast.Constant)}
        modules = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        imported += [f for m in modules if (f := _module_file(m, os.path.dirname(path))) is not None]
    return frozenset(names), tuple(imported)


@functools.cache
def _tool_flags(path: str) -> frozenset[str]:
    """The flags of a tool: its own and those of every kbert and tools module it imports, transitively."""
    names, seen, todo = set(), set(), [path]
    while todo:
        if (file := todo.pop()) not in seen:
            seen.add(file)
            defined, imported = _file_flags(file)
            names |= defined
            todo += imported
    return frozenset(names)


COMMANDS = _commands()


def test_the_docs_hold_the_commands_this_test_reads():
    programs = {program for _, program, _ in COMMANDS}
    assert {"kbert-pretrain", "kbert-finetune", "kbert-create-pretraining-data", "kbert-export"} <= programs
    assert len(COMMANDS) > 60 and any(p.startswith("tools/") for p in programs)


@pytest.mark.parametrize("where, program, arguments", COMMANDS, ids=[f"{i}" for i in range(len(COMMANDS))])
def test_every_flag_of_a_documented_command_is_defined(where, program, arguments):
    known = _console_flags().get(program) if program.startswith("kbert-") else None
    if known is None:
        assert program.startswith("tools/"), f"{where}: {program} is no kbert command (setup.cfg console_scripts)"
        known = _tool_flags(os.path.join(ROOT, program))
    for word in arguments:
        if not word.startswith("--"):
            continue
        name = word[2:].split("=", 1)[0]
        bare = name[2:] if name.startswith("no") else name
        assert name in known | ABSL_FLAGS or bare in known, f"{where}: {program} has no flag --{name}"


LOADED = [(w, p, a) for w, p, a in COMMANDS if p in CONFIG_LOADERS]


@pytest.mark.parametrize("where, program, arguments", LOADED, ids=[f"{i}" for i in range(len(LOADED))])
def test_a_documented_run_loads_through_the_config_schema(where, program, arguments):
    values = {"config_file": [], "params_override": ""}
    for word in arguments:
        name, _, value = word[2:].partition("=")
        if name == "config_file":
            values["config_file"].append(value)
        elif name == "params_override":
            values["params_override"] = value
    files = values["config_file"]
    if not files or any("$" in f or "OUT/" in f or f == "..." for f in files):
        pytest.skip("a config file the guide writes itself")
    override = values["params_override"]
    if "$" in override or "..." in override:
        override = ""  # a shell variable the guide sets: the files alone are checked
    # A bucket is not read here (no network in CI): a local path that does not exist stands in for it.
    override = override.replace("gs://", "/nonexistent/gs/")
    checkpoint = re.search(r"(?:^|,)train\.init_checkpoint=([^,]*)", override)
    try:
        CONFIG_LOADERS[program]([os.path.join(ROOT, f) for f in files], override)
    except ConfigError as e:
        # Every key and value passed the schema; what is left is the reader's checkpoint, which is not here to read.
        if not (checkpoint and not os.path.exists(checkpoint.group(1)) and checkpoint.group(1) in str(e)):
            raise
