"""The broker's storage: partition logs on disk in Kafka's layout. Knows nothing of networks."""

from samsa.storage.config import LogConfig
from samsa.storage.log import AppendInfo, PartitionLog
from samsa.storage.manager import LogManager
from samsa.storage.meta import InconsistentBrokerMetadataError
from samsa.storage.producer_state import ProducerStateManager

__all__ = ["AppendInfo", "InconsistentBrokerMetadataError", "LogConfig", "LogManager", "PartitionLog", "ProducerStateManager"]
