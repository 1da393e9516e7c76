"""The ends of `kbert-export`: the model a checkpoint holds, the folder an export may write to, and the Google TF1
and Hugging Face exports.

Invariant: `checkpoint_pretrainer` (and `checkpoint_encoder`, its encoder) returns a model only after the checkpoint
was found, its config resolved and its vocabulary, width and depth checked against the vocabulary file (each
failure one line naming the flag); the masked-LM head is loaded where the checkpoint holds one. A Hugging Face or
keras-hub checkpoint brings its own vocabulary where `--vocab_file` is not given (`kbert.finetuning.vocabulary`,
with `FLAG_KEYS`). An export writes into a new or empty folder, or with `overwrite` over its own files of the same
names: nothing else is deleted.

Example:

```python
encoder = checkpoint_encoder("runs/bert_tiny", "configs/models/bert_tiny.json", "vocab.txt")
export_google(encoder, "vocab.txt", "export/bert_tiny")  # bert_model.ckpt, bert_config.json, vocab.txt
pretrainer, has_mlm = checkpoint_pretrainer("runs/bert_tiny", "", "vocab.txt")  # the TF Hub export's model
pretrainer, has_mlm = checkpoint_pretrainer("bert-base-uncased", "", "")      # a Hugging Face BERT, its vocab.txt
export_hf(pretrainer, vocab_file_for("bert-base-uncased", ""), "export/hf", "BertForMaskedLM", lower_case=True)
# a model pretrained on records of a tokenizer.json (a BPE one, say): the export carries that tokenizer
pretrainer, _ = checkpoint_pretrainer("runs/modern", "", "", tokenizer="bpe")
export_hf(pretrainer, "", "export/modern", "BertForPreTraining", tokenizer="bpe")
```
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from kbert.data.hf_tokenizer import CONFIG_FILES, HfTokenizer, tokenizer_file
from kbert.data.wordpiece.vocab_file import load_vocabulary
from kbert.errors import ConfigError, VocabularyError
from kbert.finetuning import pretrained
from kbert.finetuning.vocabulary import vocab_file_for
from kbert.modeling import BertEncoder, BertPretrainer, export_google_checkpoint
from kbert.modeling.hf_checkpoint import export_hf_checkpoint
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.modeling.modernbert_checkpoint import composition_problem, export_modernbert_checkpoint
from kbert.runtime import checkpointing
from kbert.runtime.sections import ModelConfig

FLAG_KEYS = pretrained.Keys(
    checkpoint="--checkpoint", bert="--bert_config", vocab="--vocab_file", lower_case="--lower_case"
)


def checkpoint_pretrainer(
    checkpoint: str, bert_config: str, vocab_file: str, tokenizer: str = ""
) -> tuple[BertPretrainer, bool]:
    """The BERT of a kbert, Google, Hugging Face or keras-hub checkpoint, and whether its masked-LM head came with
    it (a Google export of the encoder alone, a BertModel, have none: the heads keep their initial values);
    `bert_config` (a path or preset) where none comes with the checkpoint; `vocab_file` where none does, or
    `tokenizer` (a tokenizer.json or its directory), whose pieces the checkpoint's table may outnumber (ModernBERT
    pads 50,280 pieces to 50,368 rows)."""
    prefix = pretrained.resolve_checkpoint(checkpoint, FLAG_KEYS)
    bert = pretrained.bert_config_for(ModelConfig(bert=bert_config), prefix, FLAG_KEYS)
    if tokenizer:
        vocab_size, pieces = pretrained.checkpoint_size(prefix).vocab_size, HfTokenizer(tokenizer).vocab_size
        if pieces > vocab_size:
            raise VocabularyError(
                f"--tokenizer={tokenizer} has {pieces} pieces but --checkpoint {prefix} has {vocab_size} embedding "
                "rows; give the tokenizer the model was pretrained with."
            )
    else:
        vocab_file = vocab_file_for(prefix, vocab_file, FLAG_KEYS)
        vocab_size = len(load_vocabulary(vocab_file))
    pretrained.check_checkpoint_fits(prefix, bert, vocab_size, tokenizer or vocab_file, FLAG_KEYS)
    model = BertPretrainer(bert.replace(vocab_size=vocab_size))
    has_mlm = pretrained.has_masked_lm_head(prefix)
    if has_mlm or imported_checkpoint(prefix) is not None:
        checkpointing.load_init_checkpoint(model, prefix)
    else:
        pretrained.load_encoder(model.encoder, prefix)
    return model, has_mlm


def checkpoint_encoder(checkpoint: str, bert_config: str, vocab_file: str) -> BertEncoder:
    """The encoder of a kbert or Google checkpoint (see `checkpoint_pretrainer`)."""
    return checkpoint_pretrainer(checkpoint, bert_config, vocab_file)[0].encoder


def _copy_tokenizer(tokenizer: str, output_dir: str) -> None:
    """`tokenizer`'s tokenizer.json into `output_dir`, and the config files beside it where it is a directory."""
    tf.io.gfile.copy(tokenizer_file(tokenizer), os.path.join(output_dir, "tokenizer.json"), overwrite=True)
    for name in CONFIG_FILES:
        if tf.io.gfile.isdir(tokenizer) and tf.io.gfile.exists(os.path.join(tokenizer, name)):
            tf.io.gfile.copy(os.path.join(tokenizer, name), os.path.join(output_dir, name), overwrite=True)


def check_output_dir(path: str, overwrite: bool) -> None:
    """Refuses a file, or a folder that holds files unless `overwrite` (see the module invariant).

    Raises:
      ConfigError: naming the folder, a few of its files and the fix.
    """
    if not tf.io.gfile.exists(path):
        return
    if not tf.io.gfile.isdir(path):
        raise ConfigError(f"--output_dir={path} is a file; give a folder.")
    held = sorted(tf.io.gfile.listdir(path))
    if held and not overwrite:
        shown = ", ".join(name.rstrip("/") for name in held[:3]) + (", ..." if len(held) > 3 else "")
        raise ConfigError(
            f"--output_dir={path} holds files ({shown}); give a new or empty folder, or pass "
            "--overwrite to write the export over its files of the same names (nothing else there "
            "is deleted)."
        )


def export_google(encoder: BertEncoder, vocab_file: str, output_dir: str) -> str:
    """Writes `output_dir/bert_model.ckpt` (the encoder's `bert/...` weights), `bert_config.json` and
    `vocab.txt`; returns the checkpoint prefix."""
    path = export_google_checkpoint(encoder, os.path.join(output_dir, "bert_model.ckpt"))
    tf.io.gfile.copy(vocab_file, os.path.join(output_dir, "vocab.txt"), overwrite=True)
    return path


def wordpiece_tokenizer_json(vocab_file: str, lower_case: bool) -> str:
    """BERT's tokenizer of `vocab_file` as a Hugging Face `tokenizer.json` (built with `tokenizers`): BERT's
    normalizer (lower-casing and accent stripping with `lower_case`), its pre-tokenizer, WordPiece, and
    `[CLS] A [SEP] B [SEP]` around the text."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(load_vocabulary(vocab_file))}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer.to_str()


def export_hf(
    pretrainer: BertPretrainer,
    vocab_file: str,
    output_dir: str,
    architecture: str,
    lower_case: bool = True,
    tokenizer: str = "",
) -> str:
    """Writes `output_dir/config.json` and `model.safetensors` (Hugging Face's `architecture` layout; a model of
    ModernBERT's composition as `ModernBertForMaskedLM`, with the tokenizer's special ids) and the tokenizer:
    `tokenizer` (a tokenizer.json or its directory) copied with the config files beside it, or else `vocab_file` as
    `vocab.txt`, the `tokenizer_config.json` of its lower-casing, and the same tokenizer as `tokenizer.json` (what
    transformers 5's `AutoTokenizer` reads); returns the weights' path."""
    if composition_problem(pretrainer.config) is None:
        if tokenizer:
            ids = {name: i for name, i in HfTokenizer(tokenizer).role_ids.items() if name in ("pad", "cls", "sep")}
        else:
            tokens = {token: i for i, token in enumerate(load_vocabulary(vocab_file))}
            ids = {name: tokens[f"[{name.upper()}]"] for name in ("pad", "cls", "sep")}
        ids.update(bos=ids["cls"], eos=ids["sep"])
        path = export_modernbert_checkpoint(pretrainer, output_dir, {f"{name}_token_id": i for name, i in ids.items()})
    else:
        path = export_hf_checkpoint(pretrainer, output_dir, architecture)
    if tokenizer:
        _copy_tokenizer(tokenizer, output_dir)
        return path
    tf.io.gfile.copy(vocab_file, os.path.join(output_dir, "vocab.txt"), overwrite=True)
    with tf.io.gfile.GFile(os.path.join(output_dir, "tokenizer.json"), "w") as f:
        f.write(wordpiece_tokenizer_json(vocab_file, lower_case))
    tokenizer = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lower_case,
        **{f"{name}_token": f"[{name.upper()}]" for name in ("unk", "sep", "pad", "cls", "mask")},
        "model_max_length": pretrainer.config.max_position_embeddings,
    }
    with tf.io.gfile.GFile(os.path.join(output_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer, f, indent=2)
        f.write("\n")
    return path
