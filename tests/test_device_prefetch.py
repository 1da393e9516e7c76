"""Distributed input prefetches batches into accelerator memory, and leaves them in host memory on CPUs."""

import tensorflow as tf

from kbert.data.pipeline import DEVICE_PREFETCH_BATCHES, distribute_options


def test_gpu_replicas_prefetch_batches_into_their_memory():
    options = distribute_options(tf.distribute.MirroredStrategy(["/gpu:0", "/gpu:1"]))  # needs no GPU to build
    assert options.experimental_fetch_to_device
    assert options.experimental_per_replica_buffer_size == DEVICE_PREFETCH_BATCHES == 2


def test_cpu_replicas_have_nothing_to_copy():
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"), tf.distribute.MirroredStrategy(["/cpu:0"])):
        options = distribute_options(strategy)
        assert not options.experimental_fetch_to_device
        assert options.experimental_per_replica_buffer_size == 1
