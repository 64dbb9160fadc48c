"""Latency of the admin and producer-id APIs through `kompakt serve` (one connection, serial).

    python bench/bench_admin_apis.py [--topics 100]

Starts a broker on free ports in a temp dir, then times request -> response on one socket with
kafka-python's schema classes for the bytes: CreateTopics (1 and 10 partitions), DescribeConfigs
(a topic, every key with synonyms), IncrementalAlterConfigs (one key, persisted and applied),
DeleteRecords, InitProducerId, DeleteTopics. Prints a Markdown table (p50/p99 in ms).
Topic creation and alters are bound by the storage's fsyncs (topic store, partition dirs), which
run off the event loop; InitProducerId fsyncs once per 1000 ids.
"""
from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

from kafka.protocol.admin.configs import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.admin.topics import (CreateTopicsRequest, CreateTopicsResponse, DeleteRecordsRequest,
                                         DeleteRecordsResponse, DeleteTopicsRequest, DeleteTopicsResponse)
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [sys.executable, "-m", "kompakt", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={data_dir}", "--override", "metrics.port=0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=data_dir)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("broker did not start")


class Client:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.correlation = 0

    def call(self, request, version: int, response_cls):
        self.correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation, client_id="bench")
        started = time.perf_counter()
        self.sock.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", self.sock.recv(4, socket.MSG_WAITALL))[0]
        body = self.sock.recv(size, socket.MSG_WAITALL)
        elapsed = time.perf_counter() - started
        return response_cls.decode(body, version=version, header=True), elapsed


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2] * 1000, ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=100)
    args = parser.parse_args()
    n = args.topics
    CT, D, I = CreateTopicsRequest.CreatableTopic, DescribeConfigsRequest, IncrementalAlterConfigsRequest
    DR = DeleteRecordsRequest.DeleteRecordsTopic
    rows = []
    with tempfile.TemporaryDirectory() as data_dir:
        proc, port = start_broker(data_dir)
        try:
            c = Client(port)

            def timed(label, make, version, response_cls, count):
                samples = [c.call(make(i), version, response_cls)[1] for i in range(count)]
                rows.append((label, count, *percentiles(samples)))

            timed("CreateTopics, 1 partition", lambda i: CreateTopicsRequest(
                topics=[CT(name=f"a{i}", num_partitions=1, replication_factor=-1, assignments=[], configs=[])],
                timeout_ms=30000, validate_only=False), 7, CreateTopicsResponse, n)
            timed("CreateTopics, 10 partitions", lambda i: CreateTopicsRequest(
                topics=[CT(name=f"b{i}", num_partitions=10, replication_factor=-1, assignments=[], configs=[])],
                timeout_ms=30000, validate_only=False), 7, CreateTopicsResponse, n // 2)
            timed("CreateTopics, validate_only", lambda i: CreateTopicsRequest(
                topics=[CT(name=f"v{i}", num_partitions=10, replication_factor=-1, assignments=[], configs=[])],
                timeout_ms=30000, validate_only=True), 7, CreateTopicsResponse, n)
            timed("DescribeConfigs, topic, all keys + synonyms", lambda i: D(
                resources=[D.DescribeConfigsResource(resource_type=2, resource_name=f"a{i % n}",
                                                     configuration_keys=None)],
                include_synonyms=True, include_documentation=False), 4, DescribeConfigsResponse, 3 * n)
            timed("IncrementalAlterConfigs, SET retention.ms", lambda i: I(resources=[I.AlterConfigsResource(
                resource_type=2, resource_name=f"a{i % n}", configs=[I.AlterConfigsResource.AlterableConfig(
                    name="retention.ms", config_operation=0, value=str(3_600_000 + i))])],
                validate_only=False), 1, IncrementalAlterConfigsResponse, n)
            timed("DeleteRecords, offset -1 (empty log)", lambda i: DeleteRecordsRequest(
                topics=[DR(name=f"a{i % n}", partitions=[DR.DeleteRecordsPartition(partition_index=0, offset=-1)])],
                timeout_ms=1000), 2, DeleteRecordsResponse, n)
            timed("InitProducerId", lambda i: InitProducerIdRequest(
                transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
                4, InitProducerIdResponse, 20 * n)
            timed("DeleteTopics, 1 partition", lambda i: DeleteTopicsRequest(
                topic_names=[f"a{i}"], timeout_ms=30000), 5, DeleteTopicsResponse, n)
        finally:
            proc.terminate()
            proc.wait(30)
    load = os.getloadavg()[0]
    print(f"| request (one connection, serial; load average {load:.1f} on {os.cpu_count()} cpus) "
          f"| requests | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for label, count, p50, p99 in rows:
        print(f"| {label} | {count} | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    main()
