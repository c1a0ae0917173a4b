"""Fixtures of the cluster tests: clusters of real ZooKeeper and broker processes, removed after."""

from __future__ import annotations

import pytest

from cluster_harness import Cluster


@pytest.fixture
def cluster_factory(tmp_path):
    made: list[Cluster] = []

    def make(**overrides) -> Cluster:
        c = Cluster(tmp_path / f"c{len(made)}", **overrides)
        made.append(c)
        return c.start()
    yield make
    for c in made:
        c.stop()
