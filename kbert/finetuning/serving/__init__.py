"""Serving what kbert trains, as SavedModels that load with TensorFlow and tensorflow-text alone (no kbert):

- `tf_hub_export`: a pretrained encoder and its preprocessing, Model Garden's TF Hub interface (`kbert-export
  --format=tf_hub`; the objects: `hub_preprocess`, `hub_encoder`);
- `classifier_export`: a fine-tuned classifier or regressor taking strings (`kbert-export --format=saved_model`),
  rebuilt from its run by `finetuned_run`;
- `predict`: predictions for a TSV/CSV/JSONL file from a run or its SavedModel (`kbert-predict`).

See docs/finetuning.md, "Serving".
"""
