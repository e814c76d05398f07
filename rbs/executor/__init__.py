"""The worker: leases, sandboxes, action runner, job runner, log shipping."""
