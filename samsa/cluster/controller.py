"""The controller's decisions, as pure functions of a partition's state and the live brokers.

Kafka's rules: a new leader comes from the ISR, first in assigned-replica order; with no
live ISR member the partition goes offline (leader -1) and keeps its last ISR, unless
``unclean.leader.election.enable`` lets any live replica lead; dead followers leave the
ISR; the preferred leader is the first assigned replica; a reassignment first adds the
target replicas, and completes once they are all in the ISR.
"""

from __future__ import annotations

from dataclasses import replace

from samsa.cluster.metadata import PartitionState


def on_brokers_changed(state: PartitionState, alive: set[int], unclean: bool) -> PartitionState | None:
    """The state after brokers came or went, or None when it does not change."""
    live_isr = [r for r in state.isr if r in alive]
    if state.leader in alive:
        if live_isr != state.isr:
            return replace(state, isr=live_isr)
        return None
    candidates = [r for r in state.replicas if r in live_isr]
    if candidates:
        return replace(state, leader=candidates[0], leader_epoch=state.leader_epoch + 1, isr=live_isr)
    live = [r for r in state.replicas if r in alive]
    if unclean and live:
        return replace(state, leader=live[0], leader_epoch=state.leader_epoch + 1, isr=[live[0]])
    if state.leader != -1:
        return replace(state, leader=-1, leader_epoch=state.leader_epoch + 1)
    return None


def on_brokers_bounced(state: PartitionState, alive: set[int], bounced: set[int],
                       unclean: bool) -> PartitionState | None:
    """The state after brokers came back as new lives (KIP-380: a new broker epoch) that the
    controller never saw go: as Kafka does, each is handled as a failure, then a start.

    A bounced leader loses leadership to another live ISR member (or, alone in the ISR, is
    elected again with a new leader epoch, so its followers and clients see the change); a
    bounced follower leaves the ISR and rejoins once it has caught up."""
    if not bounced & ({state.leader} | set(state.isr)):
        return on_brokers_changed(state, alive, unclean)
    failed = on_brokers_changed(state, alive - bounced, unclean) or state
    return on_brokers_changed(failed, alive, unclean) or failed


def preferred_leader(state: PartitionState, alive: set[int]) -> PartitionState | None:
    """Move leadership to the first assigned replica when it is alive and in sync."""
    preferred = state.replicas[0] if state.replicas else -1
    if state.leader == preferred or preferred not in alive or preferred not in state.isr:
        return None
    return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1)


def move_leadership_off(state: PartitionState, broker_id: int, alive: set[int]) -> PartitionState | None:
    """Controlled shutdown of ``broker_id``: another ISR member leads, and it leaves the ISR."""
    others = [r for r in state.replicas if r != broker_id and r in state.isr and r in alive]
    if not others or broker_id not in state.isr:
        return None
    isr = [r for r in state.isr if r != broker_id]
    if state.leader == broker_id:
        return replace(state, leader=others[0], leader_epoch=state.leader_epoch + 1, isr=isr)
    return replace(state, isr=isr)


def start_reassignment(state: PartitionState, target: list[int]) -> PartitionState:
    """Replicas become target + the old ones being removed; the new ones start following."""
    adding = [r for r in target if r not in state.replicas]
    removing = [r for r in state.replicas if r not in target]
    return replace(state, replicas=list(target) + removing, adding_replicas=adding, removing_replicas=removing)


def target_replicas(state: PartitionState) -> list[int]:
    return [r for r in state.replicas if r not in state.removing_replicas]


def finish_reassignment(state: PartitionState, alive: set[int]) -> PartitionState | None:
    """Once every target replica is in the ISR: drop the old replicas, moving the leader if needed."""
    if not (state.adding_replicas or state.removing_replicas):
        return None
    target = target_replicas(state)
    if not all(r in state.isr for r in target):
        return None
    isr = [r for r in state.isr if r in target]
    leader, epoch = state.leader, state.leader_epoch
    if leader not in target:
        live = [r for r in target if r in isr and r in alive]
        if not live:
            return None
        leader, epoch = live[0], epoch + 1
    return replace(state, replicas=target, isr=isr, leader=leader, leader_epoch=epoch,
                   adding_replicas=[], removing_replicas=[])


def imbalanced_brokers(states: list[PartitionState], alive: set[int], percentage: int) -> set[int]:
    """Brokers leading fewer of their preferred partitions than ``leader.imbalance.per.broker.percentage`` allows."""
    preferred: dict[int, int] = {}
    not_leading: dict[int, int] = {}
    for s in states:
        if not s.replicas or s.replicas[0] not in alive:
            continue
        b = s.replicas[0]
        preferred[b] = preferred.get(b, 0) + 1
        if s.leader != b:
            not_leading[b] = not_leading.get(b, 0) + 1
    return {b for b, n in not_leading.items() if n * 100 > percentage * preferred[b]}
