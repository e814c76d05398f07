"""The job scheduler: a pure state machine with Slurm semantics, its spec parsers and its SQLite journal."""
