"""The two ends of `kbert-export`: the encoder a checkpoint holds, and the Google TF1 export of it.

Invariant: `checkpoint_encoder` returns an encoder only after the checkpoint was found, its config resolved and
its vocabulary, width and depth checked against the vocabulary file (each failure one line naming the flag).

Example:

```python
encoder = checkpoint_encoder("runs/bert_tiny", "configs/models/bert_tiny.json", "vocab.txt")
export_google(encoder, "vocab.txt", "export/bert_tiny")  # bert_model.ckpt, bert_config.json, vocab.txt
```
"""

from __future__ import annotations

import os

import tensorflow as tf

from kbert.data.tokenization import load_vocabulary
from kbert.finetuning import pretrained
from kbert.modeling import BertEncoder, export_google_checkpoint
from kbert.runtime.sections import ModelConfig

FLAG_KEYS = pretrained.Keys(checkpoint="--checkpoint", bert="--bert_config", vocab="--vocab_file")


def checkpoint_encoder(checkpoint: str, bert_config: str, vocab_file: str) -> BertEncoder:
    """The encoder of a kbert or Google checkpoint; `bert_config` (a path or preset) where none comes with it."""
    prefix = pretrained.resolve_checkpoint(checkpoint, FLAG_KEYS)
    bert = pretrained.bert_config_for(ModelConfig(bert=bert_config), prefix, FLAG_KEYS)
    vocab_size = len(load_vocabulary(vocab_file))
    pretrained.check_checkpoint_fits(prefix, bert, vocab_size, vocab_file, FLAG_KEYS)
    encoder = BertEncoder(bert.replace(vocab_size=vocab_size))
    pretrained.load_encoder(encoder, prefix)
    return encoder


def export_google(encoder: BertEncoder, vocab_file: str, output_dir: str) -> str:
    """Writes `output_dir/bert_model.ckpt` (the encoder's `bert/...` weights), `bert_config.json` and
    `vocab.txt`; returns the checkpoint prefix."""
    path = export_google_checkpoint(encoder, os.path.join(output_dir, "bert_model.ckpt"))
    tf.io.gfile.copy(vocab_file, os.path.join(output_dir, "vocab.txt"), overwrite=True)
    return path
