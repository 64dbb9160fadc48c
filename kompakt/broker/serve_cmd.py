"""`kompakt serve`: run the broker until SIGTERM or SIGINT.

    kompakt serve [--config server.properties] [--override key=value ...]
                  [--log-format text|json] [--log-level INFO]

Configuration layers, lowest first: Kafka's defaults with an embedded single-node default
(listener PLAINTEXT://127.0.0.1:9092, log.dirs ./kompakt-data), the properties file
(`--config` or $KOMPAKT_CONFIG), KOMPAKT_* environment variables (KOMPAKT_LOG_DIRS=/data ->
log.dirs), then `--override` pairs (BrokerConfig.load).

Exit codes: 0 after a graceful shutdown, 1 when start-up fails (bad config, port in use, log dir
locked by another broker) with the reason on stderr, 2 for a bad argument (argparse's code; a
bad --log-level too), 130 on a second signal during shutdown.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

log = logging.getLogger("kompakt.broker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", metavar="FILE",
                        help="server.properties file (default: $KOMPAKT_CONFIG, else built-in defaults)")
    parser.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                        help="set a broker configuration key; repeatable (e.g. --override log.dirs=/data)")
    parser.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("KOMPAKT_LOG_FORMAT", "text"),
                        help="log line format (default text)")
    parser.add_argument("--log-level", default=os.environ.get("KOMPAKT_LOG_LEVEL", "INFO"),
                        help="DEBUG, INFO, WARNING, ERROR (default INFO)")


def _configure_logging(level: str, fmt: str) -> None:
    from kompakt.broker.observability.logging_setup import configure
    configure(level, fmt)


def raise_fd_limit() -> None:
    """Raise the soft limit on open files to the hard limit, as the JVM does for Kafka at start
    (HotSpot's MaxFDLimit): a broker holds one descriptor per written segment and connection."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log.debug("open files limit raised from %s to %s", soft, hard)
    except (ImportError, ValueError, OSError) as exc:  # not on this platform, or not allowed
        log.debug("open files limit left as it is: %s", exc)


def run(args: argparse.Namespace) -> int:
    try:
        _configure_logging(args.log_level, args.log_format)
    except ValueError as exc:   # --log-level LOUD, or a bad KOMPAKT_LOG_LEVEL / KOMPAKT_LOG_FORMAT
        print(f"kompakt serve: {exc}", file=sys.stderr)
        return 2
    raise_fd_limit()
    from kompakt.config.broker_config import BrokerConfig, ConfigError
    try:
        # KOMPAKT_CONFIG names the file; it is not itself a config key (BrokerConfig skips it).
        config = BrokerConfig.load(args.config or os.environ.get("KOMPAKT_CONFIG"), args.override)
    except (ConfigError, OSError) as exc:
        print(f"kompakt serve: {exc}", file=sys.stderr)
        return 1
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        log.warning("uvloop is not installed; using the default asyncio event loop")
    return asyncio.run(serve(config))


async def serve(config) -> int:
    from kompakt.broker.server import Broker
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = {"count": 0}

    def on_signal(signame: str) -> None:
        signals["count"] += 1
        if signals["count"] == 1:
            log.info("received %s: shutting down gracefully", signame)
            stop.set()
        else:
            log.warning("received %s again: exiting without finishing shutdown", signame)
            os._exit(130)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        broker = Broker(config)
    except Exception as exc:
        log.error("cannot start the broker: %s", exc)
        return 1
    try:
        await broker.start()
    except Exception as exc:
        # the message says what and how to fix it (port in use, dir locked, bad config); the
        # traceback is for developers: --log-level DEBUG
        log.error("cannot start the broker: %s", exc)
        log.debug("start-up failure", exc_info=True)
        await broker.stop()
        return 1
    await stop.wait()
    await broker.stop()
    return 0
