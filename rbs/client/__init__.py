"""All that talks to a cluster: the remote build runner, the jobs client, transfers, the embedded local cluster."""
