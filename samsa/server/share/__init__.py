"""Share groups on the partition leaders (KIP-932): share partitions (the in-flight window of a
group on a topic partition), their manager, and share sessions. The ShareFetch and
ShareAcknowledge handlers (``server/handlers/share``) use :class:`SharePartitionManager`."""

from samsa.server.share.manager import SharePartitionManager

__all__ = ["SharePartitionManager"]
