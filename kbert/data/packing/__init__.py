"""Packing pretraining records: several sequences a row, so rows hold less padding (kbert-pack-pretraining-data).

From the lengths to the files, each module using the ones before it:

* plan.py: which lengths share a row (shortest-pack-first histogram packing, SPFHP), from the length histogram;
* rows.py: which sequences share a row: the plan filled with real sequences, predictions kept within the row's slots;
* sequences.py: sequences in and out of packed rows (the packed layout of `kbert.data.schema`), NumPy over batches;
* chunk.py: one chunk of unpacked records to packed records: parse, assign rows, shuffle, encode;
* pack_pretraining_data.py: unpacked TFRecord files to packed ones: input checks, chunks over worker processes,
  ordered writing (Apache Beam's packing, `kbert.data.beam_pretraining_data`, packs the same chunks).

The model's side of packed rows (each token attends within its own sequence) is `kbert.modeling.packing`. This
package's modules are imported by name; it imports nothing itself.
"""
