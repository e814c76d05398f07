"""Fixtures for job-target tests: an in-process cluster with one worker, and its client."""

from __future__ import annotations

from job_cluster_fixtures import client, cluster

__all__ = ["client", "cluster"]
