"""The package against a private redis-server (REDIS_SERVER_BIN, else
redis-server from PATH) on a free loopback port, killed at the end.

    python -m unittest discover -s tests

Run it against the installed package (scripts/test-producers.sh installs
it with pip into a fresh venv). tests/polyglot.rs in the crate checks that
a Rust consumer handles what it sends and that it refuses what Rust refuses.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from importlib import resources
from typing import Optional

import redis

import delayqueue_producer as d

_server: Optional[subprocess.Popen[bytes]] = None
_port = 0


def setUpModule() -> None:
    global _server, _port
    binary = os.environ.get("REDIS_SERVER_BIN") or shutil.which("redis-server")
    if not binary:
        raise RuntimeError("no redis-server: set REDIS_SERVER_BIN or put redis-server on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        _port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="delayqueue-producer-test-")
    _server = subprocess.Popen(
        [binary, "--port", str(_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=_port)
    deadline = time.monotonic() + 30
    for _ in range(3000):
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if _server.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    tearDownModule()
    raise RuntimeError("redis-server on port %d did not answer" % _port)


def tearDownModule() -> None:
    if _server is not None:
        _server.kill()
        _server.wait(timeout=30)


class ProducerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=_port)
        self.client.flushall()
        self.producer = d.Producer(self.client, "orders")

    def tearDown(self) -> None:
        self.client.close()

    def stored(self, id: str) -> bytes:
        """The stored value of message `id` in queue orders."""
        value = self.client.get("dq:{orders}:m:" + id)
        assert isinstance(value, bytes), value
        return value

    def test_a_message_is_stored_as_the_wire_format_says(self) -> None:
        before = d.now_ms()
        id = self.producer.send(
            "héllo", delay_ms=60_000, id="order-42", retry_count=5, priority=2, headers={"tenant": "acme"}
        )
        self.assertEqual(id, "order-42")
        value = self.stored("order-42")
        # "<retry count>!<priority>#<headers bytes>/<sent at>+<delay>:<headers><payload>"
        head, _, rest = value.partition(b":")
        self.assertTrue(head.startswith(b"5!2#13/"), value)
        self.assertTrue(head.endswith(b"+60000"), value)
        self.assertEqual(rest, b"tenant=4:acme" + "héllo".encode())
        due = self.client.zscore("dq:{orders}:pending", "order-42")
        assert due is not None
        self.assertGreaterEqual(due, before + 60_000)
        self.assertEqual(self.client.hget("dq:{orders}:totals", "format"), str(d.FORMAT_VERSION).encode())

    def test_a_live_id_is_refused_and_a_waiting_message_cancelled(self) -> None:
        self.producer.send(b"\x00\xff", id="x", delay_ms=60_000)
        with self.assertRaises(d.DuplicateError):
            self.producer.send("again", id="x")
        self.assertTrue(self.producer.cancel("x"))
        self.assertFalse(self.producer.cancel("x"))
        self.assertEqual(self.client.exists("dq:{orders}:m:x", "dq:{orders}:pending"), 0)
        # A grouped message's cancel reads the group key prefix (docs/groups.md).
        self.producer.send("grouped", id="g", delay_ms=60_000, group="tenant-1")
        self.assertTrue(self.producer.cancel("g"))
        self.assertEqual(self.client.exists("dq:{orders}:m:g"), 0)

    def test_abort_cancels_a_waiting_message_and_marks_one_being_handled(self) -> None:
        self.producer.send("w", id="w", delay_ms=60_000)
        self.assertEqual(self.producer.abort("w"), "cancelled")
        self.assertEqual(self.producer.abort("w"), "not_found")
        # Being handled: as a claim leaves it, in processing (docs/wire-format.md).
        self.producer.send("r", id="r", delay_ms=60_000)
        self.client.zrem("dq:{orders}:pending", "r")
        self.client.zadd("dq:{orders}:unack", {"r": 99999999999999999})
        self.assertEqual(self.producer.abort("r"), "aborting")
        self.assertTrue(self.client.hexists("dq:{orders}:aborted", "r"))
        self.assertEqual(self.producer.abort("r"), "already_aborted")
        self.assertEqual(self.client.exists("dq:{orders}:m:r"), 1)

    def test_a_result_is_read_from_the_key_the_ack_writes(self) -> None:
        self.assertIsNone(self.producer.result("order-7"))
        # As ack.lua writes it (docs/results.md).
        self.client.set("dq:{orders}:result:order-7", b"\x00paid", px=60_000)
        self.assertEqual(self.producer.result("order-7"), b"\x00paid")
        with self.assertRaises(d.InvalidInput):
            self.producer.result("bad id")

    def test_unique_for_throttle_debounce_and_replace(self) -> None:
        # docs/dedup.md: a cancel starts a unique_for window.
        self.producer.send("u", id="u", delay_ms=60_000, unique_for_ms=3_600_000)
        self.assertEqual(self.client.pttl("dq:{orders}:uniq:u"), -1)
        self.assertTrue(self.producer.cancel("u"))
        with self.assertRaises(d.DuplicateError) as refused:
            self.producer.send("u again", id="u", unique_for_ms=3_600_000)
        self.assertIsNotNone(refused.exception.until)
        self.producer.send("t", id="t", throttle_ms=60_000)
        with self.assertRaises(d.DuplicateError):
            self.producer.send("t again", id="t", throttle_ms=60_000)
        self.producer.send("d1", id="d", debounce_ms=60_000)
        self.producer.send("d2", id="d", debounce_ms=60_000)
        self.assertTrue(self.stored("d").endswith(b":d2"))
        self.assertEqual(self.producer.replace("d", "d3"), "d")
        self.assertTrue(self.stored("d").endswith(b":d3"))
        with self.assertRaises(d.NotPendingError) as missing:
            self.producer.replace("none", "x")
        self.assertFalse(missing.exception.live)
        with self.assertRaises(ValueError):
            self.producer.send("x", unique_for_ms=1_000)
        with self.assertRaises(d.InvalidInput):
            self.producer.send("x", id="w", throttle_ms=0)

    def test_a_batch_reports_each_message(self) -> None:
        self.producer.send("first", id="b1")
        out = self.producer.send_batch([{"payload": "a"}, {"payload": "b", "id": "b1"}, {"payload": "c", "at_ms": 0}])
        self.assertIsInstance(out[0], str)
        self.assertIsInstance(out[1], d.DuplicateError)
        self.assertIsInstance(out[2], str)
        self.assertEqual(self.client.zcard("dq:{orders}:pending"), 3)

    def test_a_parent_sent_with_after_waits_for_its_children(self) -> None:
        mail = d.Producer(self.client, "mail")
        self.producer.send("charge", id="c1", delay_ms=60_000)
        mail.send("receipt", id="r1", delay_ms=60_000)
        parent = self.producer.send("close", id="p1", after=["c1", ("mail", "r1"), "c1"], on_dead_child="ignore")
        self.assertEqual(parent, "p1")
        # Waiting, not pending (docs/wire-format.md, "Sending with after").
        self.assertIsNotNone(self.client.zscore("dq:{orders}:flow:waiting", "p1"))
        self.assertIsNone(self.client.zscore("dq:{orders}:pending", "p1"))
        self.assertEqual(
            self.client.smembers("dq:{orders}:deps:p1"), {b"dq:{orders}: c1", b"dq:{mail}: r1"}
        )
        # Each child linked in its own queue, with the policy's letter.
        self.assertEqual(self.client.hget("dq:{orders}:parents", "c1"), b"i dq:{orders}: p1")
        self.assertEqual(self.client.hget("dq:{mail}:parents", "r1"), b"i dq:{orders}: p1")
        # A re-send links nothing twice.
        with self.assertRaises(d.DuplicateError):
            self.producer.send("close", id="p1", after=["c1", ("mail", "r1")], on_dead_child="ignore")
        self.assertEqual(self.client.hget("dq:{orders}:parents", "c1"), b"i dq:{orders}: p1")

    def test_a_parent_after_children_no_longer_stored_is_due_at_once(self) -> None:
        self.producer.send_batch([{"payload": "close", "id": "p2", "after": ["gone", ("mail", "never-sent")]}])
        # Straight to ready: due now, it needs no promote.
        self.assertEqual(self.client.lrange("dq:{orders}:ready", 0, -1), [b"p2"])
        self.assertEqual(self.client.exists("dq:{orders}:deps:p2", "dq:{orders}:flow:waiting"), 0)
        # Taken as acked (docs/workflows.md).
        self.assertEqual(self.client.hget("dq:{orders}:children:p2", "dq:{orders}: gone"), b"a")

    def test_a_bad_after_is_refused_with_nothing_written(self) -> None:
        for kwargs, error in [
            ({"id": "p", "after": ["p"]}, d.InvalidFlow),
            ({"id": "p", "after": ["c"], "unique_for_ms": 1_000}, d.InvalidFlow),
            ({"after": ["c"], "on_dead_child": "retry"}, d.InvalidFlow),
            ({"after": ["a b"]}, d.InvalidInput),
            ({"after": [("no queue!", "c")]}, d.InvalidInput),
            ({"after": [("mail",)]}, TypeError),
            ({"after": "c"}, TypeError),
        ]:
            with self.assertRaises(error, msg=str(kwargs)):
                self.producer.send("x", **kwargs)
        self.assertEqual(self.client.dbsize(), 0, "nothing was written")
        # A sharded queue records its shard count (docs/wire-format.md).
        self.client.hset("dq:{mail}:totals", "shards", 3)
        with self.assertRaises(d.InvalidFlow):
            self.producer.send("x", after=["c", ("mail", "r")])
        self.assertEqual(self.client.keys("*"), [b"dq:{mail}:totals"], "nothing was written")

    def test_the_scripts_are_the_generated_files_verbatim(self) -> None:
        generated = resources.files("delayqueue_producer").joinpath("generated")
        for name in ("send", "cancel", "flow_deps", "flow_link", "flow_complete"):
            source = generated.joinpath(name + ".lua").read_text(encoding="utf-8")
            self.assertEqual(d.script(name), source)
            self.assertIn("Generated by src/store/scripts.rs from lua/%s.lua" % name, source)
        self.producer.send("warm")
        self.producer.cancel("none")
        shas = [hashlib.sha1(d.script(n).encode()).hexdigest() for n in ("send", "cancel")]
        self.assertEqual(self.client.script_exists(*shas), [True, True])

    def test_inputs_are_checked_against_the_crate_rules(self) -> None:
        most = d.WIRE["queue-name"]["max_bytes"]
        d.check_queue_name("q" * most)
        for check, value, rule in [
            (d.check_queue_name, "q" * (most + 1), "queue-name.length"),
            (d.check_queue_name, "a#1", "queue-name.chars"),
            (d.check_key_prefix, "d{q", "key-prefix.chars"),
            (d.check_id, "a\u2028b", "id.chars"),
            (d.check_id, "a\ud800", "text.unicode"),
        ]:
            with self.assertRaises(d.InvalidInput) as e:
                check(value)
            self.assertEqual(e.exception.rule, rule)
        for kwargs, rule in [
            ({"priority": d.WIRE["priority"]["max"] + 1}, "priority"),
            ({"delay_ms": d.WIRE["delay"]["max_ms"] + 1}, "delay"),
            ({"headers": {"a b": "x"}}, "header-name.chars"),
        ]:
            with self.assertRaises(d.InvalidInput) as e:
                self.producer.send("x", **kwargs)
            self.assertEqual(e.exception.rule, rule)
        with self.assertRaises(d.InvalidInput) as e:
            self.producer.send(b"x" * (d.WIRE["payload"]["max_bytes"] + 1))
        self.assertEqual(e.exception.rule, "payload.size")
        self.assertEqual(self.client.exists("dq:{orders}:pending"), 0, "nothing was sent")

    def test_the_command_line_sends_and_cancels(self) -> None:
        url = "redis://127.0.0.1:%d" % _port

        def run(*args: str, stdin: bytes = b"") -> "subprocess.CompletedProcess[bytes]":
            cmd = [sys.executable, "-m", "delayqueue_producer", "--url", url, *args]
            return subprocess.run(cmd, input=stdin, capture_output=True, timeout=60)

        sent = run("send", "orders", "-", "--id", "cli-1", "--delay-ms", "60000", "--header", "k=v", stdin=b"\x01\x02")
        self.assertEqual((sent.returncode, sent.stdout), (0, b"cli-1\n"), sent.stderr)
        value = self.stored("cli-1")
        self.assertTrue(value.endswith(b":k=1:v\x01\x02"), value)
        again = run("send", "orders", "x", "--id", "cli-1")
        self.assertEqual(again.returncode, 1)
        self.assertIn(b"already exists", again.stderr)
        refused = run("send", "orders", "x", "--id", "a b")
        self.assertEqual(refused.returncode, 2)
        self.assertIn(b"rule id.chars", refused.stderr)
        parent = run(
            "send", "orders", "close", "--id", "p-cli", "--after", "cli-1", "--after-in", "mail=r", "--on-dead-child",
            "ignore"
        )
        self.assertEqual((parent.returncode, parent.stdout), (0, b"p-cli\n"), parent.stderr)
        self.assertEqual(self.client.hget("dq:{orders}:parents", "cli-1"), b"i dq:{orders}: p-cli")
        self.assertIsNotNone(self.client.zscore("dq:{orders}:flow:waiting", "p-cli"))
        itself = run("send", "orders", "x", "--id", "p-self", "--after", "p-self")
        self.assertEqual(itself.returncode, 2, itself.stderr)
        cancelled = run("cancel", "orders", "cli-1")
        self.assertEqual((cancelled.returncode, cancelled.stdout), (0, b"true\n"), cancelled.stderr)


if __name__ == "__main__":
    unittest.main()
