"""docs/reference/commands.md is what tools/flags_reference.py writes from today's flag definitions."""

import importlib.util
import json
import pathlib
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The tool imports each command's module in a fresh process of its own (absl's flags are one registry per process);
# three of them import TensorFlow, 6 s of CPU each. This process imports TensorFlow once and forks a child per
# module, each as fresh as the tool's process but for TensorFlow already imported, and runs the tool's own dump
# script there (from the repository root, as the tool does). argv: the results file, then the dump script, then the
# modules; it writes module -> [exit status, stdout, stderr].
_FORK_DUMPS = """
import json, os, sys, tempfile, traceback
import tensorflow  # noqa: F401 (imported once, before the forks)

results, dump, modules = sys.argv[1], sys.argv[2], sys.argv[3:]
found = {}
with tempfile.TemporaryDirectory() as folder:
    for module in modules:
        out, err = os.path.join(folder, "out"), os.path.join(folder, "err")
        pid = os.fork()
        if pid == 0:
            code = 0
            with open(out, "wb") as o, open(err, "wb") as e:
                os.dup2(o.fileno(), 1)
                os.dup2(e.fileno(), 2)
                sys.argv = ["-c", module]
                try:
                    exec(compile(dump, "<string>", "exec"), {"__name__": "__main__"})
                except BaseException:
                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        found[module] = [os.waitstatus_to_exitcode(status), open(out).read(), open(err).read()]
with open(results, "w") as f:
    json.dump(found, f)
"""


@pytest.mark.spawns
def test_the_commands_page_is_current(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("flags_reference", ROOT / "tools" / "flags_reference.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    modules = list(tool.commands().values())
    results = tmp_path / "dumps.json"
    forked = subprocess.run(
        [sys.executable, "-c", _FORK_DUMPS, str(results), tool._DUMP, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert forked.returncode == 0 and results.exists(), forked.stderr[-3000:]
    dumps = json.loads(results.read_text())
    assert sorted(dumps) == sorted(modules)

    def run(command, cwd, **_):
        """The tool's `python -c DUMP MODULE` in ROOT, answered by that module's forked child."""
        assert command[:3] == [sys.executable, "-c", tool._DUMP] and pathlib.Path(cwd) == ROOT, command
        return subprocess.CompletedProcess(command, *dumps[command[3]])

    monkeypatch.setattr(tool, "subprocess", types.SimpleNamespace(run=run))
    monkeypatch.setattr(sys, "argv", ["flags_reference.py", "--check"])
    try:
        tool.main()  # --check
    except SystemExit as exit_:  # the page differs from the flags, or a module failed to import
        pytest.fail(str(exit_.code))
