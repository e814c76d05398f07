"""rbs: one tool for builds and cluster jobs."""

__version__ = "0.1.0"
