"""The `checkpoint` index file of a folder of TF checkpoints, written with names relative to that folder.

Invariant: after `write_checkpoint_index(directory, prefixes)`, `tf.train.latest_checkpoint(directory)` names the
last of `prefixes`, and still does after the folder is moved or copied (to another host, to GCS), because the
file holds base names only. TF's own writer, `tf.compat.v1.train.update_checkpoint_state`, stores absolute paths
(and is deprecated); `tf.train.CheckpointManager` stores relative ones, as this does.

Example:

```python
write_checkpoint_index("export", ["export/bert_model.ckpt"])   # export/checkpoint names "bert_model.ckpt"
```
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf


def write_checkpoint_index(directory: str, prefixes: Sequence[str]) -> None:
    """Points `directory/checkpoint` at `prefixes` (oldest first; the last is the newest), replacing it whole."""
    names = [os.path.basename(prefix) for prefix in prefixes]
    lines = [f'model_checkpoint_path: "{names[-1]}"'] + [f'all_model_checkpoint_paths: "{n}"' for n in names]
    path = os.path.join(directory, "checkpoint")
    # Written aside, then renamed over the old index: a reader never sees half a file.
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
