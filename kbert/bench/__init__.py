"""What kbert's benchmarks, studies and tests build on, and no run needs: a bare training step (`bare_step`), a
trainer from a config without the engine (`trainer_from_config`), a multi-worker cluster on localhost
(`localhost_cluster`), a peer's step function on kbert's evaluation schedule (`scheduled_training`) and the LAMB
paper's large-batch rules (`large_batch`). Above the engine's layers; nothing in kbert's runs imports it."""
