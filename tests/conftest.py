"""Shared fixtures. ``tests/`` is on sys.path, so test modules import ``broker_process``."""

from __future__ import annotations

import os

# Encoders refuse message keys their schema does not know (samsa.protocol.codec.STRICT);
# set before samsa is imported, and inherited by the broker processes tests start.
os.environ.setdefault("SAMSA_STRICT_CODEC", "1")

import pytest  # noqa: E402

from broker_process import BrokerProcess  # noqa: E402

# With pytest-xdist (``./test`` runs ``-n 2``), a worker takes one work unit at a time: a test
# module, or a whole folder whose fixtures are package-scoped (one Spark JVM for all of
# tests/spark). Module- and package-scoped fixtures then start once, as without xdist, and a
# module's tests run in their order. xdist's own ``--dist loadgroup`` would do this from
# ``xdist_group`` marks, but with pytest 9.2 it silently stops grouping (pytest-xdist#1386):
# so the units are made here, by path, in the scheduler xdist asks the conftest for.
# Units are handed out long ones first (those of FIRST, in its order, then the collection's), so
# the short ones (unit/, last) fill in at the end instead of one long unit running alone.
WHOLE_FOLDERS = ("tests/spark/",)
# Modules of a whole folder that use none of its shared fixtures (these start their own Spark
# drivers as processes): units of their own, so they run beside the folder, not after it.
OWN_UNITS = ("tests/spark/test_spark_cluster.py", "tests/spark/test_payments_realtime.py",
             "tests/spark/test_pipeline_cli.py")
# The JVM-heavy Spark units apart from each other, with the process-heavy cluster ones between them.
FIRST = ("tests/spark/", "tests/raft/test_kraft_nemesis.py", "tests/cluster/", "tests/spark/test_spark_cluster.py",
         "tests/raft/", "tests/spark/test_payments_realtime.py", "tests/connect/", "tests/spark/test_pipeline_cli.py")


def work_unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    if path in OWN_UNITS:
        return path
    return next((folder for folder in WHOLE_FOLDERS if path.startswith(folder)), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "load":  # -n's default; another --dist given by hand is xdist's own
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the collection's order (below), not "most tests first"
    return WorkUnits(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: the usual order, one process
        return

    def rank(item) -> int:
        unit = work_unit(item.nodeid)
        if unit in FIRST:  # a module named there: its own place, before the folder it is in
            return FIRST.index(unit)
        return next((i for i, folder in enumerate(FIRST) if unit.startswith(folder)), len(FIRST))
    items.sort(key=rank)  # stable: each unit's tests stay together, in their order


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> BrokerProcess:
    """One broker process shared by the compatibility tests (topics are per test)."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


@pytest.fixture
def topic_name(request) -> str:
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    return f"t-{name}-{os.getpid()}"[:200]


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """Apache Kafka 4.4.0, one KRaft node (broker and controller), started once per session."""
    import kafka_process
    if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
        pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run")
    k = kafka_process.KafkaProcess(tmp_path_factory.mktemp("kafka")).start()
    yield k
    k.stop()

