"""A quiet console that still shows errors: a kbert command prints neither TensorFlow's cuInit line (on a host
without a GPU) nor oneDNN's INT64 line, and a failing op's error and TensorFlow's own stderr still come through."""

import re
import subprocess
import sys

import pytest
from training_fixtures import cli_env

from kbert.runtime import console

ONEDNN = (
    b"2026-12-06 11:11:11.079400: E tensorflow/core/util/util.cc:131] oneDNN supports DT_INT64 only on platforms "
    b"with AVX-512. Falling back to the default Eigen-based implementation if present.\n"
)


def test_the_filter_drops_only_the_onednn_integer_line():
    kept = [
        b"\rchunks 1,000",  # a status line, rewritten in place, no newline
        ONEDNN.replace(b"DT_INT64", b"DT_BFLOAT16"),  # true on a CPU without AVX-512: kept
        b"2026-12-06 11:11:12.000001: E tensorflow/core/framework/op_kernel.cc:1] a real error\n",
        b"oneDNN supports DT_INT64 only on platforms with AVX-512, quoted in a user's own line\n",
    ]
    stream = kept[0] + ONEDNN + b"".join(kept[1:]) + ONEDNN.replace(b"DT_INT64", b"DT_BOOL")
    assert re.sub(console.ONEDNN_LINE, b"", stream) == b"".join(kept)


# One kbert command: an int64 Transpose in a graph (oneDNN's INT64 line), tf.print to stderr, then a failing op.
PROGRAM = """
import sys
from kbert.cli import entry
import tensorflow as tf

def main(argv):
    tf.function(lambda x: tf.transpose(x) * 2)(tf.constant([[1, 2]], tf.int64))
    tf.print("tf.print on stderr", output_stream=sys.stderr)
    tf.io.read_file("/nonexistent/kbert-console-test")

sys.argv = ["kbert-x"] + sys.argv[1:]
entry.run(main, "kbert-x")
"""


@pytest.mark.spawns
def test_a_command_prints_no_cuinit_or_onednn_line_and_still_shows_errors():
    # On this project's machines (no GPU, x86 with AVX-512) TensorFlow prints both lines here without the fix: a
    # failed cuInit at the first op, and oneDNN's INT64 line at the Transpose (`--verbose` shows them).
    env = cli_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # the commands' own default
    env.pop("TF_ENABLED_DEVICE_TYPES", None)
    result = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "cuInit" not in result.stderr and "oneDNN supports" not in result.stderr, result.stderr
    assert "tf.print on stderr" in result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith("kbert-x: error: NotFound: ") and "/nonexistent/kbert-console-test" in error, error
