"""DescribeLogDirs (API key 35), versions 1-4 (Kafka 4.0's range, the release Kompakt advertises).

Behaviour (Kafka's ReplicaManager.describeLogDirs on one node): one result per configured log dir
(`log.dirs`, absolute paths), in configuration order:
* an online dir: error 0 and its partitions, filtered by the request (null topics: every partition
  in the dir; a named topic lists only the requested partitions it hosts, unknown ones are left
  out): partition_size = the log's size in bytes (every segment), offset_lag = max(high watermark
  - log end offset, 0) (0 on a single node), is_future_key false; a partition moving into the dir
  (AlterReplicaLogDirs, handlers/alter_replica_log_dirs.py) is listed there too with
  is_future_key true, its future log's size, and offset_lag = the current log's end offset - the
  future's (Kafka's getLogEndOffsetLag), until the swap;
* an offline dir (unusable at start-up or failed by an I/O error, LogManager.handle_io_error):
  KAFKA_STORAGE_ERROR and no topics;
* v4+: total_bytes and usable_bytes of the volume (statvfs; -1 when it cannot be read).
The statvfs calls run in a worker thread: a failing disk may hang them. Authorization: CLUSTER
DESCRIBE, else no results (v3+: CLUSTER_AUTHORIZATION_FAILED at the top level), as Kafka answers.

Version notes: v0 was removed in Kafka 4.0 (kafka-python's schema starts at 1); v1 is the
baseline; v2 flexible; v3 adds the top-level error_code; v4 total/usable bytes; v5 (Kafka 4.3; not served while Kompakt advertises 4.0, the code stays) is_cordoned
(always false: Kompakt does not cordon dirs). Java admin clients send v4/v5, kafka-python v4/v5;
librdkafka (confluent-kafka) and aiokafka do not send DescribeLogDirs.
"""
from __future__ import annotations

import asyncio
import os

from kafka.protocol.admin import DescribeLogDirsResponse

from kompakt.broker.security.acl import Op
from kompakt.protocol.errors import ErrorCode

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 4

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition


def _volume(d: str) -> tuple[int, int]:
    """(total bytes, usable bytes) of the filesystem holding `d`; (-1, -1) if unreadable."""
    try:
        st = os.statvfs(d)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _wanted(request):
    """None for every partition, else {topic: set(partitions)}."""
    if request.topics is None:
        return None
    return {t.topic: set(t.partitions) for t in request.topics}


def describe(log_manager, configured: list[str], wanted) -> list:
    offline = {os.path.abspath(d) for d in log_manager.offline_dirs}
    by_dir: dict[str, dict[str, list]] = {}
    current = log_manager.all_logs()
    logs = [(tp, plog, False) for tp, plog in current.items()]
    logs += [(tp, plog, True) for tp, plog in log_manager.future_logs().items() if not plog.offline]
    for tp, plog, future in sorted(logs, key=lambda x: (x[0], x[2])):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        d = os.path.dirname(os.path.abspath(plog.dir))
        size = sum(s.size for s in plog.segments)
        if not future:
            lag = max(0, plog.high_watermark - plog.log_end_offset)
        elif tp in current:
            lag = current[tp].log_end_offset - plog.log_end_offset
        else:
            lag = -1   # Kafka's INVALID_OFFSET_LAG: no current log to compare with
        by_dir.setdefault(d, {}).setdefault(tp.topic, []).append(
            _Partition(partition_index=tp.partition, partition_size=size, offset_lag=lag, is_future_key=future))
    results = []
    for d in configured:
        d = os.path.abspath(d)
        total, usable = _volume(d)
        if d in offline:
            results.append(_Result(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR), log_dir=d, topics=[],
                                   total_bytes=total, usable_bytes=usable, is_cordoned=False))
            continue
        topics = [_Topic(name=name, partitions=parts) for name, parts in sorted(by_dir.get(d, {}).items())]
        results.append(_Result(error_code=0, log_dir=d, topics=topics, total_bytes=total,
                               usable_bytes=usable, is_cordoned=False))
    return results


async def handle(ctx, request) -> DescribeLogDirsResponse:
    if not ctx.authorize_cluster(Op.DESCRIBE):
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                       results=[])
    results = await asyncio.to_thread(describe, ctx.log_manager, ctx.config.log_dirs, _wanted(request))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)
