"""Connect's group protocol (KIP-415 formats) and the incremental cooperative assignor, below the
process tests in tests/connect."""

from __future__ import annotations

from samsa.connect.group import ConnectAssignment, IncrementalAssignor, WorkerState


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _state(url: str, connectors=(), tasks=()) -> WorkerState:
    held = ConnectAssignment(connectors=sorted(connectors), tasks=sorted(tasks)) if connectors or tasks else None
    return WorkerState(url, 5, held)


# Kafka 4.4.0's IncrementalCooperativeConnectProtocol.serializeAssignment / serializeMetadata of the same
# values (run once against connect-runtime-4.4.0.jar; Kafka's worker decoded Samsa's bytes back alike)
KAFKA_ASSIGNMENT = ("0001000000026d31000e687474703a2f2f613a383038332f000000000000002a000000020002633100000002ffffffff"
                    "00000000000263320000000100000001000000010002633300000002ffffffff00000000000005dc")
KAFKA_METADATA = "0001000e687474703a2f2f613a383038332f0000000000000007" + "00000058" + KAFKA_ASSIGNMENT
KAFKA_METADATA_EMPTY = "0001000e687474703a2f2f613a383038332f0000000000000007ffffffff"


def test_v1_bytes_are_kafkas():
    a = ConnectAssignment(0, "m1", "http://a:8083/", 42, ["c1"], [("c1", 0), ("c2", 1)], ["c3"], [("c3", 0)], 1500)
    assert a.encode().hex() == KAFKA_ASSIGNMENT
    assert WorkerState("http://a:8083/", 7, a).encode(1).hex() == KAFKA_METADATA
    assert WorkerState("http://a:8083/", 7).encode(1).hex() == KAFKA_METADATA_EMPTY
    assert ConnectAssignment.decode(bytes.fromhex(KAFKA_ASSIGNMENT)) == a
    assert WorkerState.decode(bytes.fromhex(KAFKA_METADATA)).assignment == a


# the same with sessioned=true (v2): v1's layout with version 2, the allocation too
KAFKA_V2_ASSIGNMENT = ("0002000000026d31000e687474703a2f2f613a383038332f000000000000002a0000000100026331"
                       "00000002ffffffff000000000000000000000000")
KAFKA_V2_METADATA = "0002000e687474703a2f2f613a383038332f0000000000000007" + "0000003c" + KAFKA_V2_ASSIGNMENT


def test_v2_bytes_are_kafkas():
    a = ConnectAssignment(0, "m1", "http://a:8083/", 42, ["c1"], [("c1", 0)], version=2)
    assert a.encode().hex() == KAFKA_V2_ASSIGNMENT
    assert WorkerState("http://a:8083/", 7, ConnectAssignment(0, "m1", "http://a:8083/", 42, ["c1"], [("c1", 0)])
                       ).encode(2).hex() == KAFKA_V2_METADATA


def test_metadata_and_assignment_round_trip_in_both_versions():
    a = ConnectAssignment(0, "m1", "http://a:8083/", 42, ["c1"], [("c1", 0), ("c2", 1)], ["c3"], [("c3", 0)], 1500)
    assert ConnectAssignment.decode(a.encode()) == a
    v0 = ConnectAssignment(0, "m1", "http://a:8083/", 42, ["c1"], [("c1", 0)], version=0)
    assert ConnectAssignment.decode(v0.encode()) == v0
    s = WorkerState("http://a:8083/", 7, ConnectAssignment(connectors=["c1"], tasks=[("c1", 0)]))
    back = WorkerState.decode(s.encode(1))
    assert (back.url, back.config_offset, back.assignment.connectors, back.assignment.tasks) == (
        "http://a:8083/", 7, ["c1"], [("c1", 0)])
    assert WorkerState.decode(s.encode(0)).assignment is None
    # no allocation: a null bytes field (length -1), as Kafka writes it
    assert WorkerState("u", 1).encode(1).endswith(b"\xff\xff\xff\xff")


def _run(assignor, generation, members, connectors, tasks):
    out = assignor.assign(generation, "a", "http://a/", 10, connectors, tasks, members, 1)
    held = {}
    for m, st in members.items():
        c = set(st.assignment.connectors) if st.assignment else set()
        t = set(st.assignment.tasks) if st.assignment else set()
        c = (c - set(out[m].revoked_connectors)) | set(out[m].connectors)
        t = (t - set(out[m].revoked_tasks)) | set(out[m].tasks)
        held[m] = (c, t)
    return out, held


def test_a_joining_worker_takes_only_what_balances_and_nothing_else_moves():
    clock = Clock()
    assignor = IncrementalAssignor(5000, clock)
    conns = ["x", "y"]
    tasks = [("x", 0), ("x", 1), ("y", 0), ("y", 1)]
    out, held = _run(assignor, 1, {"a": _state("A"), "b": _state("B")}, conns, tasks)
    assert {len(held[m][1]) for m in held} == {2}
    members = {m: _state(m.upper(), *held[m]) for m in held}
    members["c"] = _state("C")
    out, held2 = _run(assignor, 2, members, conns, tasks)
    revoked = [t for m in out for t in out[m].revoked_tasks]
    assert len(revoked) == 1 and not any(out[m].tasks for m in out)  # one revoked, given out next round
    members = {m: _state(m.upper(), *held2[m]) for m in held2}
    out, held3 = _run(assignor, 3, members, conns, tasks)
    assert out["c"].tasks == revoked and not any(out[m].revoked_tasks for m in out)
    for m in ("a", "b"):
        assert held3[m][1] <= held[m][1]  # what stayed was never revoked


def test_a_departed_workers_tasks_wait_for_the_delay():
    clock = Clock()
    assignor = IncrementalAssignor(5000, clock)
    tasks = [("x", i) for i in range(4)]
    out, held = _run(assignor, 1, {"a": _state("A"), "b": _state("B")}, ["x"], tasks)
    gone = held["b"]
    members = {"a": _state("A", *held["a"])}
    out, held = _run(assignor, 2, members, ["x"], tasks)
    assert out["a"].delay_ms == 5000 and not out["a"].tasks and not out["a"].connectors
    clock.now += 2
    out, held = _run(assignor, 3, {"a": _state("A", *held["a"])}, ["x"], tasks)
    assert 0 < out["a"].delay_ms <= 3000 and not out["a"].tasks
    clock.now += 3
    out, held = _run(assignor, 4, {"a": _state("A", *held["a"])}, ["x"], tasks)
    assert set(out["a"].tasks) == gone[1] and set(out["a"].connectors) == gone[0] and out["a"].delay_ms == 0
    assert held["a"] == ({"x"}, set(tasks))


def test_deleted_and_duplicated_work_is_revoked_and_a_new_leader_starts_from_the_members():
    assignor = IncrementalAssignor(5000, Clock())
    members = {"a": _state("A", ["x", "gone"], [("x", 0)]), "b": _state("B", [], [("x", 0), ("x", 1)])}
    out = assignor.assign(7, "a", "http://a/", 10, ["x"], [("x", 0), ("x", 1)], members, 1)
    assert out["a"].revoked_connectors == ["gone"]
    assert out["a"].revoked_tasks == [("x", 0)] and out["b"].revoked_tasks == [("x", 0)]
    assert out["a"].delay_ms == 0  # not lost: this leader did not make generation 6


def test_eager_assigns_everything_round_robin():
    assignor = IncrementalAssignor(5000, Clock())
    out = assignor.assign(1, "a", "http://a/", 10, ["x", "y"], [("x", 0), ("y", 0)],
                          {"a": _state("A"), "b": _state("B")}, 0)
    assert all(o.version == 0 for o in out.values())
    assert sorted(len(o.connectors) + len(o.tasks) for o in out.values()) == [2, 2]
