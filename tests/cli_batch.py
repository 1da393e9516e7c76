"""Runs one kbert command-line tool on several argument lists in one process, so a batch of refusals pays for one
TensorFlow start-up instead of one each (about 6 s of CPU a run). Each run gets its flags reset to their defaults,
as a fresh process would have them, and reports what a fresh process would: its exit status, stdout and stderr.

    run_batch("build_vocab", [[...args...], [...args...]])   # a subprocess.CompletedProcess each, in order
    assert_refused(result, "kbert-build-vocab", "--input_file", "no words")  # the one-line refusal every tool gives
"""

import contextlib
import importlib
import io
import json
import os
import subprocess
import sys

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


def run_batch(tool: str, runs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Runs `kbert-TOOL ARGS` for each argument list in `runs`, all in one fresh process (TOOL: a module of
    kbert.cli, e.g. "build_vocab"); a CompletedProcess each, in order."""
    batch = subprocess.run(
        [sys.executable, __file__, tool],
        input=json.dumps(runs),
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=300,
    )
    assert batch.returncode == 0, batch.stderr[-3000:]
    return [
        subprocess.CompletedProcess(args, r["returncode"], r["stdout"], r["stderr"])
        for args, r in zip(runs, json.loads(batch.stdout))
    ]


def assert_refused(result: subprocess.CompletedProcess, program: str, *needles: str) -> None:
    """Exit 1, no traceback, and one `PROGRAM: error:` line that holds every needle."""
    assert result.returncode == 1, (result.args, result.stderr)
    assert "Traceback" not in result.stderr, (result.args, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith(f"{program}: error: ")]
    assert len(lines) == 1, (result.args, result.stderr)
    for needle in needles:
        assert needle in lines[0], (result.args, lines[0])


def main() -> None:
    tool = sys.argv[1]
    runs = json.load(sys.stdin)
    module = importlib.import_module(f"kbert.cli.{tool}")
    results = [run_once(module.run, f"kbert-{tool.replace('_', '-')}", args) for args in runs]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
