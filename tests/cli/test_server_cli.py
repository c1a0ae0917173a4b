"""`samsa server start [-daemon] server.properties [--override k=v]` and `samsa server stop`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from broker_process import ROOT, free_port, wait_for_port

SAMSA = [sys.executable, "-m", "samsa.cli.main"]


def run(*args: str, cwd=ROOT, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([*SAMSA, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def test_usage_without_arguments():
    r = run("server")
    assert r.returncode != 0 and "usage: samsa server start" in r.stdout
    r = run()
    assert r.returncode != 0 and "topics" in r.stdout and "server" in r.stdout


def test_bad_value_is_one_clear_line(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=many\n")
    r = run("server", "start", str(props))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "samsa server: Invalid value many for configuration num.partitions: Not a number of type INT"]


def test_missing_properties_file(tmp_path):
    r = run("server", "start", str(tmp_path / "nope.properties"))
    assert r.returncode == 1 and "cannot read" in r.stderr


def test_daemon_start_override_and_stop(tmp_path):
    port = free_port()
    props = tmp_path / "server.properties"
    node_id = unused_node_id()
    props.write_text(f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:1\nlog.dirs={tmp_path / 'data'}\n")
    env = dict(os.environ, LOG_DIR=str(tmp_path / "logs"))
    r = run("server", "start", "-daemon", str(props), "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", "num.partitions=2", "--override", f"broker.id={node_id}", env=env)
    assert r.returncode == 0  # returns at once, the broker runs on in the background
    try:
        wait_for_port(port)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        p.produce("daemon-topic", b"hello", partition=1)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g", "enable.auto.commit": False})
        c.assign([TopicPartition("daemon-topic", 1, 0)])
        msg = c.poll(30)
        c.close()
        assert msg is not None and msg.value() == b"hello"
        assert "started" in (tmp_path / "logs" / "server.log").read_text()
    finally:
        # Only this test's broker: the developer's own brokers and other test runs go on.
        stop = run("server", "stop", "--node-id", str(node_id))
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith(f"Stopping samsa broker node.id={node_id} (pid ") and str(props) in stop.stdout
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            wait_for_port(port, timeout=0.2)
        except TimeoutError:
            break
    else:
        raise AssertionError("the broker still listens after samsa server stop")
    assert "shut down completed" in (tmp_path / "logs" / "server.log").read_text()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


def test_stop_with_nothing_running():
    node_id = unused_node_id()
    r = run("server", "stop", "--node-id", str(node_id))
    assert r.returncode == 1 and r.stderr.strip() == f"No samsa server with node.id {node_id} to stop"


def test_unknown_start_option_is_named():
    r = run("server", "start", "--frobnicate")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "samsa server start: unrecognized option --frobnicate (run 'samsa server' for the usage)"]


def test_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("samsa 0.")


def unused_node_id() -> int:
    """A node id no other broker on this machine runs with, so stop --node-id touches only ours."""
    from samsa.cli.server import running_brokers
    taken = {b.node_id for b in running_brokers()}
    return next(n for n in range(7000 + os.getpid() % 1000, 10**6) if n not in taken)


def test_second_broker_on_a_live_log_dir_is_refused(tmp_path):
    """Kafka's .lock: a second broker on a live broker's log.dirs stops before touching a file,
    on another port as on the same one, naming the directory and the holder's pid."""
    from broker_process import BrokerProcess
    first = BrokerProcess(tmp_path / "first").start()
    try:
        logs = first.data_dir / "logs"
        before = sorted(p.name for p in logs.iterdir())
        for port in (free_port(), first.port):
            props = tmp_path / f"second-{port}.properties"
            props.write_text(f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={logs}\n")
            r = run("server", "start", str(props))
            assert r.returncode == 1
            lines = [line for line in r.stdout.splitlines() + r.stderr.splitlines() if line.strip()]
            assert len(lines) == 1, lines
            assert f"log directory {logs} is in use by another broker (pid {first.proc.pid})" in lines[0]
        assert sorted(p.name for p in logs.iterdir()) == before
        assert first.proc.poll() is None
    finally:
        first.stop()
    second = BrokerProcess(tmp_path / "first").start()  # the lock went with the first broker
    second.stop()


def test_run_twice_says_already_running(tmp_path):
    """./run in a second terminal: it says a broker is already running, not "ready"."""
    home = tmp_path / "home"
    (home / ".venv").mkdir(parents=True)
    (home / ".venv" / "bin").symlink_to(os.path.dirname(sys.executable))
    (home / ".venv" / ".installed").touch()
    (home / "config").mkdir()
    (home / "config" / "server.properties").write_text((ROOT / "config" / "server.properties").read_text())
    (home / "run").write_bytes((ROOT / "run").read_bytes())
    (home / "run").chmod(0o755)
    port = free_port()
    env = dict(os.environ, SAMSA_PORT=str(port), SAMSA_METRICS_PORT=str(free_port()))
    first = subprocess.Popen([str(home / "run")], cwd=home, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert "Samsa is ready on localhost:%d" % port in _read_until(first, "Samsa is ready")
        again = subprocess.run([str(home / "run")], cwd=home, env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 1
        assert "already running on ./data" in again.stderr and "ready" not in again.stdout
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(60)


def _read_until(proc: subprocess.Popen, marker: str) -> str:
    """The process's output up to the line holding ``marker`` (or its end)."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            break
    return "".join(seen)
