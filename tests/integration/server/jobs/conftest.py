"""Fixtures for the job integration tests: a cluster server with one in-process worker."""

from __future__ import annotations

from job_cluster_fixtures import client, cluster

__all__ = ["client", "cluster"]
