"""Keras 3 BERT whose variables map 1:1 to Google's checkpoint names.

The model runs on every Keras backend; importing it does not import TensorFlow. Google's checkpoint files are
TensorFlow's format, so `load_google_checkpoint` and `export_google_checkpoint` import it when called.
"""

from kbert.errors import CheckpointMismatchError
from kbert.modeling.config import BertConfig
from kbert.modeling.encoder import BertEncoder
from kbert.modeling.google_checkpoint import export_google_checkpoint, google_variable_map, load_google_checkpoint
from kbert.modeling.heads import MaskedLMHead, NextSentenceHead
from kbert.modeling.losses import pretraining_loss_terms, pretraining_metrics
from kbert.modeling.pretrainer import BertPretrainer
from kbert.modeling.transformer_block import TransformerBlock

__all__ = [
    "BertConfig",
    "BertEncoder",
    "BertPretrainer",
    "CheckpointMismatchError",
    "MaskedLMHead",
    "NextSentenceHead",
    "TransformerBlock",
    "export_google_checkpoint",
    "google_variable_map",
    "load_google_checkpoint",
    "pretraining_loss_terms",
    "pretraining_metrics",
]
