"""A producer for delayqueue queues in Python, on the `redis` package.

It runs the delayqueue crate's own send and cancel scripts, which this
package carries in `generated/` exactly as the crate assembles them, with
the keys and arguments the Rust operations pass, after checking every input
against the crate's rules (`generated/wire.json`): a message sent from here
is stored exactly as `queue.send` stores it, and a Rust consumer handles it
with the same guarantees (due time, idempotent ids, cancel).

    import redis
    from delayqueue_producer import Producer

    p = Producer(redis.Redis(), "orders")            # key prefix "dq:"
    p.send(b"close order 42", delay_ms=1_800_000, id="order-42", retry_count=5)
    p.send("report", at_ms=1_893_456_000_000)
    p.send_batch([{"payload": "a"}, {"payload": "b", "delay_ms": 60_000}])
    p.cancel("order-42")
    p.send("close order 42", after=["charge-42", ("mail", "receipt-42")])

For an ordinary (unsharded) queue; the Rust side's `.shards(n)` spreads a
queue over n key sets that this module does not pick between.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from importlib import resources
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import redis

__all__ = [
    "Producer",
    "DuplicateError",
    "NotPendingError",
    "WrongTypeError",
    "InvalidInput",
    "InvalidFlow",
    "check_queue_name",
    "check_key_prefix",
    "check_id",
    "generate_id",
    "now_ms",
    "script",
    "WIRE",
    "FORMAT_VERSION",
    "BATCH",
]


def _generated(name: str) -> str:
    """A file of `generated/`, written by the delayqueue crate
    (src/producer_files_tests.rs) and carried by this package."""
    return resources.files(__name__).joinpath("generated", name).read_text(encoding="utf-8")


#: The keys and input rules of docs/wire-format.md, from the crate's constants.
WIRE: Dict[str, Any] = json.loads(_generated("wire.json"))
#: Messages per script call (the Rust default batch size).
BATCH: int = WIRE["batch_size"]
#: The wire format this module writes (docs/wire-format.md). send.lua refuses
#: a queue in another format with an error reply starting with "DQFORMAT" (a
#: redis.exceptions.ResponseError) before it writes anything.
FORMAT_VERSION: int = WIRE["format_version"]

Payload = Union[bytes, bytearray, str]


class DuplicateError(Exception):
    """The id is live already (pending, ready, retry or being handled), or a
    unique_for or throttle window of it holds (docs/dedup.md): `until` is
    when that window ends, ms of Redis time (None: a live message holds it)."""

    def __init__(self, message: str, until: Optional[int] = None) -> None:
        super().__init__(message)
        self.until = until


class NotPendingError(Exception):
    """A replace found no pending message: `live` is True when the message
    is due or being handled, False when there is none (docs/dedup.md)."""

    def __init__(self, message: str, live: bool) -> None:
        super().__init__(message)
        self.live = live


class WrongTypeError(Exception):
    """The message's key holds another type of value; nothing was written."""


class InvalidInput(ValueError):
    """An input breaks a rule of docs/wire-format.md, "Validation": `rule` names it."""

    def __init__(self, rule: str, what: str, reason: str) -> None:
        super().__init__("%s: %s (rule %s, docs/wire-format.md)" % (what, reason, rule))
        self.rule = rule


class InvalidFlow(ValueError):
    """A send with `after` the Rust crate refuses too (its Error::InvalidFlow):
    more than WIRE["flow-children"]["max"] refs, a message waiting for itself,
    `after` with unique_for_ms, throttle_ms, debounce_ms or replace, an
    unknown on_dead_child, or a sharded queue among the parent's and its
    children's (this module writes unsharded queues only). Nothing was
    written."""


class _Script:
    """A script of `generated/`, called as the crate calls it."""

    def __init__(self, name: str) -> None:
        self.source = script(name)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    def call(self, client: "redis.Redis", keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA; on NOSCRIPT (first use, restart, SCRIPT FLUSH) EVAL with
        the source, which caches it again and cannot fail with NOSCRIPT."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)


def script(name: str) -> str:
    """The source of script `name` ("send", "cancel", "flow_deps",
    "flow_link" or "flow_complete") as Redis runs it."""
    return _generated(name + ".lua")


# --- Validation -------------------------------------------------------------
# The rules of docs/wire-format.md, "Validation", with the numbers and
# character sets of wire.json: exactly what the Rust crate refuses. A message
# stored against one is one no Rust consumer reads as it was sent (or, for a
# queue name, one no Rust consumer can be built for).


def _refused(rule: str) -> "re.Pattern[str]":
    """A pattern matching a code point that text rule `rule` refuses."""
    ranges = WIRE[rule]["refused_code_points"]
    return re.compile("[%s]" % "".join("\\U%08x-\\U%08x" % (lo, hi) for lo, hi in ranges))


_TEXT_RULES = {rule: _refused(rule) for rule in ("queue-name", "key-prefix", "id", "header-name", "group")}


def _utf8(text: str, what: str) -> bytes:
    """`text` in UTF-8; a lone surrogate, which a str can hold, has none."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInput("text.unicode", what, "holds the lone surrogate U+%04X" % ord(text[e.start])) from None


def _check_text(value: object, kind: str, rule: str) -> None:
    """Rules `<rule>.length` (1 to max_bytes bytes of UTF-8, when the rule
    has a maximum), `<rule>.chars` and text.unicode."""
    if not isinstance(value, str):
        raise TypeError("%s must be a str, not %s" % (kind, type(value).__name__))
    what = "invalid %s %r" % (kind, value)
    most: Optional[int] = WIRE[rule].get("max_bytes")
    size = len(value.encode("utf-8", "surrogatepass"))
    if most is not None and not 1 <= size <= most:
        raise InvalidInput(rule + ".length", what, "is %d bytes of UTF-8; 1 to %d allowed" % (size, most))
    bad = _TEXT_RULES[rule].search(value)
    if bad:
        c = bad.group()
        raise InvalidInput(rule + ".chars", what, "holds %r (U+%04X); %s" % (c, ord(c), WIRE[rule]["hint"]))
    _utf8(value, what)


def check_queue_name(name: str) -> None:
    """Raises InvalidInput when Rust would refuse `name` as a queue name."""
    _check_text(name, "queue name", "queue-name")


def check_key_prefix(prefix: str) -> None:
    """Raises InvalidInput when Rust would refuse `prefix` as a key prefix."""
    _check_text(prefix, "key prefix", "key-prefix")


def check_id(id: str) -> None:
    """Raises InvalidInput when Rust would refuse `id` as a message id."""
    _check_text(id, "message id", "id")


def _check_int(value: object, most: int, rule: str, kind: str) -> int:
    # A bool is an int to Python, never a number to Rust.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise InvalidInput(rule, "invalid %s %r" % (kind, value), "must be an integer from 0 to %d" % most)
    return value


def _delay(delay_ms: Optional[int], at_ms: Optional[int]) -> int:
    """The delay to send: delay_ms, or at_ms turned into one by this host's
    clock (as `.at()` does in Rust); rule delay."""
    most: int = WIRE["delay"]["max_ms"]
    if delay_ms is not None and at_ms is not None:
        raise ValueError("give delay_ms or at_ms, not both")
    if at_ms is None:
        return _check_int(0 if delay_ms is None else delay_ms, most, "delay", "delay_ms")
    if isinstance(at_ms, bool) or not isinstance(at_ms, int):
        raise InvalidInput("delay", "invalid at_ms %r" % (at_ms,), "must be an integer (ms since the epoch)")
    delay = max(0, at_ms - now_ms())
    if delay > most:
        raise InvalidInput("delay", "invalid at_ms %d" % at_ms, "%d ms from now; at most %d allowed" % (delay, most))
    return delay


def _headers_section(headers: Optional[Mapping[str, str]]) -> bytes:
    """The stored headers section, "<name>=<value bytes>:<value>" per header
    (docs/wire-format.md, "Headers"), checked against the rules."""
    items = list((headers or {}).items())
    most_count: int = WIRE["headers"]["max_count"]
    most_bytes: int = WIRE["headers"]["max_bytes"]
    if len(items) > most_count:
        raise InvalidInput("headers.count", "%d headers" % len(items), "at most %d allowed" % most_count)
    section, total = b"", 0
    for name, value in items:
        _check_text(name, "header name", "header-name")
        if not isinstance(value, str):
            raise TypeError("the value of header %r must be a str, not %s" % (name, type(value).__name__))
        encoded = _utf8(value, "invalid value of header %r" % name)
        total += len(name) + len(encoded)
        if total > most_bytes:
            raise InvalidInput("headers.bytes", "headers", "names and values exceed %d bytes" % most_bytes)
        section += b"%s=%d:%s" % (name.encode(), len(encoded), encoded)
    return section


# --- Messages ---------------------------------------------------------------

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def generate_id() -> str:
    """A time-ordered id like the Rust side's: a UUIDv7 in base62."""
    n = (now_ms() << 80) | (0x7 << 76) | (secrets.randbits(12) << 64) | (0b10 << 62) | secrets.randbits(62)
    out = ""
    while n:
        n, r = divmod(n, 62)
        out = _BASE62[r] + out
    return out or "0"


def now_ms() -> int:
    """This host's clock, in ms since the epoch: what `at_ms` is read against."""
    return int(time.time() * 1000)


#: A message a parent waits for: an id of the parent's queue, or a
#: (queue name, id) pair.
Ref = Union[str, Tuple[str, str]]

#: on_dead_child's values and the letters the scripts keep them as
#: (docs/workflows.md): fail the parent, ignore the child, wait for it to be
#: requeued, remove the parent.
_POLICIES = {"fail": "f", "ignore": "i", "wait": "w", "remove": "r"}

#: A parent's children, checked: (queue name or None for the parent's, id)
#: each, sorted and without repeats, and the policy letter.
_Deps = Tuple[List[Tuple[Optional[str], str]], str]

#: One checked message: id, stored value, delay ms, whether the caller chose
#: the id, its mode letters for send.lua ('' none; docs/wire-format.md), and
#: the children it waits for (None: it waits for none).
_Message = Tuple[str, bytes, int, bool, str, Optional[_Deps]]


def _deps(after: Optional[Sequence[Ref]], on_dead_child: str, mode: str) -> Optional[_Deps]:
    """The children of a send with `after`, checked as the Rust crate checks
    them (rules queue-name.* and id.* per ref; InvalidFlow for the rest)."""
    if on_dead_child not in _POLICIES:
        raise InvalidFlow("on_dead_child must be one of %s, not %r" % (", ".join(_POLICIES), on_dead_child))
    if after is None:
        return None
    if isinstance(after, (str, bytes)):
        raise TypeError("after must be a list of ids or (queue, id) pairs, not one %s" % type(after).__name__)
    refs = list(after)
    if not refs:
        return None
    most: int = WIRE["flow-children"]["max"]
    if len(refs) > most:
        raise InvalidFlow("%d children, more than %d" % (len(refs), most))
    if mode:
        raise InvalidFlow("a message that waits for others cannot have unique_for_ms, throttle_ms, debounce_ms, replace")
    children = set()
    for ref in refs:
        if isinstance(ref, str):
            queue, id = None, ref
        elif isinstance(ref, (tuple, list)) and len(ref) == 2:
            queue, id = ref
            check_queue_name(queue)
        else:
            raise TypeError("a ref of after must be an id or a (queue, id) pair, not %r" % (ref,))
        check_id(id)
        children.add((queue, id))
    return sorted(children, key=lambda c: (c[0] or "", c[1])), _POLICIES[on_dead_child]


def _mode(
    id: Optional[str],
    unique_for_ms: Optional[int],
    throttle_ms: Optional[int],
    debounce_ms: Optional[int],
    replace: bool,
    timed: bool,
) -> str:
    """send.lua's mode letters of a message (docs/dedup.md), checked; `timed`:
    delay_ms or at_ms was given."""
    given = [(k, v) for k, v in (("u", unique_for_ms), ("t", throttle_ms), ("d", debounce_ms)) if v is not None]
    if len(given) + (1 if replace else 0) > 1:
        raise ValueError("give at most one of unique_for_ms, throttle_ms, debounce_ms and replace")
    if (given or replace) and id is None:
        raise ValueError("unique_for_ms, throttle_ms, debounce_ms and replace need an id")
    if replace:
        return "R" if timed else "r"
    if not given:
        return ""
    letter, ms = given[0]
    _check_int(ms, WIRE["window"]["max_ms"], "window", "window")
    if ms < 1:
        raise InvalidInput("window", "a window of %d ms" % ms, "1 ms to %d ms allowed" % WIRE["window"]["max_ms"])
    if letter == "d" and timed:
        raise ValueError("debounce_ms sets the due time: give no delay_ms or at_ms with it")
    return "d" if letter == "d" else letter + str(ms)


def _message(
    payload: Payload,
    delay_ms: Optional[int] = None,
    at_ms: Optional[int] = None,
    id: Optional[str] = None,
    retry_count: Optional[int] = None,
    priority: int = 0,
    headers: Optional[Mapping[str, str]] = None,
    group: Optional[str] = None,
    unique_for_ms: Optional[int] = None,
    throttle_ms: Optional[int] = None,
    debounce_ms: Optional[int] = None,
    replace: bool = False,
    after: Optional[Sequence[Ref]] = None,
    on_dead_child: str = "fail",
) -> _Message:
    """One message, checked."""
    mode = _mode(id, unique_for_ms, throttle_ms, debounce_ms, replace, delay_ms is not None or at_ms is not None)
    deps = _deps(after, on_dead_child, mode)
    if debounce_ms is not None:
        delay_ms = debounce_ms
    if isinstance(payload, str):
        payload = _utf8(payload, "invalid payload")
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError("payload must be bytes or str")
    most: int = WIRE["payload"]["max_bytes"]
    if len(payload) > most:
        raise InvalidInput("payload.size", "payload of %d bytes" % len(payload), "at most %d allowed" % most)
    delay = _delay(delay_ms, at_ms)
    retries = WIRE["default_retry_count"] if retry_count is None else retry_count
    _check_int(retries, WIRE["retry-count"]["max"], "retry-count", "retry_count")
    _check_int(priority, WIRE["priority"]["max"], "priority", "priority")
    if id is not None:
        check_id(id)
    if group is not None:
        _check_text(group, "group", "group")
    section = _headers_section(headers)
    # "<retry count>[!<priority>][=<group>][#<headers bytes>]:[<headers>]<payload>"
    # (docs/wire-format.md); send.lua adds the times.
    head = (
        str(retries)
        + ("!%d" % priority if priority else "")
        + ("=" + group if group is not None else "")
        + ("#%d" % len(section) if section else "")
        + ":"
    )
    value = head.encode() + section + bytes(payload)
    return (generate_id() if id is None else id), value, delay, id is not None, mode, deps


#: What send_batch returns per message: its id, or why it was not stored.
Outcome = Union[str, DuplicateError, WrongTypeError, NotPendingError]


class Producer:
    """Sends to and cancels in queue `name` under `key_prefix`.
    `dead_letter_retention_ms`: the queue's (the Rust default when not
    given), for a parent sent with `after` that a child already dead fails."""

    _send = _Script("send")
    _cancel = _Script("cancel")
    _flow_deps = _Script("flow_deps")
    _flow_link = _Script("flow_link")
    _flow_complete = _Script("flow_complete")

    def __init__(
        self,
        client: "redis.Redis",
        name: str,
        key_prefix: str = "dq:",
        dead_letter_retention_ms: Optional[int] = None,
    ) -> None:
        check_queue_name(name)
        check_key_prefix(key_prefix)
        self.client = client
        self.name = name
        self._prefix = key_prefix
        self._base = self._base_of(name)
        retention = WIRE["dead_letter_retention_ms"] if dead_letter_retention_ms is None else dead_letter_retention_ms
        self._retention = _check_int(retention, WIRE["delay"]["max_ms"], "delay", "dead_letter_retention_ms")

    def _base_of(self, queue: str) -> str:
        """`<key prefix>{<queue>}:`, the start of every key of queue `queue`
        (docs/wire-format.md, "Keys"), which a flow's refs name it by."""
        return "%s{%s}:" % (self._prefix, queue)

    def _keys(self, which: str, ids: Sequence[str]) -> List[str]:
        """The KEYS of script `which`: the queue's, then each message's."""
        return [self._base + k for k in WIRE[which + "_keys"]] + [self._base + WIRE["message_key"] + i for i in ids]

    def _members(self, id: str, deps: _Deps) -> List[str]:
        """The children of parent `id` as the scripts keep them, "<child's
        queue base> <child id>" each."""
        members = [(self._base if q is None else self._base_of(q)) + " " + c for q, c in deps[0]]
        if self._base + " " + id in members:
            raise InvalidFlow("message %s cannot wait for itself" % id)
        return members

    def _check_unsharded(self, queues: Sequence[Optional[str]]) -> None:
        """Refuses a send with after that names a sharded queue (its shard
        count in the totals' field `shards`, docs/wire-format.md), before
        anything is written: its messages are not in the unsharded keys this
        module names, so a child there would be taken as finished."""
        for queue in sorted(set(q or self.name for q in queues)):
            shards = self.client.hget(self._base_of(queue) + "totals", "shards")
            if shards is not None:
                reason = "queue %r is spread over %s shards: this module writes unsharded queues only"
                raise InvalidFlow(reason % (queue, int(shards)))

    def _add_deps(self, msgs: Sequence[_Message]) -> Dict[str, _Deps]:
        """Step one of a send with after (docs/wire-format.md, "Sending with
        after"): each parent's set of children to wait for, filled before the
        parent is stored. A parent already live (which send.lua refuses as a
        duplicate) gets none: returns, per parent, the children to link in
        step three, for a live one those its set holds."""
        parents = [(m[0], m[5]) for m in msgs if m[5] is not None]
        if parents:
            self._check_unsharded([None] + [q for _, deps in parents for q, _ in deps[0]])
        linkable: Dict[str, _Deps] = {}
        for id, deps in parents:
            members = self._members(id, deps)
            keys = [self._base + WIRE["deps_key"] + id, self._base + WIRE["message_key"] + id]
            held: List[bool] = []
            for i in range(0, len(members), BATCH):
                chunk = members[i : i + BATCH]
                reply = self._flow_deps.call(self.client, keys, chunk)
                # [-1, flags...]: live, nothing added; [added]: all to link.
                held += [f == 1 for f in reply[1:]] if reply[0] == -1 else [True] * len(chunk)
            linkable[id] = ([c for c, h in zip(deps[0], held) if h], deps[1])
        return linkable

    def _link(self, id: str, deps: _Deps) -> None:
        """Step three: links parent `id`, stored (or found stored: a re-send),
        to each child in the child's queue, and completes at once the
        children no longer stored (taken as acked) or dead under a policy
        that does not wait."""
        children, policy = deps
        link = "%s %s %s" % (policy, self._base, id)
        by_base: Dict[str, List[str]] = {}
        for queue, child in children:
            by_base.setdefault(self._base if queue is None else self._base_of(queue), []).append(child)
        done: List[Any] = []
        for base, ids in sorted(by_base.items()):
            keys = [base + k for k in WIRE["flow_link_keys"]]
            for i in range(0, len(ids), BATCH):
                chunk = ids[i : i + BATCH]
                statuses = self._flow_link.call(self.client, keys, [base + WIRE["message_key"], link, *chunk])
                for child, status in zip(chunk, statuses):
                    # 1 linked; 3 acked, its completion (with its kept
                    # result) recorded for the relay; 0 no longer stored
                    # (acked); 2 dead.
                    if status in (0, 2):
                        done += [id, base + " " + child, ("a" if status == 0 else "d") + policy, ""]
        keys = [self._base + k for k in WIRE["flow_complete_keys"]]
        head = [self._base + WIRE["message_key"], self._base + WIRE["wake_channel"], self._retention]
        for i in range(0, len(done), 4 * BATCH):
            self._flow_complete.call(self.client, keys, head + done[i : i + 4 * BATCH])

    def _store(self, msgs: Sequence[_Message]) -> List[Outcome]:
        linkable = self._add_deps(msgs)
        args: List[Any] = [self._base + WIRE["wake_channel"], FORMAT_VERSION]
        for id, value, delay, own, mode, deps in msgs:
            # expire_after 0: never expires; the mode follows the id flag
            # ("w": a parent that waits for its children).
            args += [id, value, delay, 0, ("1" if own else "0") + ("w" if deps else mode)]
        # A unique_for or throttle message's marker follows the message keys.
        markers = [self._base + WIRE["marker_key"] + m[0] for m in msgs if m[4][:1] in ("u", "t")]
        reply = self._send.call(self.client, self._keys("send", [m[0] for m in msgs]) + markers, args)
        statuses, untils = reply[: len(msgs)], iter(reply[len(msgs) :])
        if len(statuses) != len(msgs):
            raise RuntimeError("send.lua returned %d statuses for %d messages" % (len(statuses), len(msgs)))
        out: List[Outcome] = []
        for (id, _, _, _, mode, deps), s in zip(msgs, statuses):
            duplicate = "message %s already exists in queue %r" % (id, self.name)
            # A parent stored, or live already (a re-send), is linked to its
            # children (8: stored after a child linked to it finished).
            if deps is not None and s in (0, 1, 8):
                self._link(id, linkable[id])
            if s in (1, 5, 8):
                out.append(id)
            elif s == 0 and mode[:1] in ("r", "R"):
                out.append(NotPendingError("message %s is due or being handled" % id, True))
            elif s == 0:
                out.append(DuplicateError(duplicate))
            elif s == 4:
                until = int(next(untils))
                out.append(DuplicateError(duplicate, until if until >= 0 else None))
            elif s == 6:
                out.append(NotPendingError("no message %s in queue %r" % (id, self.name), False))
            else:
                out.append(WrongTypeError("the key of message %s holds another type" % id))
        return out

    def send(
        self,
        payload: Payload,
        delay_ms: Optional[int] = None,
        at_ms: Optional[int] = None,
        id: Optional[str] = None,
        retry_count: Optional[int] = None,
        priority: int = 0,
        headers: Optional[Mapping[str, str]] = None,
        group: Optional[str] = None,
        unique_for_ms: Optional[int] = None,
        throttle_ms: Optional[int] = None,
        debounce_ms: Optional[int] = None,
        after: Optional[Sequence[Ref]] = None,
        on_dead_child: str = "fail",
    ) -> str:
        """Sends one message; returns its id. `group`: its group
        (docs/groups.md); `headers`: a dict of str to str;
        `retry_count`: the crate's default (3) when not given. Raises
        DuplicateError when `id` is live already, or a unique_for_ms or
        throttle_ms window of it holds; debounce_ms replaces a pending
        message of `id` (docs/dedup.md). `after`: messages it waits for
        (ids of this queue, or (queue, id) pairs): it becomes due once
        all have finished, and not before its own delay; `on_dead_child`
        ("fail", "ignore", "wait" or "remove") says what a child that
        becomes a dead letter does to it (docs/workflows.md)."""
        msg = _message(
            payload,
            delay_ms,
            at_ms,
            id,
            retry_count,
            priority,
            headers,
            group,
            unique_for_ms,
            throttle_ms,
            debounce_ms,
            after=after,
            on_dead_child=on_dead_child,
        )
        result = self._store([msg])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def replace(
        self,
        id: str,
        payload: Payload,
        delay_ms: Optional[int] = None,
        at_ms: Optional[int] = None,
        retry_count: Optional[int] = None,
        priority: int = 0,
        headers: Optional[Mapping[str, str]] = None,
        group: Optional[str] = None,
    ) -> str:
        """Replaces the pending message `id`, keeping its due time unless
        delay_ms or at_ms is given; raises NotPendingError, nothing written,
        when it is due, being handled or missing (docs/dedup.md)."""
        msg = _message(payload, delay_ms, at_ms, id, retry_count, priority, headers, group, replace=True)
        result = self._store([msg])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def send_batch(self, messages: Sequence[Mapping[str, Any]]) -> List[Outcome]:
        """Sends dicts of send()'s arguments, BATCH per script call. Every
        message is checked before any is sent; returns, in order, each one's
        id or its DuplicateError / WrongTypeError."""
        msgs = [_message(**m) for m in messages]
        out: List[Outcome] = []
        for i in range(0, len(msgs), BATCH):
            out += self._store(msgs[i : i + BATCH])
        return out

    def cancel(self, id: str) -> bool:
        """Deletes a message waiting for delivery; False when unknown or
        being handled."""
        check_id(id)
        # Then the id's marker (docs/dedup.md), whose window a cancel starts.
        keys = self._keys("cancel", [id]) + [self._base + WIRE["marker_key"] + id]
        return bool(self._cancel.call(self.client, keys, [id, self._base + WIRE["group_key"]]) == 1)

    def abort(self, id: str) -> str:
        """Aborts a message (docs/handlers.md in the crate, "Aborting a
        running handler"): one waiting is cancelled ("cancelled"); one being
        handled has its handler told and ends as aborted ("aborting");
        "already_aborted" while an aborted one has not ended yet,
        "not_found" for an unknown or finished id (both write nothing)."""
        check_id(id)
        keys = self._keys("cancel", [id]) + [self._base + WIRE["marker_key"] + id]
        args = [id, self._base + WIRE["group_key"], "abort", self._base + WIRE["wake_channel"]]
        outcome = self._cancel.call(self.client, keys, args)
        return ("not_found", "cancelled", "aborting", "already_aborted")[int(outcome)]

    def result(self, id: str) -> Optional[bytes]:
        """The result the handler of acked message `id` returned, while the
        queue keeps it (its result_retention); None when there is none."""
        check_id(id)
        value = self.client.get(self._base + WIRE["result_key"] + id)
        return None if value is None else bytes(value)
