"""`kompakt group ...`: list, describe, reset the offsets of and delete consumer groups on any Kafka broker.

Role: the shell face of clients/groups.py, in the spirit of kafka-consumer-groups.sh:

    kompakt group list
    kompakt group describe orders-app          # state, protocol, members, lag per partition
    kompakt group reset-offsets orders-app --topic prices --to-earliest            # dry run
    kompakt group reset-offsets orders-app --topic prices:0,1 --to-offset 42 --execute
    kompakt group delete orders-app

reset-offsets is a dry run unless --execute (as kafka-consumer-groups.sh): it prints the offsets it
would commit. Every action takes --bootstrap, --command-config (TLS / SASL), --timeout and --json
(command.py). Exit status: 0 done; 1 the broker refused or the group is active (message on
stderr); 2 unreachable broker, failed TLS, or bad arguments.
"""
from __future__ import annotations

import argparse
import sys

from kompakt.clients import command, groups
from kompakt.clients.cluster import CommandError
from kompakt.clients.command import add_common_arguments
from kompakt.clients.output import print_json, print_table

PROG = "kompakt group"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="every group: type, protocol type, state")
    p = sub.add_parser("describe", help="state, protocol, members, assignments, lag per partition")
    p.add_argument("groups", nargs="+")
    p = sub.add_parser("reset-offsets", help="move a group's committed offsets (dry run unless --execute)")
    p.add_argument("group")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                       help="a topic (every partition) or some of its partitions; repeatable")
    which.add_argument("--all-topics", action="store_true", help="every partition the group has committed")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", dest="strategy", action="store_const", const="earliest")
    how.add_argument("--to-latest", dest="strategy", action="store_const", const="latest")
    how.add_argument("--to-offset", type=int, metavar="N")
    how.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                     help="the first offset at or after this time (local time unless a zone is given)")
    how.add_argument("--shift-by", type=int, metavar="N", help="move each committed offset by N (may be negative)")
    run_mode = p.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    run_mode.add_argument("--dry-run", action="store_true", help="only print them (the default)")
    p = sub.add_parser("delete", help="delete groups with no members (DeleteGroups)")
    p.add_argument("groups", nargs="+")
    for action_parser in sub.choices.values():
        add_common_arguments(action_parser)


def run(args: argparse.Namespace) -> int:
    return command.run(args, PROG, ACTIONS[args.action])


def _list(cluster, args) -> int:
    rows = groups.list_groups(cluster)
    if args.json:
        print_json(rows)
    else:
        print_table(("GROUP", "TYPE", "PROTOCOL-TYPE", "STATE"),
                    [(r["group"], r["type"], r["protocol_type"] or None, r["state"]) for r in rows])
    return 0


def _describe(cluster, args) -> int:
    described, failures = [], []
    for group in args.groups:
        try:
            described.append(groups.describe(cluster, group))
        except CommandError as exc:
            if len(args.groups) == 1 or exc.exit_code != 1:
                raise
            failures.append(exc)   # describe the others, report this one, exit 1
    if args.json:
        print_json(described)
    else:
        for i, g in enumerate(described):
            if i:
                print()
            _print_group(g)
    for exc in failures:
        print(f"{PROG}: {exc}", file=sys.stderr)
    return 1 if failures else 0


def _print_group(g: dict) -> None:
    protocol = "/".join(x for x in (g["protocol_type"], g["protocol"]) if x) or "-"
    print(f"Group: {g['group']}  Type: {g['type']}  State: {g['state']}  Protocol: {protocol}  "
          f"Members: {len(g['members'])}")
    if g["offsets"]:
        print_table(("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"),
                    [(o["topic"], o["partition"], o["current_offset"], o["log_end_offset"], o["lag"],
                      o["member_id"], o["host"], o["client_id"]) for o in g["offsets"]])
    else:
        print("No committed offsets and no assigned partitions.")
    if g["members"]:
        print_table(("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"),
                    [(m["member_id"], m["instance_id"], m["client_id"], m["host"],
                      " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(m["assignment"].items())) or None)
                     for m in g["members"]])


def _reset(cluster, args) -> int:
    strategy, value = args.strategy, None
    for name, option in (("offset", args.to_offset), ("datetime", args.to_datetime), ("shift-by", args.shift_by)):
        if option is not None:
            strategy, value = name, option
    if strategy is None:
        raise CommandError("give one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by", 2)
    result = groups.reset_offsets(cluster, args.group, args.topic, args.all_topics, strategy, value, args.execute)
    for note in result["notes"]:
        print(f"{PROG}: {note}", file=sys.stderr)
    if args.json:
        print_json(result)
    else:
        print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                    [(result["group"], r["topic"], r["partition"], r["new_offset"]) for r in result["offsets"]])
    if not args.execute:
        print(f"{PROG}: dry run, nothing committed; add --execute to commit these offsets", file=sys.stderr)
    return 0


def _delete(cluster, args) -> int:
    deleted, errors = groups.delete(cluster, args.groups)
    return command.report_deleted(args, PROG, "group", deleted, errors)


ACTIONS = {"list": _list, "describe": _describe, "reset-offsets": _reset, "delete": _delete}
