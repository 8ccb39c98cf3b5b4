"""`python -m delayqueue_producer` (or `delayqueue-producer`): send to and
cancel in a delayqueue queue from a shell.

    python -m delayqueue_producer send orders "close order 42" --delay-ms 1800000 --id order-42
    echo -n data | python -m delayqueue_producer send orders - --header tenant=acme
    python -m delayqueue_producer cancel orders order-42
    python -m delayqueue_producer abort orders export-7
    python -m delayqueue_producer send orders "close" --after charge-42 --after-in mail=receipt-42

`send` prints the message's id; `cancel` prints true or false; `abort`
prints cancelled, aborting, already_aborted or not_found. Exit status
1 when the id is live already (send) or Redis fails, 2 for a refused input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Tuple, Union

import redis

from . import DuplicateError, InvalidFlow, InvalidInput, Producer, WrongTypeError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="delayqueue-producer", description="Send to and cancel in a delayqueue queue.")
    p.add_argument("--url", default="redis://127.0.0.1:6379", help="Redis URL (default %(default)s)")
    p.add_argument("--key-prefix", default="dq:", help="key prefix (default %(default)s)")
    commands = p.add_subparsers(dest="command", required=True)
    send = commands.add_parser("send", help="send one message; prints its id")
    send.add_argument("queue")
    send.add_argument("payload", help="the payload as text, or - to read bytes from stdin")
    when = send.add_mutually_exclusive_group()
    when.add_argument("--delay-ms", type=int, help="due this many ms from now (default 0)")
    when.add_argument("--at-ms", type=int, help="due at this time, ms since the epoch")
    send.add_argument("--id", help="the message's id (default: a generated one)")
    send.add_argument("--retry-count", type=int, help="retries allowed (default 3)")
    send.add_argument("--priority", type=int, default=0, help="0 (default) to 9")
    send.add_argument("--header", action="append", default=[], metavar="NAME=VALUE", help="a header (repeatable)")
    send.add_argument("--after", action="append", default=[], metavar="ID", help="wait for this queue's message ID")
    # A queue name holds no '=', so the first one ends it.
    send.add_argument(
        "--after-in", action="append", default=[], metavar="QUEUE=ID", help="wait for message ID of QUEUE"
    )
    send.add_argument(
        "--on-dead-child", default="fail", help="fail (default), ignore, wait or remove: what a dead child does"
    )
    cancel = commands.add_parser("cancel", help="delete a waiting message; prints true or false")
    cancel.add_argument("queue")
    cancel.add_argument("id")
    abort = commands.add_parser(
        "abort", help="cancel a waiting message, or tell a running handler and end it as aborted; prints the outcome"
    )
    abort.add_argument("queue")
    abort.add_argument("id")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command line `argv` (default: the process's); its exit status."""
    p = _parser()
    args = p.parse_args(argv)
    try:
        producer = Producer(redis.Redis.from_url(args.url), args.queue, key_prefix=args.key_prefix)
        if args.command == "cancel":
            print("true" if producer.cancel(args.id) else "false")
            return 0
        if args.command == "abort":
            print(producer.abort(args.id))
            return 0
        headers: Dict[str, str] = {}
        for h in args.header:
            name, eq, value = h.partition("=")
            if not eq:
                p.error("--header %r: NAME=VALUE expected" % h)
            headers[name] = value
        after: List[Union[str, Tuple[str, str]]] = list(args.after)
        for ref in args.after_in:
            queue, eq, id = ref.partition("=")
            if not eq:
                p.error("--after-in %r: QUEUE=ID expected" % ref)
            after.append((queue, id))
        payload = sys.stdin.buffer.read() if args.payload == "-" else args.payload
        print(
            producer.send(
                payload,
                delay_ms=args.delay_ms,
                at_ms=args.at_ms,
                id=args.id,
                retry_count=args.retry_count,
                priority=args.priority,
                headers=headers,
                after=after,
                on_dead_child=args.on_dead_child,
            )
        )
        return 0
    except (InvalidInput, InvalidFlow) as e:
        print("delayqueue-producer: %s" % e, file=sys.stderr)
        return 2
    except (DuplicateError, WrongTypeError, redis.RedisError) as e:
        print("delayqueue-producer: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
