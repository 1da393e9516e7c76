"""Fine-tuning BERT for sentence and sentence-pair classification and regression: GLUE and TSV/CSV/JSONL files.

`kbert-finetune` (kbert/run_finetuning.py) runs `run_finetuning`; see docs/finetuning.md.
"""

from kbert.finetuning.config import FinetuneConfig, load_finetune_config
from kbert.finetuning.model import BertClassifier
from kbert.finetuning.runner import run_finetuning

__all__ = ["BertClassifier", "FinetuneConfig", "load_finetune_config", "run_finetuning"]
