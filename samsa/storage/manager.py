"""All the partition logs of a broker, spread over its log directories."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

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
from samsa.storage.kraft import METADATA_PARTITION_DIR
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
        # The broker epoch a clean shutdown wrote (KIP-966's PreviousBrokerEpoch), or -1.
        self.previous_broker_epoch = -1
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
        self._per_dir: Counter[Path] = Counter()  # partitions per log dir (the placement of a new one)
        self._making: dict[TopicPartition, threading.Lock] = {}  # partitions being created, one thread each
        # Removes deleted partitions' directories (renamed "-delete" first, so a crash leaves
        # nothing half done: the next load finishes them).
        self._remover = ThreadPoolExecutor(1, thread_name_prefix="log-delete")
        self._lock = threading.RLock()
        self.cleaner = Cleaner()
        # KIP-112: a log directory whose files fail (full, I/O errors) goes offline, with the
        # reason; its partitions (known to have been there) answer KAFKA_STORAGE_ERROR while the
        # other directories keep serving. It comes back at the next start if it works again.
        self.offline_dirs: dict[Path, str] = {}
        self.offline_partitions: dict[TopicPartition, Path] = {}
        # Told (dir, reason, partitions that were there) when a directory goes offline; may be
        # called from a worker thread (loading, the cleaner).
        self.on_dir_failure: Callable[[Path, str, list[TopicPartition]], None] | None = None
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                self._mark_offline(d, f"cannot create it: {e}", [])

    # ------------------------------------------------------------------ loading

    def load(self, topic_configs: Callable[[str], LogConfig]) -> None:
        """Open every partition found in the log directories (recovering them unless
        the directory was shut down cleanly), finish interrupted deletions, check and
        write meta.properties."""
        self._check_meta()
        dirs = self.online_dirs
        with ThreadPoolExecutor(max(len(dirs), 1), thread_name_prefix="log-load") as ex:
            per_dir = list(ex.map(lambda d: self._load_dir_or_fail(d, topic_configs), dirs))
        with self._lock:
            for d, loaded in zip(dirs, per_dir):
                for key, plog in loaded:
                    if key in self._logs:
                        for _, opened in (x for loaded2 in per_dir for x in loaded2):
                            opened.close_handles()
                        raise KafkaStorageError(
                            f"partition {key[0]}-{key[1]} is in both {self._dir_of[key]} and {d}"
                        )
                    self._logs[key] = plog
                    self._dir_of[key] = d
                    self._per_dir[d] += 1
        for d in self.online_dirs:
            try:
                (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)  # a crash from now on is unclean
                props = read_meta(d)
                if props is None or (self.cluster_id and not props.get("cluster.id")):
                    write_meta(d, self.broker_id, self.cluster_id)
            except OSError as e:
                self.fail_dir(d, f"cannot write its meta.properties: {e}")
        if not self.online_dirs:
            raise KafkaStorageError(f"all log dirs in {', '.join(map(str, self.log_dirs))} have failed")
        self.checkpoint()

    def _check_meta(self) -> None:
        for d in self.online_dirs:
            try:
                props = read_meta(d)
            except OSError as e:
                self._mark_offline(d, f"cannot read its meta.properties: {e}", [])
                continue
            if props is None:
                continue
            found = check_meta(d, props, self.broker_id, self.cluster_id)
            if self.cluster_id is None and found:
                self.cluster_id = found

    def _load_dir_or_fail(self, dir: Path,
                          topic_configs: Callable[[str], LogConfig]) -> list[tuple[TopicPartition, PartitionLog]]:
        """A directory's logs; if its files fail (a full disk, I/O errors), the directory is taken
        offline and the broker starts with the others, as Kafka's LogManager does."""
        try:
            return self._load_dir(dir, topic_configs)
        except (OSError, KafkaStorageError) as e:
            found = []
            try:
                found = [parsed for name in os.listdir(dir) if (parsed := parse_partition_dir(name)) is not None]
            except OSError:
                pass
            self._mark_offline(dir, f"loading failed: {_cause(e)}", found)
            return []

    def _load_dir(self, dir: Path, topic_configs: Callable[[str], LogConfig]) -> list[tuple[TopicPartition, PartitionLog]]:
        clean = (dir / CLEAN_SHUTDOWN_FILE).exists()
        if clean:
            self.previous_broker_epoch = max(self.previous_broker_epoch, _clean_shutdown_epoch(dir / CLEAN_SHUTDOWN_FILE))
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
            if name == METADATA_PARTITION_DIR:
                continue  # KRaft's metadata partition: its own log (samsa.storage.kraft), not a topic's
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
                except (OSError, KafkaStorageError) as e:  # the directory's files fail: it goes offline
                    log.error("failed to load %s: %s", path, _cause(e))
                    errors.append((path, e))
                except Exception as e:  # noqa: BLE001 - reported together below
                    log.exception("failed to load %s", path)
                    errors.append((path, e))
        if errors:
            for _, plog in loaded:
                plog.close_handles()
            path, e = errors[0]
            raise KafkaStorageError(f"failed to load {len(errors)} partition(s) in {dir}, first {path}: "
                                    f"{_cause(e)}") from e
        return loaded

    # ------------------------------------------------------------------ failed directories

    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def is_offline(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.offline_partitions

    def _mark_offline(self, dir: Path, reason: str, partitions: list[TopicPartition]) -> None:
        with self._lock:
            if dir in self.offline_dirs:
                return
            self.offline_dirs[dir] = reason
            for key in partitions:
                self.offline_partitions[key] = dir
        log.error("Error while accessing log dir %s: %s", dir, reason)
        log.error("Stopped serving replicas in dir %s (%d partition(s)); the other log dirs keep serving: %s",
                  dir, len(partitions), ", ".join(map(str, self.online_dirs)) or "none")
        if self.on_dir_failure is not None:
            self.on_dir_failure(dir, reason, list(partitions))

    def fail_dir(self, dir: Path, reason: str) -> None:
        """Take ``dir`` offline: its logs are closed without writing and forgotten (their
        partitions answer KAFKA_STORAGE_ERROR); the listener hears of it once."""
        with self._lock:
            if dir in self.offline_dirs:
                return
            gone = [key for key, d in self._dir_of.items() if d == dir]
            logs = [self._logs.pop(key) for key in gone]
            for key in gone:
                del self._dir_of[key]
            self._per_dir.pop(dir, None)
        for plog in logs:
            try:
                plog.close_handles()
            except OSError:
                pass
        self._mark_offline(dir, reason, gone)

    @contextmanager
    def io(self, plog: PartitionLog) -> Iterator[None]:
        """Around a write to ``plog``: an I/O error takes its directory offline and comes out as
        KAFKA_STORAGE_ERROR (see :meth:`failed`)."""
        try:
            yield
        except (OSError, KafkaStorageError) as e:
            raise self.failed(plog, e) from e

    def failed(self, plog: PartitionLog, e: BaseException) -> KafkaStorageError:
        """``e`` (an OSError or KafkaStorageError) came from writing ``plog``: take its directory
        offline, unless the log was closed (a shutdown, a deletion) or its directory is already
        offline; the KAFKA_STORAGE_ERROR to raise instead."""
        if isinstance(e, KafkaStorageError) and plog.closed:  # no new failure of its directory
            return KafkaStorageError(f"log {plog.topic}-{plog.partition} is closed")
        key = (plog.topic, plog.partition)
        with self._lock:
            dir = self._dir_of.get(key) if self._logs.get(key) is plog else None
        if dir is None:  # deleted or already taken offline
            return KafkaStorageError(f"{plog.topic}-{plog.partition} is in an offline log directory")
        why = _cause(e)
        self.fail_dir(dir, f"{plog.topic}-{plog.partition}: {why}")
        return KafkaStorageError(f"Error while writing to {plog.topic}-{plog.partition} in dir {dir}: {why}")

    # ------------------------------------------------------------------ partitions

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def create(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """The partition's log, created in the log directory holding the fewest
        partitions (the existing log if there is one). Two threads creating the same
        partition at once (a request and a metadata watch) make it once: the second waits."""
        key = (topic, partition)
        with self._lock:
            existing = self._logs.get(key)
            if existing is not None:
                return existing
            making = self._making.setdefault(key, threading.Lock())
        with making:
            try:
                return self._create(key, config)
            finally:
                with self._lock:
                    if self._making.get(key) is making:
                        del self._making[key]

    def _create(self, key: TopicPartition, config: LogConfig) -> PartitionLog:
        topic, partition = key
        with self._lock:
            existing = self._logs.get(key)
            if existing is not None:
                return existing
            if key in self.offline_partitions:
                raise KafkaStorageError(f"{topic}-{partition} is in the offline log dir "
                                        f"{self.offline_partitions[key]}")
            dirs = self.online_dirs
            if not dirs:
                raise KafkaStorageError("every log dir is offline")
            dir = min(dirs, key=lambda d: self._per_dir[d])
        try:
            plog = PartitionLog.open(dir / partition_dir_name(topic, partition), config, recover=False)
        except (OSError, KafkaStorageError) as e:
            self.fail_dir(dir, f"creating {topic}-{partition} failed: {_cause(e)}")
            raise KafkaStorageError(f"creating {topic}-{partition} in {dir} failed: {_cause(e)}") from e
        with self._lock:
            self._logs[key] = plog
            self._dir_of[key] = dir
            self._per_dir[dir] += 1
            return plog

    def delete(self, topic: str, partition: int) -> None:
        with self._lock:
            key = (topic, partition)
            plog = self._logs.pop(key, None)
            dir = self._dir_of.pop(key, None)
            if dir is not None:
                self._per_dir[dir] -= 1
            self.hw_checkpoints.pop(key, None)
        if plog is not None:
            try:
                target = plog.detach()
            except OSError as e:
                self.fail_dir(dir, f"deleting {topic}-{partition} failed: {e}")
                return
            if target is not None:  # the files go on a worker thread: thousands take seconds
                try:
                    self._remover.submit(shutil.rmtree, target, ignore_errors=True)
                except RuntimeError:  # closed (shutting down): the next load removes the "-delete" directory
                    pass

    def partitions(self) -> Iterable[PartitionLog]:
        return list(self._logs.values())

    def log_dir_of(self, log: PartitionLog) -> Path:
        return self._dir_of[(log.topic, log.partition)]

    # ------------------------------------------------------------------ maintenance

    def run_retention(self, now_ms: int) -> None:
        for plog in self.partitions():
            try:
                with self.io(plog):
                    plog.enforce_retention(now_ms)
            except KafkaStorageError:
                pass  # the directory went offline (logged once there), or the log was deleted meanwhile
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
                with self.io(plog):
                    result = self.cleaner.clean(plog, now_ms)
            except KafkaStorageError:
                continue  # the directory went offline (logged once there), or the log was deleted meanwhile
            except Exception:  # noqa: BLE001 - one bad log must not stop the others
                log.exception("cleaning of %r failed", plog)
                continue
            if result is not None:
                results.append(result)
        return results

    def run_flush(self, now_ms: int) -> None:
        for plog in self.partitions():
            try:
                with self.io(plog):
                    plog.maybe_flush(now_ms)
            except KafkaStorageError:
                pass  # the directory went offline (logged once there)
            except Exception:  # noqa: BLE001
                log.exception("flush of %r failed", plog)

    def checkpoint(self) -> None:
        """Write the recovery points, log start offsets and high watermarks of every
        log directory."""
        with self._lock:
            by_dir: dict[Path, list[tuple[TopicPartition, PartitionLog]]] = {d: [] for d in self.online_dirs}
            for key, plog in self._logs.items():
                by_dir[self._dir_of[key]].append((key, plog))
        for d, logs in by_dir.items():
            try:
                write_offsets(d / RECOVERY_POINT_CHECKPOINT, {k: p.recovery_point for k, p in logs})
                write_offsets(d / LOG_START_OFFSET_CHECKPOINT, {k: p.log_start_offset for k, p in logs})
                write_offsets(d / REPLICATION_OFFSET_CHECKPOINT, {k: p.high_watermark for k, p in logs})
                write_cleaner_offsets(d, {k: p.cleaner_offset for k, p in logs if p.config.compact_enabled})
            except OSError as e:
                self.fail_dir(d, f"writing its checkpoints failed: {e}")

    def close(self, broker_epoch: int = -1) -> None:
        """Close every log, write the checkpoints and mark each directory whose logs
        all closed cleanly with ``.kafka_cleanshutdown`` (holding the KRaft broker epoch, as
        Kafka's does, when there is one)."""
        self._remover.shutdown(wait=False, cancel_futures=True)  # what is left: the next load removes it
        failed_dirs = set()
        for key, plog in list(self._logs.items()):
            try:
                plog.close()
            except OSError as e:
                log.error("closing %r failed: %s", plog, e)
                failed_dirs.add(self._dir_of[key])
            except Exception:  # noqa: BLE001
                log.exception("closing %r failed", plog)
                failed_dirs.add(self._dir_of[key])
        self.checkpoint()
        for d in self.online_dirs:
            if d not in failed_dirs:
                try:
                    write_atomically(d / CLEAN_SHUTDOWN_FILE, b"" if broker_epoch < 0 else
                                     json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode())
                except OSError as e:
                    log.error("cannot mark %s as shut down cleanly: %s", d, e)


def _clean_shutdown_epoch(path: Path) -> int:
    try:
        return int(json.loads(path.read_text() or "{}").get("brokerEpoch", -1))
    except (OSError, ValueError, AttributeError):
        return -1


def _cause(e: BaseException) -> str:
    """The innermost reason: "[Errno 28] No space left on device" rather than a wrapper's words."""
    for _ in range(10):
        if e.__cause__ is None or e.__cause__ is e:
            break
        e = e.__cause__
    return str(e)


__all__ = ["LogManager", "InconsistentBrokerMetadataError"]
