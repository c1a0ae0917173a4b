"""The controller's rules as pure functions: elections, ISR, preferred leaders, reassignment."""

from samsa.cluster import controller as rules
from samsa.cluster.metadata import PartitionState


def state(replicas, leader, isr, epoch=0, **kw) -> PartitionState:
    return PartitionState(replicas=list(replicas), leader=leader, leader_epoch=epoch, isr=list(isr), **kw)


def test_dead_leader_replaced_by_first_live_isr_member_in_replica_order():
    new = rules.on_brokers_changed(state([0, 1, 2], 0, [2, 0, 1], epoch=4), alive={1, 2}, unclean=False)
    assert (new.leader, new.leader_epoch, new.isr) == (1, 5, [2, 1])


def test_no_live_isr_member_goes_offline_keeping_the_isr_unless_unclean():
    s = state([0, 1, 2], 0, [0], epoch=2)
    offline = rules.on_brokers_changed(s, alive={1, 2}, unclean=False)
    assert (offline.leader, offline.leader_epoch, offline.isr) == (-1, 3, [0])
    assert rules.on_brokers_changed(offline, alive={1, 2}, unclean=False) is None
    back = rules.on_brokers_changed(offline, alive={0, 1, 2}, unclean=False)
    assert (back.leader, back.isr) == (0, [0])
    unclean = rules.on_brokers_changed(s, alive={1, 2}, unclean=True)
    assert (unclean.leader, unclean.isr) == (1, [1])


def test_dead_followers_leave_the_isr_and_live_leader_stays():
    new = rules.on_brokers_changed(state([0, 1, 2], 0, [0, 1, 2], epoch=1), alive={0, 1}, unclean=False)
    assert (new.leader, new.leader_epoch, new.isr) == (0, 1, [0, 1])
    assert rules.on_brokers_changed(new, alive={0, 1}, unclean=False) is None


def test_preferred_leader_only_when_alive_and_in_sync():
    s = state([0, 1, 2], 1, [1, 2, 0], epoch=3)
    assert rules.preferred_leader(s, {0, 1, 2}).leader == 0
    assert rules.preferred_leader(state([0, 1, 2], 1, [1, 2]), {0, 1, 2}) is None
    assert rules.preferred_leader(s, {1, 2}) is None


def test_controlled_shutdown_moves_leadership_and_leaves_isr():
    s = state([0, 1, 2], 0, [0, 1, 2], epoch=1)
    new = rules.move_leadership_off(s, 0, alive={1, 2})
    assert (new.leader, new.leader_epoch, new.isr) == (1, 2, [1, 2])
    follower = rules.move_leadership_off(s, 2, alive={0, 1})
    assert (follower.leader, follower.leader_epoch, follower.isr) == (0, 1, [0, 1])
    assert rules.move_leadership_off(state([0], 0, [0]), 0, alive=set()) is None


def test_reassignment_adds_then_finishes_once_targets_are_in_sync():
    s = rules.start_reassignment(state([0, 1], 0, [0, 1]), [1, 2])
    assert (s.replicas, s.adding_replicas, s.removing_replicas) == ([1, 2, 0], [2], [0])
    assert rules.finish_reassignment(s, {0, 1, 2}) is None  # 2 not in sync yet
    s.isr = [0, 1, 2]
    done = rules.finish_reassignment(s, {0, 1, 2})
    assert (done.replicas, done.isr, done.leader, done.adding_replicas, done.removing_replicas) == (
        [1, 2], [1, 2], 1, [], [])
    assert done.leader_epoch == s.leader_epoch + 1


def test_imbalance_counts_preferred_partitions_not_led():
    states = [state([0, 1], 1, [0, 1]), state([0, 1], 0, [0, 1]), state([1, 0], 1, [0, 1])]
    assert rules.imbalanced_brokers(states, {0, 1}, 10) == {0}
    assert rules.imbalanced_brokers(states, {0, 1}, 50) == set()


def test_replica_assignment_alternates_racks_and_spreads_leaders():
    from types import SimpleNamespace

    from samsa.cluster.metadata import BrokerInfo
    from samsa.cluster.topic_admin import TopicAdmin
    brokers = [BrokerInfo(0, "h", 1, "a"), BrokerInfo(1, "h", 2, "a"), BrokerInfo(2, "h", 3, "b"),
               BrokerInfo(3, "h", 4, "b")]
    fake = SimpleNamespace(alive_brokers=lambda: brokers)
    plan = TopicAdmin.assign_replicas(fake, 4, 2, start=0)
    rack = {b.id: b.rack for b in brokers}
    assert all(rack[r[0]] != rack[r[1]] for r in plan.values())
    assert sorted(r[0] for r in plan.values()) == [0, 1, 2, 3]
