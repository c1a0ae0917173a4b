"""Where a worker keeps source offsets, connector configs and statuses: a file or compacted topics."""
