"""Runs one kbert command-line tool on several argument lists in one process, so a batch of runs pays for one
TensorFlow start-up instead of one each (about 6 s of CPU a run). Each run gets its flags reset to their defaults,
as a fresh process would have them, and reports what a fresh process would: its exit status, stdout and stderr.
The process can first split the CPU into logical devices (which must happen before TensorFlow starts, so only in a
process of its own) and run set-up code of the caller's.

    run_batch("build_vocab", [[...args...], [...args...]])   # a subprocess.CompletedProcess each, in order
    run_batch("pretrain", [[...args...]], cpus=2)             # on 2 logical CPU devices
    assert_refused(result, "kbert-build-vocab", "--input_file", "no words")  # the one-line refusal every tool gives
    run_tools([("predict", [...args...]), ("export", [...args...])])  # several tools, in order, in one process
"""

import contextlib
import importlib
import io
import json
import os
import subprocess
import sys
import tempfile

import forkserver
from absl import flags


def run_once(tool_run, program: str, args: list[str]) -> dict:
    """One run of `tool_run` (an entry point that calls absl's app.run) with `args`, as `PROGRAM ARGS` would run."""
    flags.FLAGS.unparse_flags()
    stdout, stderr = io.StringIO(), io.StringIO()
    sys.argv = [program, *args]
    code = 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            tool_run()
        except SystemExit as exit_:
            if isinstance(exit_.code, str):  # sys.exit("message"): the interpreter prints it and exits 1
                print(exit_.code, file=sys.stderr)
                code = 1
            else:
                code = int(exit_.code or 0)
    return {"returncode": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}


def run_batch(
    tool: str, runs: list[list[str]], cpus: int = 1, setup: str = "", cwd=None, timeout: float = 300
) -> list[subprocess.CompletedProcess]:
    """Runs `kbert-TOOL ARGS` for each argument list in `runs`, all in one fresh process (TOOL: a module of
    kbert.cli, e.g. "build_vocab") in `cwd`, on `cpus` logical CPU devices, after `setup` (Python code, with `tf`
    imported when it is given); a CompletedProcess each, in order."""
    env = forkserver.server_environment()
    with tempfile.TemporaryDirectory() as folder:
        results = os.path.join(folder, "results.json")  # a file: TensorFlow's C++ side can write to stdout too
        batch = forkserver.run(
            [sys.executable, __file__, tool, str(cpus), setup, results],
            input=json.dumps(runs),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert batch.returncode == 0 and os.path.exists(results), batch.stdout[-3000:] + batch.stderr[-3000:]
        with open(results) as f:
            outcomes = json.load(f)
    return [
        subprocess.CompletedProcess(args, r["returncode"], r["stdout"], r["stderr"]) for args, r in zip(runs, outcomes)
    ]


def run_tools(
    runs: list[tuple[str, list[str]]], cpus: int = 1, setup: str = "", cwd=None, timeout: float = 300
) -> list[subprocess.CompletedProcess]:
    """`run_batch` for runs of several tools: (TOOL, ARGS) each, run in order in one fresh process. A TOOL is a
    module of kbert.cli, or a script of tools/ that runs one (its path from `cwd`, e.g. "tools/build_vocab.py":
    executed as `python SCRIPT ARGS` would, as __main__), or "-m MODULE", run as `python -m MODULE ARGS` would.
    Where the tool changes, every flag a kbert module defined is forgotten and those modules are imported afresh
    by the next tool (two tools may define a flag of the same name, or one that a module of the other defines),
    as in a fresh process; flags of other modules stay defined, a -m MODULE's too (give its runs last)."""
    results = run_batch(_SEVERAL_TOOLS, [[tool, *args] for tool, args in runs], cpus, setup, cwd, timeout)
    return [subprocess.CompletedProcess(args, r.returncode, r.stdout, r.stderr) for (_, args), r in zip(runs, results)]


_SEVERAL_TOOLS = "+"  # run_batch's tool for runs whose first argument names their tool (run_tools)


def _run_several_tools(runs: list[list[str]]) -> list[dict]:
    """Each [TOOL, *ARGS] in order, importing TOOL's module afresh where the tool changes (see `run_tools`)."""
    import runpy

    def kbert_flag_modules() -> set[str]:
        return {name for name in flags.FLAGS.flags_by_module_dict() if name.startswith("kbert.")}

    before = kbert_flag_modules()  # the set-up's, if any
    outcomes, current = [], None
    for tool, *args in runs:
        if tool != current:
            for name in kbert_flag_modules() - before:
                for flag in list(flags.FLAGS.flags_by_module_dict()[name]):
                    delattr(flags.FLAGS, flag.name)
                sys.modules.pop(name, None)
                package, _, module = name.rpartition(".")  # `from package import module` would find the old one
                vars(sys.modules[package]).pop(module, None)
            current = tool
            if tool.startswith("-m "):
                name = tool[len("-m ") :]
                program, tool_run = name, lambda name=name: runpy.run_module(name, run_name="__main__", alter_sys=True)
            elif tool.endswith(".py"):
                program, tool_run = tool, lambda script=tool: runpy.run_path(script, run_name="__main__")
            else:
                program, tool_run = f"kbert-{tool.replace('_', '-')}", importlib.import_module(f"kbert.cli.{tool}").run
        outcomes.append(run_once(tool_run, program, args))
    return outcomes


def assert_refused(result: subprocess.CompletedProcess, program: str, *needles: str) -> None:
    """Exit 1, no traceback, and one `PROGRAM: error:` line that holds every needle."""
    assert result.returncode == 1, (result.args, result.stderr)
    assert "Traceback" not in result.stderr, (result.args, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith(f"{program}: error: ")]
    assert len(lines) == 1, (result.args, result.stderr)
    for needle in needles:
        assert needle in lines[0], (result.args, lines[0])


def main() -> None:
    tool, cpus, setup, results = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if cpus > 1 or setup:
        import tensorflow as tf

        if cpus > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * cpus)
        exec(setup, {"tf": tf})
    runs = json.load(sys.stdin)
    if tool == _SEVERAL_TOOLS:
        outcomes = _run_several_tools(runs)
    else:
        module = importlib.import_module(f"kbert.cli.{tool}")
        outcomes = [run_once(module.run, f"kbert-{tool.replace('_', '-')}", args) for args in runs]
    with open(results, "w") as f:
        json.dump(outcomes, f)


if __name__ == "__main__":
    main()
