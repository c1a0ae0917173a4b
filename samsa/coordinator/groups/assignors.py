"""Server-side assignors of the new group protocols (KIP-848): ``uniform`` and ``range``.

Pure functions from a group's subscriptions to a target assignment, with no I/O and no
group state: the coordinator (:mod:`.consumer_groups`, :mod:`.share_groups`) calls
:func:`assign` with each member's subscribed topic ids and the partitions it holds in the
current target (for stickiness), and the partition counts of the subscribed topics.

- ``uniform`` (Kafka's UniformAssignor): every member gets as close to the same number of
  partitions as the subscriptions allow, keeping the partitions it has where it can;
- ``range`` (Kafka's RangeAssignor): for each topic, its subscribers (by member id) get
  contiguous ranges of its partitions, the first ones one more when they do not divide;
- ``simple`` (Kafka's SimpleAssignor, share groups): as ``uniform``, then members left
  without a partition share the least-read partition they subscribe to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicId = bytes
#: topic id -> the partitions of that topic (a member's assignment, a target's, a group's)
Assignment = dict[TopicId, frozenset[int]]


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of one member."""
    topics: frozenset[TopicId]                       # the subscribed topics that exist
    current: Mapping[TopicId, frozenset[int]] = field(default_factory=dict)  # its partitions in the current target
    rack: str | None = None
    instance_id: str | None = None


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[TopicId, int]], dict[str, Assignment]]


def _finish(owned: dict[str, dict[TopicId, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in by_topic.items() if ps} for m, by_topic in owned.items()}


def uniform(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]) -> dict[str, Assignment]:
    """Balanced and sticky: keep what each member holds, give out the rest to the least loaded
    eligible member, then move partitions from the most to the least loaded until no member
    has two more than another member that could take one of them."""
    order = sorted(members)
    owned: dict[str, dict[TopicId, set[int]]] = {m: {} for m in order}
    count = {m: 0 for m in order}
    taken: set[tuple[TopicId, int]] = set()
    for m in order:
        spec = members[m]
        for t, ps in sorted(spec.current.items()):
            if t not in spec.topics or t not in partitions:
                continue
            for p in sorted(ps):
                if p < partitions[t] and (t, p) not in taken:
                    taken.add((t, p))
                    owned[m].setdefault(t, set()).add(p)
                    count[m] += 1
    subscribers = {t: [m for m in order if t in members[m].topics] for t in partitions}
    for t in sorted(partitions):
        for p in range(partitions[t]):
            if (t, p) in taken or not subscribers[t]:
                continue
            m = min(subscribers[t], key=lambda x: (count[x], x))
            owned[m].setdefault(t, set()).add(p)
            count[m] += 1
            taken.add((t, p))
    # Balance: a member two above an eligible one gives it a partition, until none is.
    moved = True
    while moved:
        moved = False
        for donor in sorted(order, key=lambda x: (-count[x], x)):
            for receiver in sorted(order, key=lambda x: (count[x], x)):
                if count[receiver] > count[donor] - 2:
                    break
                movable = [(t, p) for t in sorted(owned[donor]) if t in members[receiver].topics
                           for p in sorted(owned[donor][t])]
                if not movable:
                    continue
                t, p = movable[-1]
                owned[donor][t].discard(p)
                owned[receiver].setdefault(t, set()).add(p)
                count[donor] -= 1
                count[receiver] += 1
                moved = True
                break
            if moved:
                break
    return _finish(owned)


def range_(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]) -> dict[str, Assignment]:
    """Per topic: its subscribers in member-id order take contiguous ranges of partitions."""
    owned: dict[str, dict[TopicId, set[int]]] = {m: {} for m in sorted(members)}
    for t in sorted(partitions):
        subs = [m for m in sorted(members) if t in members[m].topics]
        if not subs:
            continue
        n = partitions[t]
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = per + (1 if i < extra else 0)
            if size:
                owned[m][t] = set(range(start, start + size))
            start += size
    return _finish(owned)


def simple(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]) -> dict[str, Assignment]:
    """Share groups (Kafka's SimpleAssignor, KIP-932): many members may read one partition.
    Each partition goes to one subscriber, balanced and sticky (as :func:`uniform`); then a
    member left without any partition (more members than partitions) shares the eligible
    partition with the fewest readers, the one it had before if it had one."""
    owned: dict[str, dict[TopicId, set[int]]] = {
        m: {t: set(ps) for t, ps in a.items()} for m, a in uniform(members, partitions).items()}
    readers: dict[tuple[TopicId, int], int] = {}
    for by_topic in owned.values():
        for t, ps in by_topic.items():
            for p in ps:
                readers[(t, p)] = readers.get((t, p), 0) + 1
    for m in sorted(members):
        if any(owned.get(m, {}).values()):
            continue
        spec = members[m]
        eligible = [(t, p) for t in sorted(spec.topics) if t in partitions for p in range(partitions[t])]
        if not eligible:
            continue
        before = {(t, p) for t, ps in spec.current.items() for p in ps}
        t, p = min(eligible, key=lambda tp: (readers.get(tp, 0), tp not in before, tp))
        owned.setdefault(m, {}).setdefault(t, set()).add(p)
        readers[(t, p)] = readers.get((t, p), 0) + 1
    return _finish(owned)


#: The server-side assignors by the names clients choose them with (``group.remote.assignor``),
#: and Kafka's class names for them in ``group.consumer.assignors`` / ``group.share.assignors``.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_, "simple": simple}
CLASS_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
               "org.apache.kafka.coordinator.group.api.assignor.UniformAssignor": "uniform",
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
               "org.apache.kafka.coordinator.group.api.assignor.RangeAssignor": "range",
               "org.apache.kafka.coordinator.group.assignor.SimpleAssignor": "simple"}


def assignor_name(configured: str) -> str:
    """A ``group.consumer.assignors`` entry as an assignor name (a short name or Kafka's class)."""
    return CLASS_NAMES.get(configured, configured)


# ---------------------------------------------------------------- streams groups (KIP-1071)

Task = tuple[str, int]                               # (subtopology id, partition)


@dataclass(frozen=True)
class StreamsMemberSpec:
    """What the streams task assignor knows of one member."""
    process_id: str
    active: frozenset[Task] = frozenset()            # its active tasks in the current target (stickiness)
    standby: frozenset[Task] = frozenset()           # its standby tasks in the current target


def sticky_tasks(members: Mapping[str, StreamsMemberSpec], tasks: Mapping[str, int], num_standby: int,
                 stateful: frozenset[str] = frozenset()) -> dict[str, tuple[frozenset[Task], frozenset[Task]]]:
    """Kafka's sticky task assignor, in its rules: every task active on one member, members
    as even as they can be (at most one task apart, and each subtopology's tasks spread over
    them), a task staying where it was active while that keeps the balance; then ``num_standby`` standby replicas of each task, each on a
    process other than the active task's and the other replicas', kept where they were when they
    may be, else on the least loaded member. Returns member id -> (active, standby)."""
    ids = sorted(members)
    if not ids:
        return {}
    all_tasks = [(sub, p) for sub in sorted(tasks) for p in range(tasks[sub])]
    active: dict[str, set[Task]] = {m: set() for m in ids}
    cap = -(-len(all_tasks) // len(ids))
    for sub in sorted(tasks):
        # each subtopology's tasks spread over the members too (so a member's stores stay few)
        sub_cap = -(-tasks[sub] // len(ids))
        per_sub = {m: 0 for m in ids}
        rest = []
        for p in range(tasks[sub]):
            t = (sub, p)
            owner = next((m for m in ids if t in members[m].active and len(active[m]) < cap
                          and per_sub[m] < sub_cap), None)
            if owner is None:
                rest.append(t)
            else:
                active[owner].add(t)
                per_sub[owner] += 1
        for t in rest:
            owner = min(ids, key=lambda m: (per_sub[m], len(active[m]), m))
            active[owner].add(t)
            per_sub[owner] += 1
    # even out what the per-subtopology spread left uneven overall
    while True:
        most = max(ids, key=lambda m: (len(active[m]), m))
        least = min(ids, key=lambda m: (len(active[m]), m))
        if len(active[most]) - len(active[least]) <= 1:
            break
        t = max(active[most] - members[most].active or active[most])
        active[most].discard(t)
        active[least].add(t)
    owner_of = {t: m for m, ts in active.items() for t in ts}
    standby: dict[str, set[Task]] = {m: set() for m in ids}
    for t in [t for t in all_tasks if t[0] in stateful] if num_standby > 0 else ():
        used = {members[owner_of[t]].process_id}
        for _ in range(num_standby):
            candidates = [m for m in ids if members[m].process_id not in used]
            if not candidates:
                break
            m = min(candidates, key=lambda m: (t not in members[m].standby, len(active[m]) + len(standby[m]), m))
            standby[m].add(t)
            used.add(members[m].process_id)
    return {m: (frozenset(active[m]), frozenset(standby[m])) for m in ids}
