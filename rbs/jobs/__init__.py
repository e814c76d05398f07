"""Client side of rbs jobs: the Python API, its HTTP transport and the local cluster."""
