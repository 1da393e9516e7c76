"""The data tools' Apache Beam flags: --runner runs a tool's pipeline on Beam instead of local worker processes,
with --beam_pipeline_args passed through to the runner.

Example:

```python
define_beam_flags()  # at import, beside the tool's own flags
if FLAGS.runner:
    args = pipeline_args()  # ["--runner=DataflowRunner", "--project=P", ...], after the checks
```
"""

from __future__ import annotations

import importlib.util

from absl import flags

from kbert.errors import ConfigError

FLAGS = flags.FLAGS


def define_beam_flags() -> None:
    flags.DEFINE_string(
        "runner",
        None,
        "Run on Apache Beam with this runner (DirectRunner, PrismRunner, "
        "DataflowRunner, FlinkRunner, SparkRunner; needs kbert[beam]) instead of local worker "
        "processes: the same records for a seed, as --num_output_shards files named after "
        "--output_file.",
    )
    flags.DEFINE_multi_string(
        "beam_pipeline_args",
        [],
        "A Beam pipeline option for --runner, e.g. --beam_pipeline_args=--project=P; repeat the flag for each option.",
    )


def pipeline_args() -> list[str]:
    """The pipeline options for --runner, after refusing the local tool's --num_workers and a missing Beam."""
    if FLAGS["num_workers"].present:
        raise ConfigError(
            "--num_workers sets the local tool's processes; with --runner give the runner's own, e.g. "
            "--beam_pipeline_args=--direct_num_workers=4 or --beam_pipeline_args=--max_num_workers=64."
        )
    if importlib.util.find_spec("apache_beam") is None:
        raise ConfigError("--runner needs Apache Beam: pip install 'kbert[beam]'.")
    return [f"--runner={FLAGS.runner}"] + FLAGS.beam_pipeline_args


def check_local() -> None:
    """Refuses Beam options without --runner (they would be ignored)."""
    if FLAGS.beam_pipeline_args:
        raise ConfigError("--beam_pipeline_args are options of a Beam runner: add --runner=DirectRunner (or another).")
