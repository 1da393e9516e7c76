"""kbert: fast, cheap BERT pretraining for Keras 3 (LAMB/LARS and multi-stage layerwise training)."""

__version__ = "0.1.0"
