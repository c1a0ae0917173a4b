"""Where ``samsa.server.broker`` imports the group coordinator from today.

The coordinator lives in :mod:`samsa.coordinator.groups`; import it from there. This alias
goes once the broker's import line does (it is being rewritten on the replica-manager branch).
"""

from samsa.coordinator.groups import GroupCoordinator

__all__ = ["GroupCoordinator"]
