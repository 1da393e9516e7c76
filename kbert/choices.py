"""The names that flags and config keys accept, in one place that imports nothing (so `--help` stays fast)."""

STRATEGIES = ("auto", "tpu", "multi_worker_mirrored", "mirrored", "one_device")
MODES = ("train", "eval", "train_and_eval")
OPTIMIZERS = ("lamb", "lars", "adamw")
PRECISION_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
ALL_REDUCE = ("auto", "nccl", "ring")
DEVICES = ("auto", "cpu")  # --device: cpu trains on the CPU even beside a GPU or TPU
