"""The server process: explicit wiring, REAPI servicers, the Workers service, the jobs API and its driver."""
