"""The broker: owns the storage, cleaner, groups, metrics and the listeners, and their lifecycle.

Role: `Broker(config)` constructs every component by its contract name; `await start()` brings
them up in dependency order and binds the listeners last, so a client that can connect is served
by loaded logs; `await stop()` takes them down in reverse:

  start                                        stop (SIGTERM / SIGINT)
  0. admin HTTP on metrics.port (if != 0):     1. ready = False; close the listening sockets
     /health 200, /ready 503 until step 7         and the TLS handshakes under way
                                               2. parked fetches answer now; each connection:
  1. LogManager.startup() (thread: recovery)      stop reading, answer what it read, close;
                                                  after shutdown.timeout.ms abort; then the
                                                  TLS encryption threads stop
  2. append_listener -> fetch long-poll wake   3. admin HTTP stops
  3. LogManager.start_background(loop)         4. transactions and groups stop, cleaner shuts
  4. LogCleaner.start (log.cleaner.enable)        down, LogManager.stop_background()
  5. GroupCoordinator.start() (returns at      5. LogManager.shutdown() (thread): flush,
     once: __consumer_offsets loads in the        checkpoints, clean-shutdown marker, unlock
     background, group APIs answer
     COORDINATOR_LOAD_IN_PROGRESS meanwhile),
     TransactionCoordinator.start() (reloads
     __transaction_state, finishes Prepare*)
  6. bind listeners (asyncio.Protocol; TLS:
     network/tls_transport.py over TCP)
  7. ready = True; compile the served codecs
     on the loop between requests

Invariants: at most one `start()`; `stop()` is idempotent and safe after a failed start (it stops
whatever did start). Every connection is in `self.connections` until its transport is gone.
"""
from __future__ import annotations

import asyncio
import base64
import gc
import logging
import socket
import time
import uuid

from kompakt.broker.network.connection import KafkaConnection
from kompakt.broker.network.dispatch import Dispatcher
from kompakt.broker.network.tls_transport import tls_protocol_factory
from kompakt.broker.fetch.session import FetchSessionCache
from kompakt.broker.fetch.wait import FetchWaiters
from kompakt.broker.security.scram_store import ScramStore
from kompakt.broker.security.listeners import parse_listener  # noqa: F401 - re-exported (tests, tools)
from kompakt.broker.security.setup import ListenerSecurity, build_authorizer, build_listeners
from kompakt.config.broker_config import BrokerConfig, ConfigError
from kompakt.storage.worker_threads import WorkerThreads, os_thread_namer, threads_beside_the_loop

log = logging.getLogger(__name__)

TLS_WORKERS = 4                              # TLS encryption threads at most (one per CPU beside the loop's)

def root_files() -> set[str]:
    """Every file the broker keeps in a log dir's root, so the LogManager's start-up scan knows
    them (LogManager.owned_root_files) instead of warning about a foreign file at every start:
    the state files (metadata/), the producer id block (txn/), the ACLs and SCRAM credentials
    (security/). Gathered here, where every room is known, so that none of them imports another
    for a file name."""
    from kompakt.broker.metadata.state_files import STATE_FILES
    from kompakt.broker.security.acl_store import ACL_FILE
    from kompakt.broker.security.scram_store import SCRAM_FILE
    from kompakt.broker.txn.producer_ids import FILE_NAME as PRODUCER_ID_BLOCK
    return set(STATE_FILES) | {PRODUCER_ID_BLOCK, ACL_FILE, SCRAM_FILE}


def _new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    def __init__(self, config: BrokerConfig, *, time_source=time, embedded: bool = False):
        self.config = config
        # embedded: running inside another program's process (kompakt.testing): leave process-wide
        # state alone (no gc.freeze of the host's objects) and spend no CPU compiling codecs ahead
        self.embedded = embedded
        self.time = time_source
        self.node_id = config.node_id
        # Dynamic broker configs first: every component below reads its sizes from `config`, the
        # listeners a keystore rotated at run time (listener.name.<l>.ssl.keystore.*).
        from kompakt.broker.metadata.state_files import BROKER_CONFIGS_FILE, StateFile
        from kompakt.config.dynamic import DynamicBrokerConfig
        self.dynamic_config = DynamicBrokerConfig(config, StateFile(config.log_dirs[0], BROKER_CONFIGS_FILE))
        self.dynamic_config.load()
        # listeners with their security protocol, TLS contexts and SASL settings (security/setup.py);
        # bad TLS/SASL settings fail here, before anything touches the log dirs
        self.listeners: list[ListenerSecurity] = build_listeners(config)
        advertised = config["advertised.listeners"]
        self.advertised_listeners = [parse_listener(s) for s in advertised] if advertised else None
        self.ready = False
        self.connections: set[KafkaConnection] = set()
        from kompakt.broker.network.limits import Limits
        self.limits = Limits(config)
        self.fetch_waiters = FetchWaiters()
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.cluster_id: str | None = config["cluster.id"]
        self.advertised: tuple[str, int] | None = None
        self.bound: list[tuple[str, str, int]] = []   # (listener name, host, actual port)
        self.advertised_by_listener: dict[str, tuple[str, int]] = {}


        from kompakt.broker.observability.metrics import Metrics
        self.metrics = Metrics(partition_labels=config["metrics.partition.labels"])

        from kompakt.storage.log_manager import LogManager
        self.log_manager = LogManager(config, time=time_source)
        self.log_manager.owned_root_files.update(root_files())

        self.cleaner = None
        if config["log.cleaner.enable"]:
            from kompakt.cleaner import LogCleaner
            self.cleaner = LogCleaner(config, self.log_manager, time=time_source)
            self.log_manager.cleaner = self.cleaner

        from kompakt.broker.features.levels import FeatureLevels
        from kompakt.broker.metadata.state_files import FEATURES_FILE
        self.features = FeatureLevels(StateFile(config.log_dirs[0], FEATURES_FILE))
        self.features.load()
        from kompakt.broker.groups.group_configs import GroupConfigs
        from kompakt.broker.metadata.state_files import GROUP_CONFIGS_FILE
        self.group_configs = GroupConfigs(config, StateFile(config.log_dirs[0], GROUP_CONFIGS_FILE))
        self.group_configs.load()
        from kompakt.broker.groups.coordinator import GroupCoordinator
        self.groups = GroupCoordinator(self)

        from kompakt.broker.txn import TransactionCoordinator
        self.txn = TransactionCoordinator(self)

        self.authorizer = None               # security.authorizer.Authorizer once logs are loaded
        self.scram_store = None              # security.scram_store.ScramStore once logs are loaded

        from kompakt.broker.groups.tombstone_guard import TombstoneGuard
        self.tombstone_guard = TombstoneGuard(self.groups, time_ms=lambda: int(time_source.time() * 1000))
        if self.cleaner is not None:
            self.cleaner.group_horizon = self.tombstone_guard.horizon

        from kompakt.broker.quotas.manager import ClientQuotas
        from kompakt.broker.metadata.state_files import CLIENT_QUOTAS_FILE
        self.quotas = ClientQuotas(config, StateFile(config.log_dirs[0], CLIENT_QUOTAS_FILE))
        self.quotas.load()

        from kompakt.broker.metadata.reconfigure import register_reconfigurables
        register_reconfigurables(self)
        from kompakt.broker.security import tls_reload
        tls_reload.register(self)            # listener certificates follow their dynamic configs
        self.dispatcher = Dispatcher(self)
        self._servers: list[asyncio.AbstractServer] = []
        self._tls_handshakes: set = set()    # TLS connections still in their handshake (closed by stop)
        self.tls_workers: WorkerThreads | None = None   # made at bind when a TLS listener exists
        self._admin = None
        self._started = {"logs": False, "background": False, "cleaner": False, "groups": False, "txn": False}
        self._reaper: asyncio.Task | None = None
        self._lag_probe: asyncio.Task | None = None
        self._warmer: asyncio.Task | None = None
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        self.fetch_waiters.bind(loop)
        from kompakt.broker.observability.loop_lag import probe
        self._lag_probe = loop.create_task(probe(self.metrics), name="kompakt-loop-lag")
        if self.config["metrics.port"] != 0:
            # first, so /health answers and /ready says 503 while a long recovery runs
            from kompakt.broker.admin.app import start_admin
            self._admin = start_admin(self)
            await self._admin
        await asyncio.to_thread(self.log_manager.startup)
        self._started["logs"] = True
        self.cluster_id = getattr(self.log_manager, "cluster_id", None) or self.cluster_id or _new_cluster_id()
        self.authorizer = await asyncio.to_thread(build_authorizer, self.config)
        self.scram_store = await asyncio.to_thread(ScramStore, self.config.log_dirs[0])
        for sec in self.listeners:
            sec.bind_scram_store(self.scram_store)
        self.log_manager.append_listener = self.fetch_waiters.notify
        self.log_manager.start_background(loop)
        self._started["background"] = True
        if self.cleaner is not None:
            self.cleaner.start(loop)
            self._started["cleaner"] = True
        await self.groups.start(background=True)   # group APIs: COORDINATOR_LOAD_IN_PROGRESS until loaded
        self._started["groups"] = True
        await self.txn.start()
        self._started["txn"] = True
        await self._bind(loop)
        self.metrics.set_info(node_id=self.node_id, cluster_id=self.cluster_id)
        idle_ms = self.config["connections.max.idle.ms"]
        if idle_ms and idle_ms > 0:
            self._reaper = loop.create_task(self._reap_idle(idle_ms / 1000.0), name="kompakt-idle-reaper")
        if not self.embedded:
            # (embedded, e.g. a test's broker: codecs compile on first use, only those the test
            # needs, and the host process's objects are not frozen)
            self._warmer = loop.create_task(self.dispatcher.warm_in_background(), name="kompakt-codec-warm-up")
            # Everything alive once the codecs exist lives as long as the process: keep it out of the
            # cyclic GC's scans so collections stay short on the request path.
            self._warmer.add_done_callback(lambda _: gc.freeze())
        self.ready = True
        # every listener's advertised address: an operator checks these against advertised.listeners
        advertised = ", ".join(f"{h}:{p}" for h, p in self.advertised_by_listener.values()) \
            if len(self.advertised_by_listener) == 1 else \
            ", ".join(f"{n} {h}:{p}" for n, (h, p) in self.advertised_by_listener.items())
        log.info("Kompakt broker %s ready in %.2fs: listening on %s, advertising %s, cluster id %s, "
                 "%d logs in %s", self.node_id, time.monotonic() - t0,
                 ", ".join(f"{n}://{h or '0.0.0.0'}:{p} ({self._protocol_of(n)})" for n, h, p in self.bound),
                 advertised, self.cluster_id, len(self.log_manager.all_logs()),
                 ",".join(self.config.log_dirs))

    async def _bind(self, loop) -> None:
        max_bytes = self.config["socket.request.max.bytes"]
        max_in_flight = self.config["queued.max.requests"]

        def factory_for(sec: ListenerSecurity):
            def factory():
                return KafkaConnection(self, self.dispatcher, max_request_bytes=max_bytes,
                                       max_in_flight=max_in_flight, listener=sec.name, security=sec)
            return factory

        for sec in self.listeners:
            name, host, port = sec.name, sec.listener.host, sec.listener.port
            factory = factory_for(sec)
            if sec.ssl_context is not None:
                # TLS on our side of a plain TCP socket (network/tls_transport.py): the handshake
                # before the connection sees a byte (a failed one never reaches KafkaConnection),
                # large answers encrypted and large requests decrypted on the tls_workers threads
                factory = tls_protocol_factory(sec, factory, self._tls_workers(), self._tls_handshakes)
            try:
                server = await loop.create_server(factory, host or None, port, reuse_address=True, backlog=1024)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen on {name}://{host}:{port} ({exc.strerror}); "
                                         f"change `listeners` or stop what holds the port") from exc
            self._servers.append(server)
            actual = server.sockets[0].getsockname()[1]
            self.bound.append((name, host, actual))
            self.advertised_by_listener[name] = self._advertise(name, host, actual)
        self.advertised = self.advertised_by_listener[self.bound[0][0]]

    def _tls_workers(self) -> WorkerThreads | None:
        """The threads that encrypt large TLS answers and decrypt large TLS requests, shared by every
        TLS connection: one per CPU beside the loop's; None on a broker held to one CPU (taskset),
        where a thread could only take turns with the loop."""
        threads = threads_beside_the_loop(TLS_WORKERS)
        if self.tls_workers is None and threads:
            self.tls_workers = WorkerThreads(threads, "kompakt-tls", initializer=os_thread_namer(b"kompakt-tls"))
        return self.tls_workers

    def _advertise(self, name: str, host: str, port: int) -> tuple[str, int]:
        """What Metadata tells clients that came in through listener `name`: its entry in
        advertised.listeners (by name; the first entry if none matches), else the bound address,
        with a wildcard host replaced by this machine's name (as Kafka does)."""
        if self.advertised_listeners:
            match = [a for a in self.advertised_listeners if a[0] == name] or self.advertised_listeners
            _, ahost, aport = match[0]
            return ahost or socket.gethostname(), aport or port
        return (host if host not in ("", "0.0.0.0", "::") else socket.gethostname()), port

    def _protocol_of(self, name: str) -> str:
        return next(sec.listener.protocol for sec in self.listeners if sec.name == name)

    def advertised_for(self, listener: str | None) -> tuple[str, int]:
        return self.advertised_by_listener.get(listener, self.advertised)

    async def _reap_idle(self, idle_s: float) -> None:
        while True:
            await asyncio.sleep(min(idle_s / 2, 30.0))
            cutoff = time.monotonic() - idle_s
            for conn in list(self.connections):
                if conn.last_active < cutoff and not conn.in_flight:
                    log.info("closing connection from %s: idle longer than connections.max.idle.ms", conn.peer)
                    conn.close_when_idle()

    @property
    def stopping(self) -> bool:
        """stop() has begun: new connections are refused (KafkaConnection.connection_made)."""
        return self._stopping

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.ready = False
        log.info("Kompakt broker %s shutting down", self.node_id)
        for server in self._servers:
            server.close()
        for handshaking in list(self._tls_handshakes):   # not connections yet: the drain would not see them
            handshaking.abort_handshake()
        for task in (self._reaper, self._warmer, self._lag_probe):
            if task is not None:
                task.cancel()
        self.fetch_waiters.close()           # parked fetches answer now, not at their max_wait
        if self._started["groups"]:
            self.groups.release_parked()     # parked JoinGroup/SyncGroup too, not at a rebalance's end
        await self._drain_connections(self.config["shutdown.timeout.ms"] / 1000.0)
        if self.tls_workers is not None:     # connections are closed: a TLS job left is dropped
            self.tls_workers.shutdown(wait=True, cancel_futures=True)
        if self._admin is not None:
            from kompakt.broker.admin.app import stop_admin
            await _logged(stop_admin(self._admin), "stopping the admin API")
        if self._started["txn"]:
            await _logged(self.txn.stop(), "stopping the transaction coordinator")
        if self._started["groups"]:
            await _logged(self.groups.stop(), "stopping the group coordinator")
        if self._started["cleaner"]:
            await _logged(self.cleaner.shutdown(), "stopping the log cleaner")
        if self._started["background"]:
            await _logged(self.log_manager.stop_background(), "stopping log background tasks")
        if self._started["logs"]:
            await _logged(asyncio.to_thread(self.log_manager.shutdown), "shutting down the log manager")
        for server in self._servers:
            await server.wait_closed()
        log.info("Kompakt broker %s stopped", self.node_id)

    async def _drain_connections(self, timeout: float) -> None:
        conns = list(self.connections)
        for conn in conns:
            conn.close_when_idle()
        if conns:
            done, pending = await asyncio.wait([conn.closed for conn in conns], timeout=timeout)
            if pending:
                log.warning("aborting %d connections still busy after shutdown.timeout.ms", len(pending))
                for conn in conns:
                    if not conn.closed.done():
                        conn.abort()


async def _logged(awaitable, what: str) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("error while %s", what)
