"""`kompakt topic ...`: create, list, describe, alter and delete topics on any Kafka broker.

Role: the shell face of clients/topics.py, in the spirit of kafka-topics.sh and kafka-configs.sh:

    kompakt topic create prices --partitions 3 --config cleanup.policy=compact
    kompakt topic list
    kompakt topic describe prices            # partitions, leader, offsets, non-default configs
    kompakt topic alter prices --config min.cleanable.dirty.ratio=0.1 --delete-config segment.ms --partitions 6
    kompakt topic delete prices

Every action takes --bootstrap, --command-config (TLS / SASL), --timeout and --json (command.py).
Exit status: 0 done; 1 the broker refused (Kafka's error name and message on stderr); 2 unreachable
broker, failed TLS, or bad arguments.
"""
from __future__ import annotations

import argparse

from kompakt.clients import command, topics
from kompakt.clients.command import add_common_arguments
from kompakt.clients.output import print_json, print_table

PROG = "kompakt topic"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser("create", help="create a topic (CreateTopics)")
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, default=-1, help="partition count (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="replicas per partition (default: the broker's default.replication.factor)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config, repeatable, e.g. cleanup.policy=compact")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists already")
    p.add_argument("--validate-only", action="store_true", help="let the broker check the request, create nothing")
    p = sub.add_parser("list", help="list topics with partition count and cleanup.policy")
    p.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets and the like")
    p = sub.add_parser("describe", help="partitions (leader, replicas, offsets) and non-default configs")
    p.add_argument("topics", nargs="*", help="topic names (default: every topic)")
    p.add_argument("--all-configs", action="store_true", help="every config, defaults included")
    p = sub.add_parser("alter", help="set or delete topic configs, add partitions")
    p.add_argument("topic")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="remove a topic override, back to the broker's value (repeatable)")
    p.add_argument("--partitions", type=int, help="the new, higher partition count")
    p.add_argument("--validate-only", action="store_true", help="let the broker check the change, apply nothing")
    p = sub.add_parser("delete", help="delete topics (DeleteTopics)")
    p.add_argument("topics", nargs="+")
    p.add_argument("--if-exists", action="store_true", help="succeed for topics that do not exist")
    for action_parser in sub.choices.values():
        add_common_arguments(action_parser)


def run(args: argparse.Namespace) -> int:
    return command.run(args, PROG, ACTIONS[args.action])


def _create(cluster, args) -> int:
    result = topics.create(cluster, args.topic, args.partitions, args.replication_factor,
                           topics.parse_configs(args.config), args.if_not_exists, args.validate_only)
    if args.json:
        print_json(result)
    elif args.validate_only:
        print(f"Topic {args.topic} would be created (validate only).")
    elif result["created"]:
        print(f"Created topic {args.topic}.")
    else:
        print(f"Topic {args.topic} exists already.")
    return 0


def _list(cluster, args) -> int:
    rows = topics.list_topics(cluster, include_internal=not args.exclude_internal)
    if args.json:
        print_json(rows)
    else:
        print_table(("TOPIC", "PARTITIONS", "REPLICAS", "CLEANUP.POLICY"),
                    [(r["topic"], r["partitions"], r["replication_factor"], r["cleanup_policy"]) for r in rows])
    return 0


def _describe(cluster, args) -> int:
    described = topics.describe(cluster, args.topics, all_configs=args.all_configs)
    if args.json:
        print_json(described)
        return 0
    for i, t in enumerate(described):
        if i:
            print()
        print(f"Topic: {t['topic']}  TopicId: {t['topic_id'] or '-'}  PartitionCount: {t['partition_count']}  "
              f"ReplicationFactor: {t['replication_factor']}" + ("  Internal: true" if t["internal"] else ""))
        if t["configs"]:
            print_table(("CONFIG", "VALUE", "SOURCE"),
                        [(c["name"], "(sensitive)" if c["sensitive"] else c["value"], c["source"])
                         for c in t["configs"]])
        else:
            print("Configs: all at their defaults")
        print_table(("PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET"),
                    [(p["partition"], p["leader"], ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
                      p.get("log_start_offset"), p.get("log_end_offset")) for p in t["partitions"]])
    return 0


def _alter(cluster, args) -> int:
    result = topics.alter(cluster, args.topic, topics.parse_configs(args.config), args.delete_config,
                          args.partitions, args.validate_only)
    if args.json:
        print_json(result)
        return 0
    done = [f"set {k}={v}" for k, v in result.get("set", {}).items()]
    done += [f"deleted {k}" for k in result.get("deleted", [])]
    if "partitions" in result:
        done.append(f"partitions now {result['partitions']}")
    print(f"{'Validated' if args.validate_only else 'Altered'} topic {args.topic}: {'; '.join(done)}.")
    return 0


def _delete(cluster, args) -> int:
    deleted, errors = topics.delete(cluster, args.topics, args.if_exists)
    return command.report_deleted(args, PROG, "topic", deleted, errors)


ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete}
