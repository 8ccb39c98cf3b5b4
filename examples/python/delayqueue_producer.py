"""A producer for delayqueue queues in Python, on the `redis` package.

It runs the crate's own scripts from `lua/` (send.lua, cancel.lua and the
helpers of prelude.lua), assembled as src/store/scripts.rs assembles them,
with the keys and arguments the Rust operations pass: a message sent from
here is stored exactly as `queue.send` stores it, and a Rust consumer
handles it with the same guarantees (due time, idempotent ids, cancel).

    import redis
    from delayqueue_producer import Producer

    p = Producer(redis.Redis(), "orders")            # key prefix "dq:"
    p.send(b"close order 42", delay_ms=1_800_000, id="order-42", retry_count=5)
    p.send("report", at_ms=1_893_456_000_000)
    p.send_batch([{"payload": "a"}, {"payload": "b", "delay_ms": 60_000}])
    p.cancel("order-42")

For an ordinary (unsharded) queue; the Rust side's `.shards(n)` spreads a
queue over n key sets that this module does not pick between.
"""

import hashlib
import os
import re
import secrets
import time

import redis

#: Where the crate's `lua/` folder is: $DELAYQUEUE_LUA_DIR, else ../../lua
#: from this file (the repository's layout).
LUA_DIR = os.environ.get(
    "DELAYQUEUE_LUA_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lua"),
)

#: Messages per script call (the Rust default batch size).
BATCH = 1000
# The wire format this module writes (docs/wire-format.md). send.lua refuses a
# queue in another format with an error reply starting with "DQFORMAT" (a
# redis.exceptions.ResponseError) before it writes anything.
FORMAT_VERSION = 1


class DuplicateError(Exception):
    """The id is live already (pending, ready, retry or being handled)."""


class WrongTypeError(Exception):
    """The message's key holds another type of value; nothing was written."""


# --- Assembling a script as src/store/scripts.rs does ----------------------

def _code_of(lua):
    """Lua without its comments, so a name a comment mentions is not a use."""
    code, rest = [], lua
    while "--" in rest:
        at = rest.index("--")
        code.append(rest[:at])
        comment = rest[at:]
        if comment.startswith("--[["):
            end = comment.find("]]", 4)
            end = len(comment) if end < 0 else end + 2
        else:
            end = comment.find("\n")
            end = len(comment) if end < 0 else end
        rest = comment[end:]
    code.append(rest)
    return "".join(code)


def _defined_names(block):
    names = []
    for line in block.split("\n"):
        if line.startswith("local "):
            line = line[len("local "):]
            if line.startswith("function "):
                line = line[len("function "):]
            name = re.match(r"[A-Za-z0-9_]*", line).group(0)
            if name:
                names.append(name)
    return names


def _uses(text, name):
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", text) is not None


def _prelude_for(prelude, body):
    """The prelude's blocks (split at blank lines) that `body` needs: those
    defining a name the body or another needed block uses, and those
    defining none (comments)."""
    blocks = [(b, _defined_names(b)) for b in prelude.split("\n\n")]
    needed = [not names for _, names in blocks]
    users = [_code_of(body)]
    while users:
        user = users.pop()
        for i, (block, names) in enumerate(blocks):
            if not needed[i] and any(_uses(user, n) for n in names):
                needed[i] = True
                users.append(_code_of(block))
    return "".join(b.rstrip("\n") + "\n\n" for (b, _), n in zip(blocks, needed) if n)


def load_script(name, lua_dir=LUA_DIR):
    """The source of lua/<name>.lua as Redis runs it: its shebang line, the
    prelude helpers it uses, then the rest of the file."""
    try:
        with open(os.path.join(lua_dir, name + ".lua"), encoding="utf-8") as f:
            text = f.read()
        with open(os.path.join(lua_dir, "prelude.lua"), encoding="utf-8") as f:
            prelude = f.read()
    except FileNotFoundError as e:
        raise FileNotFoundError(
            "%s: this module runs the delayqueue crate's lua/ scripts; set "
            "DELAYQUEUE_LUA_DIR to that folder (or pass lua_dir=)" % e
        ) from e
    shebang, _, body = text.partition("\n")
    return shebang + "\n" + _prelude_for(prelude, body) + body


class _Script:
    def __init__(self, source):
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8")).hexdigest()

    def call(self, client, keys, args):
        """EVALSHA; on NOSCRIPT (first use, restart, SCRIPT FLUSH) EVAL with
        the source, which caches it again and cannot fail with NOSCRIPT."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)


# --- Validation -------------------------------------------------------------
# The rules of docs/wire-format.md, "Validation": exactly what the Rust crate
# refuses. A message stored against one is one no Rust consumer reads as it
# was sent (or, for a queue name, one no Rust consumer can be built for).

MAX_QUEUE_NAME_LEN = 128
MAX_ID_LEN = 200
MAX_HEADER_NAME_LEN = 64
MAX_HEADERS = 16
MAX_HEADERS_BYTES = 4096
MAX_RETRY_COUNT = 1000
MAX_PRIORITY = 9
#: The Rust crate's MAX_DELAY (3660 days), in ms.
MAX_DELAY_MS = 3660 * 24 * 3600 * 1000
#: The Rust crate's default max_payload_size.
MAX_PAYLOAD = 1024 * 1024

# Rust's char::is_whitespace or char::is_control: Python's str.isspace and
# regex \s differ from it.
_WHITESPACE_OR_CONTROL = "\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_NOT_IN_QUEUE_NAME = re.compile(r"[^A-Za-z0-9\-_.:/@]")
_NOT_IN_HEADER_NAME = re.compile(r"[^A-Za-z0-9\-_.]")
_NOT_IN_ID = re.compile("[%s]" % _WHITESPACE_OR_CONTROL)
_NOT_IN_KEY_PREFIX = re.compile("[{}%s]" % _WHITESPACE_OR_CONTROL)


class InvalidInput(ValueError):
    """An input breaks a rule of docs/wire-format.md, "Validation": `rule` names it."""

    def __init__(self, rule, what, reason):
        super().__init__("%s: %s (rule %s, docs/wire-format.md)" % (what, reason, rule))
        self.rule = rule


def _utf8(text, what):
    """`text` in UTF-8; a lone surrogate, which a str can hold, has none."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInput("text.unicode", what, "holds the lone surrogate U+%04X" % ord(text[e.start])) from None


def _check_text(value, kind, rule, not_allowed, allowed, max_bytes=None):
    """Rules `<rule>.length` (1 to max_bytes bytes of UTF-8, when given),
    `<rule>.chars` (no character `not_allowed` matches) and text.unicode."""
    if not isinstance(value, str):
        raise TypeError("%s must be a str, not %s" % (kind, type(value).__name__))
    what = "invalid %s %r" % (kind, value)
    size = len(value.encode("utf-8", "surrogatepass"))
    if max_bytes is not None and not 1 <= size <= max_bytes:
        raise InvalidInput(rule + ".length", what, "is %d bytes of UTF-8; 1 to %d allowed" % (size, max_bytes))
    bad = not_allowed.search(value)
    if bad:
        c = bad.group()
        raise InvalidInput(rule + ".chars", what, "holds %r (U+%04X); %s" % (c, ord(c), allowed))
    _utf8(value, what)


def check_queue_name(name):
    """Raises InvalidInput when Rust would refuse `name` as a queue name."""
    _check_text(name, "queue name", "queue-name", _NOT_IN_QUEUE_NAME,
                "allowed are ASCII letters, digits and - _ . : / @", MAX_QUEUE_NAME_LEN)


def check_key_prefix(prefix):
    """Raises InvalidInput when Rust would refuse `prefix` as a key prefix."""
    _check_text(prefix, "key prefix", "key-prefix", _NOT_IN_KEY_PREFIX,
                "braces, whitespace and control characters are not allowed")


def check_id(id):
    """Raises InvalidInput when Rust would refuse `id` as a message id."""
    _check_text(id, "message id", "id", _NOT_IN_ID,
                "whitespace and control characters are not allowed", MAX_ID_LEN)


def _check_int(value, most, rule, kind):
    # A bool is an int to Python, never a number to Rust.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise InvalidInput(rule, "invalid %s %r" % (kind, value), "must be an integer from 0 to %d" % most)


def _delay(delay_ms, at_ms):
    """The delay to send: delay_ms, or at_ms turned into one by this host's
    clock (as `.at()` does in Rust); rule delay."""
    if delay_ms is not None and at_ms is not None:
        raise ValueError("give delay_ms or at_ms, not both")
    if at_ms is None:
        delay = 0 if delay_ms is None else delay_ms
        _check_int(delay, MAX_DELAY_MS, "delay", "delay_ms")
        return delay
    if isinstance(at_ms, bool) or not isinstance(at_ms, int):
        raise InvalidInput("delay", "invalid at_ms %r" % (at_ms,), "must be an integer (ms since the epoch)")
    delay = max(0, at_ms - _now_ms())
    if delay > MAX_DELAY_MS:
        raise InvalidInput("delay", "invalid at_ms %d" % at_ms, "%d ms from now; at most %d allowed" % (delay, MAX_DELAY_MS))
    return delay


def _headers_section(headers):
    """The stored headers section, "<name>=<value bytes>:<value>" per header
    (docs/wire-format.md, "Headers"), checked against the rules."""
    items = list((headers or {}).items())
    if len(items) > MAX_HEADERS:
        raise InvalidInput("headers.count", "%d headers" % len(items), "at most %d allowed" % MAX_HEADERS)
    section, total = b"", 0
    for name, value in items:
        _check_text(name, "header name", "header-name", _NOT_IN_HEADER_NAME,
                    "allowed are ASCII letters, digits and - _ .", MAX_HEADER_NAME_LEN)
        if not isinstance(value, str):
            raise TypeError("the value of header %r must be a str, not %s" % (name, type(value).__name__))
        value = _utf8(value, "invalid value of header %r" % name)
        total += len(name) + len(value)
        if total > MAX_HEADERS_BYTES:
            raise InvalidInput("headers.bytes", "headers", "names and values exceed %d bytes" % MAX_HEADERS_BYTES)
        section += b"%s=%d:%s" % (name.encode(), len(value), value)
    return section


# --- Messages ---------------------------------------------------------------

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def generate_id():
    """A time-ordered id like the Rust side's: a UUIDv7 in base62."""
    n = (int(time.time() * 1000) << 80) | (0x7 << 76) | (secrets.randbits(12) << 64) | (0b10 << 62) | secrets.randbits(62)
    out = ""
    while n:
        n, r = divmod(n, 62)
        out = _BASE62[r] + out
    return out or "0"


def _now_ms():
    return int(time.time() * 1000)


def _message(payload, delay_ms=None, at_ms=None, id=None, retry_count=3, priority=0, headers=None):
    """(id, stored value, delay ms, own id) of one message, checked."""
    if isinstance(payload, str):
        payload = _utf8(payload, "invalid payload")
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError("payload must be bytes or str")
    if len(payload) > MAX_PAYLOAD:
        raise InvalidInput("payload.size", "payload of %d bytes" % len(payload), "at most %d allowed" % MAX_PAYLOAD)
    delay = _delay(delay_ms, at_ms)
    _check_int(retry_count, MAX_RETRY_COUNT, "retry-count", "retry_count")
    _check_int(priority, MAX_PRIORITY, "priority", "priority")
    own = id is not None
    if own:
        check_id(id)
    else:
        id = generate_id()
    section = _headers_section(headers)
    # "<retry count>[!<priority>][#<headers bytes>]:[<headers>]<payload>"
    # (docs/wire-format.md); send.lua adds the times.
    head = str(retry_count) + ("!%d" % priority if priority else "") + ("#%d" % len(section) if section else "") + ":"
    return id, head.encode() + section + bytes(payload), delay, own


class Producer:
    """Sends to and cancels in queue `name` under `key_prefix`."""

    def __init__(self, client, name, key_prefix="dq:", lua_dir=LUA_DIR):
        check_queue_name(name)
        check_key_prefix(key_prefix)
        self.client = client
        self.name = name
        base = "%s{%s}" % (key_prefix, name)  # src/store/keys.rs
        self._keys = {k: base + ":" + k for k in ("pending", "retries", "unack", "garbage", "totals", "wake")}
        self._msg_prefix = base + ":m:"
        self._send = _Script(load_script("send", lua_dir))
        self._cancel = _Script(load_script("cancel", lua_dir))

    def _store(self, msgs):
        k = self._keys
        keys = [k["pending"], k["retries"], k["unack"], k["garbage"], k["totals"]]
        keys += [self._msg_prefix + m[0] for m in msgs]
        args = [k["wake"], FORMAT_VERSION]
        for id, value, delay, own in msgs:
            # expire_after 0: never expires.
            args += [id, value, delay, 0, 1 if own else 0]
        statuses = self._send.call(self.client, keys, args)
        if len(statuses) != len(msgs):
            raise RuntimeError("send.lua returned %d statuses for %d messages" % (len(statuses), len(msgs)))
        out = []
        for (id, _, _, _), s in zip(msgs, statuses):
            if s == 1:
                out.append(id)
            elif s == 0:
                out.append(DuplicateError("message %s already exists in queue %r" % (id, self.name)))
            else:
                out.append(WrongTypeError("the key of message %s holds another type" % id))
        return out

    def send(self, payload, delay_ms=None, at_ms=None, id=None, retry_count=3, priority=0, headers=None):
        """Sends one message; returns its id. `headers`: a dict of str to str.
        Raises DuplicateError when `id` is live already."""
        result = self._store([_message(payload, delay_ms, at_ms, id, retry_count, priority, headers)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def send_batch(self, messages):
        """Sends dicts of send()'s arguments, BATCH per script call. Every
        message is checked before any is sent; returns, in order, each one's
        id or its DuplicateError / WrongTypeError."""
        msgs = [_message(**m) for m in messages]
        out = []
        for i in range(0, len(msgs), BATCH):
            out += self._store(msgs[i:i + BATCH])
        return out

    def cancel(self, id):
        """Deletes a message waiting for delivery; False when unknown or
        being handled."""
        check_id(id)
        k = self._keys
        keys = [k["pending"], k["retries"], k["unack"], k["garbage"], self._msg_prefix + id]
        return self._cancel.call(self.client, keys, [id]) == 1
