"""The `kompakt` command: one sub-command per tool, each living in the package that owns it.

Each entry of `COMMANDS` names a module that defines `add_arguments(parser)` and `run(args) -> int`.
Modules are imported lazily so `kompakt dump-log` never pays for asyncio servers or PySpark.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("kompakt.broker.serve_cmd", "run the broker"),
    "dump-log": ("kompakt.storage.dump_log", "print .log/.index/.timeindex/checkpoint files like kafka-dump-log.sh"),
    "admin": ("kompakt.broker.admin.cmd", "talk to a running broker's admin HTTP API"),
    "topic": ("kompakt.clients.topic_cmd", "create, list, describe, alter, delete topics on any Kafka broker"),
    "group": ("kompakt.clients.group_cmd", "list, describe, reset offsets of, delete consumer groups on any Kafka broker"),
    "pipeline": ("kompakt.pipeline.cli", "PySpark jobs over log dirs: audit, snapshot, compact, whatif, verify"),
    "compact-adopt": ("kompakt.pipeline.adopt_cmd", "offline: adopt a pipeline-compacted partition (broker stopped)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="kompakt", description="Kompakt: a Kafka-protocol broker built around log compaction")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        parser.error(f"unknown command {name!r}; choose from {', '.join(COMMANDS)}")
    module = importlib.import_module(COMMANDS[name][0])
    cmd_parser = argparse.ArgumentParser(prog=f"kompakt {name}", description=COMMANDS[name][1])
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:
        # `kompakt dump-log ... | head`: the reader left; exit quietly as Unix tools do. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141   # 128 + SIGPIPE, what a shell reports for a tool killed by the pipe


if __name__ == "__main__":
    sys.exit(main())
