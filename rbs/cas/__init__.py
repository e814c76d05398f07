"""The content-addressed store: digests, blob stores, Merkle trees, materialization, eviction."""
