"""What `kompakt topic` and `kompakt group` share: connection options and error reporting.

Role: `add_common_arguments` gives a command `--bootstrap` (default $KOMPAKT_BOOTSTRAP, else
127.0.0.1:9092), `--command-config` (TLS / SASL, clients/security.py), `--timeout` and `--json`;
`run(args, prog, action)` opens the Cluster, calls `action(cluster, args)` and turns every
CommandError into one line on stderr and its exit status (1: the broker refused, with Kafka's
error name; 2: the broker could not be reached, TLS failed, or the arguments or settings were
wrong), never a traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from kompakt.clients.cluster import DEFAULT_BOOTSTRAP, Cluster, CommandError
from kompakt.clients.output import print_json


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", "--bootstrap-server", dest="bootstrap",
                        default=os.environ.get("KOMPAKT_BOOTSTRAP") or DEFAULT_BOOTSTRAP,
                        help=f"host:port[,host:port...] of a Kafka broker (default "
                             f"$KOMPAKT_BOOTSTRAP, else {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--command-config", metavar="FILE", default=os.environ.get("KOMPAKT_COMMAND_CONFIG"),
                        help="Kafka client properties for TLS / SASL listeners (security.protocol, "
                             "ssl.truststore.location, sasl.mechanism, sasl.jaas.config, ...; default "
                             "$KOMPAKT_COMMAND_CONFIG)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for a connection or an answer (default 30)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace, prog: str, action: Callable[[Cluster, argparse.Namespace], int | None]) -> int:
    try:
        from kompakt.clients.security import ClientSecurity
        security = ClientSecurity.load(args.command_config)
        with Cluster(args.bootstrap, timeout=args.timeout, security=security) as cluster:
            return int(action(cluster, args) or 0)
    except CommandError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code


def report_deleted(args: argparse.Namespace, prog: str, kind: str, deleted: list[str], errors: list[CommandError]) -> int:
    """What a delete did: `Deleted <kind> <name>.` per name (or JSON), one stderr line per refusal;
    exit 1 if anything was refused."""
    if args.json:
        print_json({"deleted": deleted, "errors": [str(e) for e in errors]})
    else:
        for name in deleted:
            print(f"Deleted {kind} {name}.")
    for error in errors:
        print(f"{prog}: {error}", file=sys.stderr)
    return 1 if errors else 0
