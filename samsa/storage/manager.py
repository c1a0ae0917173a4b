"""All the partition logs of a broker, spread over its log directories."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from samsa.protocol.errors import KafkaStorageError
from samsa.storage.checkpoint import CheckpointError, read_offsets, write_offsets
from samsa.storage.cleaner import CleanResult, Cleaner, read_cleaner_offsets, write_cleaner_offsets
from samsa.storage.config import LogConfig
from samsa.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    DELETE_DIR_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    partition_dir_name,
    parse_partition_dir,
    write_atomically,
)
from samsa.storage.log import PartitionLog
from samsa.storage.meta import InconsistentBrokerMetadataError, check_meta, read_meta, write_meta

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        return read_offsets(path)
    except CheckpointError as e:
        log.warning("ignoring %s (%s): partitions there are recovered from scratch", path, e)
        return {}


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        *,
        default_config: LogConfig,
        recovery_threads_per_dir: int = 1,
        broker_id: int = 0,
        cluster_id: str | None = None,
    ):
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        if len({d.resolve() for d in self.log_dirs}) != len(self.log_dirs):
            raise ValueError("duplicate log directories")
        self.default_config = default_config
        self.recovery_threads_per_dir = max(1, recovery_threads_per_dir)
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        # High watermarks found in replication-offset-checkpoint at load, for replication.
        self.hw_checkpoints: dict[TopicPartition, int] = {}
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._lock = threading.RLock()
        self.cleaner = Cleaner()
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ loading

    def load(self, topic_configs: Callable[[str], LogConfig]) -> None:
        """Open every partition found in the log directories (recovering them unless
        the directory was shut down cleanly), finish interrupted deletions, check and
        write meta.properties."""
        self._check_meta()
        with ThreadPoolExecutor(len(self.log_dirs), thread_name_prefix="log-load") as ex:
            per_dir = list(ex.map(lambda d: self._load_dir(d, topic_configs), self.log_dirs))
        with self._lock:
            for d, loaded in zip(self.log_dirs, per_dir):
                for key, plog in loaded:
                    if key in self._logs:
                        for _, opened in (x for loaded2 in per_dir for x in loaded2):
                            opened.close_handles()
                        raise KafkaStorageError(
                            f"partition {key[0]}-{key[1]} is in both {self._dir_of[key]} and {d}"
                        )
                    self._logs[key] = plog
                    self._dir_of[key] = d
        for d in self.log_dirs:
            (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)  # a crash from now on is unclean
            props = read_meta(d)
            if props is None or (self.cluster_id and not props.get("cluster.id")):
                write_meta(d, self.broker_id, self.cluster_id)
        self.checkpoint()

    def _check_meta(self) -> None:
        for d in self.log_dirs:
            props = read_meta(d)
            if props is None:
                continue
            found = check_meta(d, props, self.broker_id, self.cluster_id)
            if self.cluster_id is None and found:
                self.cluster_id = found

    def _load_dir(self, dir: Path, topic_configs: Callable[[str], LogConfig]) -> list[tuple[TopicPartition, PartitionLog]]:
        clean = (dir / CLEAN_SHUTDOWN_FILE).exists()
        recovery_points = _read_checkpoint(dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = _read_checkpoint(dir / LOG_START_OFFSET_CHECKPOINT)
        cleaner_offsets = read_cleaner_offsets(dir)
        self.hw_checkpoints.update(_read_checkpoint(dir / REPLICATION_OFFSET_CHECKPOINT))
        todo: list[tuple[TopicPartition, Path]] = []
        for name in sorted(os.listdir(dir)):
            path = dir / name
            if not path.is_dir():
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("finishing the deletion of %s", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_partition_dir(name)
            if parsed is None:
                log.warning("skipping %s: not a <topic>-<partition> directory", path)
                continue
            todo.append((parsed, path))
        if not clean and todo:
            log.info("%s was not shut down cleanly: recovering %d partitions", dir, len(todo))

        def open_one(key: TopicPartition, path: Path) -> PartitionLog:
            try:
                config = topic_configs(key[0]) or self.default_config
            except KeyError:
                config = self.default_config
            plog = PartitionLog.open(
                path, config, not clean,
                recovery_point=recovery_points.get(key, 0),
                log_start_offset=start_offsets.get(key, 0),
            )
            plog.cleaner_offset = cleaner_offsets.get(key, 0)
            return plog

        loaded: list[tuple[TopicPartition, PartitionLog]] = []
        errors = []
        with ThreadPoolExecutor(self.recovery_threads_per_dir, thread_name_prefix="log-recovery") as ex:
            futures = [(key, path, ex.submit(open_one, key, path)) for key, path in todo]
            for key, path, fut in futures:
                try:
                    loaded.append((key, fut.result()))
                except Exception as e:  # noqa: BLE001 - reported together below
                    log.exception("failed to load %s", path)
                    errors.append((path, e))
        if errors:
            for _, plog in loaded:
                plog.close_handles()
            path, e = errors[0]
            raise KafkaStorageError(f"failed to load {len(errors)} partition(s) in {dir}, first {path}: {e}") from e
        return loaded

    # ------------------------------------------------------------------ partitions

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def create(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """The partition's log, created in the log directory holding the fewest
        partitions (the existing log if there is one)."""
        with self._lock:
            key = (topic, partition)
            existing = self._logs.get(key)
            if existing is not None:
                return existing
            counts = {d: 0 for d in self.log_dirs}
            for d in self._dir_of.values():
                counts[d] += 1
            dir = min(self.log_dirs, key=lambda d: counts[d])
            plog = PartitionLog.open(dir / partition_dir_name(topic, partition), config, recover=False)
            self._logs[key] = plog
            self._dir_of[key] = dir
            return plog

    def delete(self, topic: str, partition: int) -> None:
        with self._lock:
            key = (topic, partition)
            plog = self._logs.pop(key, None)
            self._dir_of.pop(key, None)
            self.hw_checkpoints.pop(key, None)
        if plog is not None:
            plog.delete()

    def partitions(self) -> Iterable[PartitionLog]:
        return list(self._logs.values())

    def log_dir_of(self, log: PartitionLog) -> Path:
        return self._dir_of[(log.topic, log.partition)]

    # ------------------------------------------------------------------ maintenance

    def run_retention(self, now_ms: int) -> None:
        for plog in self.partitions():
            try:
                plog.enforce_retention(now_ms)
            except KafkaStorageError as e:
                if "closed" not in str(e):
                    log.exception("retention of %r failed", plog)
            except Exception:  # noqa: BLE001 - one bad log must not stop the others
                log.exception("retention of %r failed", plog)

    def run_cleaner(self, now_ms: int) -> list[CleanResult]:
        """Compact the partitions whose cleanup.policy holds "compact" and that are due
        (safe from a worker thread while the event loop appends). Returns what was done."""
        results = []
        for plog in self.partitions():
            if not plog.config.compact_enabled:
                continue
            try:
                result = self.cleaner.clean(plog, now_ms)
            except KafkaStorageError as e:
                if "closed" not in str(e):
                    log.exception("cleaning of %r failed", plog)
                continue
            except Exception:  # noqa: BLE001 - one bad log must not stop the others
                log.exception("cleaning of %r failed", plog)
                continue
            if result is not None:
                results.append(result)
        return results

    def run_flush(self, now_ms: int) -> None:
        for plog in self.partitions():
            try:
                plog.maybe_flush(now_ms)
            except Exception:  # noqa: BLE001
                log.exception("flush of %r failed", plog)

    def checkpoint(self) -> None:
        """Write the recovery points, log start offsets and high watermarks of every
        log directory."""
        with self._lock:
            by_dir: dict[Path, list[tuple[TopicPartition, PartitionLog]]] = {d: [] for d in self.log_dirs}
            for key, plog in self._logs.items():
                by_dir[self._dir_of[key]].append((key, plog))
        for d, logs in by_dir.items():
            write_offsets(d / RECOVERY_POINT_CHECKPOINT, {k: p.recovery_point for k, p in logs})
            write_offsets(d / LOG_START_OFFSET_CHECKPOINT, {k: p.log_start_offset for k, p in logs})
            write_offsets(d / REPLICATION_OFFSET_CHECKPOINT, {k: p.high_watermark for k, p in logs})
            write_cleaner_offsets(d, {k: p.cleaner_offset for k, p in logs if p.config.compact_enabled})

    def close(self) -> None:
        """Close every log, write the checkpoints and mark each directory whose logs
        all closed cleanly with ``.kafka_cleanshutdown``."""
        failed_dirs = set()
        for key, plog in list(self._logs.items()):
            try:
                plog.close()
            except Exception:  # noqa: BLE001
                log.exception("closing %r failed", plog)
                failed_dirs.add(self._dir_of[key])
        self.checkpoint()
        for d in self.log_dirs:
            if d not in failed_dirs:
                write_atomically(d / CLEAN_SHUTDOWN_FILE, b"")


__all__ = ["LogManager", "InconsistentBrokerMetadataError"]
