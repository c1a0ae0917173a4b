"""MirrorMaker 2: MirrorSource, MirrorCheckpoint and MirrorHeartbeat connectors and the ``mm2.properties`` driver."""
