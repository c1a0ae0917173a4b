"""``samsa pipeline``: its usage, its errors, and the generators (no Spark needed for these)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from samsa.cli.pipeline import main
from spark_helpers import read_topic


def samsa(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samsa.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_help_lists_the_pipelines_and_bad_usage_is_one_line():
    helped = samsa("pipeline", "--help")
    assert helped.returncode == 0
    assert "activity" in helped.stdout and "payments" in helped.stdout
    assert "samsa pipeline run payments --embedded" in helped.stdout
    bare = samsa("pipeline")
    assert bare.returncode == 1 and "usage: samsa pipeline" in bare.stderr
    wrong = samsa("pipeline", "run", "billing")
    assert wrong.returncode == 1
    assert wrong.stderr.strip().splitlines() == [
        "samsa pipeline: argument pipeline: invalid choice: 'billing' (choose from 'activity', 'payments')"]
    pg = samsa("pipeline", "run", "activity", "--postgres", "host=x")
    assert pg.returncode == 1 and pg.stderr.strip() == "samsa pipeline: --postgres is an option of the payments pipeline"
    conf = samsa("pipeline", "run", "activity", "--conf", "spark.executor.memory")
    assert conf.returncode == 1 and conf.stderr.strip() == \
        "samsa pipeline: --conf wants KEY=VALUE, got 'spark.executor.memory'"
    source = samsa("pipeline", "run", "activity", "--source", "jdbc")
    assert source.returncode == 1 and source.stderr.strip().splitlines() == [
        "samsa pipeline: argument --source: invalid choice: 'jdbc' (choose from 'samsa', 'kafka')"]
    for args, said in [(["activity", "--real-time"], "--real-time is an option of the payments pipeline"),
                       (["payments", "--real-time"], "--real-time needs --source kafka: Spark's Real-Time Mode "
                                                     "reads only with its Kafka source"),
                       (["payments", "--queries", "background"], "--queries needs --real-time (it splits the "
                                                                  "real-time query from the others)"),
                       (["payments", "--real-time", "--source", "kafka", "--real-time-batch-ms", "0"],
                        "--real-time-batch-ms must be positive, got 0")]:
        r = samsa("pipeline", "run", *args)
        assert r.returncode == 1 and r.stderr.strip() == f"samsa pipeline: {said}"
    assert "\n  pipeline " in samsa("--help").stdout  # listed among the tools


def test_embedded_broker_is_a_child_process_and_a_taken_port_is_one_line(fresh_broker, tmp_path):
    """--embedded starts `samsa server start` in a child process (its log in the state directory)
    and stops it with the pipeline; a port something listens on already is refused."""
    taken = samsa("pipeline", "run", "payments", "--embedded", "--bootstrap-server", fresh_broker.bootstrap_servers,
                  "--state-dir", str(tmp_path / "taken"))
    assert taken.returncode == 1 and taken.stderr.strip() == (
        f"samsa pipeline: something is already listening on {fresh_broker.bootstrap_servers} (another broker?); "
        "stop it, or leave out --embedded to use it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ran = samsa("pipeline", "run", "payments", "--embedded", "--bootstrap-server", f"127.0.0.1:{port}",
                "--state-dir", str(tmp_path / "state"), "--available-now", timeout=420)  # a Spark JVM, loaded
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"listening on 127.0.0.1:{port}, data in {tmp_path / 'state' / 'broker'}" in ran.stdout
    assert "shut down completed" in (tmp_path / "state" / "broker.log").read_text()  # stopped with the pipeline
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_without_pyspark_it_says_which_extra_to_install():
    hidden = "import sys; sys.modules['pyspark'] = None; from samsa.cli.main import main; sys.exit(main(sys.argv[1:]))"
    for command in (["pipeline", "run", "payments"], ["pipeline", "generate", "activity", "--count", "1"]):
        r = subprocess.run([sys.executable, "-c", hidden, *command], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1
        assert r.stderr.strip().splitlines() == ["samsa pipeline: the pipelines run on Spark, and PySpark is not "
                                                 "installed here: pip install -e '.[spark]' (./test installs it)"]


def test_generators_send_valid_events_and_the_share_of_broken_ones_asked_for(fresh_broker, capsys):
    bs = fresh_broker.bootstrap_servers
    assert main(["generate", "payments", "--bootstrap-server", bs, "--rate", "0", "--count", "500",
                 "--malformed", "0"]) == 0
    assert "500 events sent to payments" in capsys.readouterr().out
    txs = [json.loads(m.value()) for m in read_topic(bs, "payments", partitions=2)]
    assert len(txs) == 500 and len({t["tx_id"] for t in txs}) == 500
    assert all(set(t) == {"tx_id", "card_id", "amount", "currency", "merchant", "country", "card_country", "ts"}
               for t in txs)
    assert main(["generate", "activity", "--bootstrap-server", bs, "--rate", "2000", "--count", "400",
                 "--malformed", "0.5", "--seed", "3"]) == 0
    values = [m.value() for m in read_topic(bs, "activity-events", partitions=2)]
    assert len(values) == 400
    broken = 0
    for v in values:
        try:
            e = json.loads(v)
            ok = isinstance(e, dict) and {"event_id", "type", "user_id", "page", "ts"} <= set(e) and \
                e["type"] in ("page_view", "search", "click") and e["ts"] != "yesterday"
        except ValueError:
            ok = False
        broken += not ok
    assert 120 < broken < 280  # about half, by the seed's draw
