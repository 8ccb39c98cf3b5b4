"""Judges every case of tests/validation/cases.json (argv[2]) with the Python
producer whose package is in folder argv[1], through its public API over a
stand-in Redis client, and prints one JSON object for tests/polyglot.rs: per
section, per case, null (accepted) or the rule and message it was refused
with; and per character check, the code points it judges otherwise than the
table's list."""

import json
import struct
import sys

sys.path.insert(0, sys.argv[1])
import delayqueue_producer as d  # noqa: E402


class StandIn:
    """Answers send.lua as Redis would for new ids: stored (1) each."""

    def evalsha(self, sha, numkeys, *keys_and_args):
        return [1] * (numkeys - 5)


def text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "".join(text(p) for p in v)
    if "repeat" in v:
        return text(v["repeat"]) * v["times"]
    units = v["utf16"]
    return struct.pack("<%dH" % len(units), *units).decode("utf-16-le", "surrogatepass")


def number(v):
    return float(v["number"]) if isinstance(v, dict) else v


def verdict(f):
    try:
        f()
        return None
    except Exception as e:  # a wrong exception type is reported, not raised
        return {"rule": getattr(e, "rule", type(e).__name__), "error": str(e)}


def send(p, v):
    kw = {k: number(v[k]) for k in ("delay_ms", "retry_count", "priority") if k in v}
    if "id" in v:
        kw["id"] = text(v["id"])
    if "at_ms_from_now" in v:
        kw["at_ms"] = d.now_ms() + v["at_ms_from_now"]
    if "group" in v:
        kw["group"] = text(v["group"])
    if "headers" in v:
        kw["headers"] = {text(n): text(x) for n, x in v["headers"]}
    p.send(text(v.get("payload", "")), **kw)


def sweep(check, refused):
    """Code points (surrogates aside) that `check` judges otherwise than `refused`."""
    wrong = []
    for c in map(chr, range(0x110000)):
        if 0xD800 <= ord(c) <= 0xDFFF:
            continue
        try:
            check(c)
            accepted = True
        except Exception:
            accepted = False
        if accepted == refused(c):
            wrong.append("U+%04X" % ord(c))
    return wrong[:20]


cases = json.load(open(sys.argv[2], encoding="utf-8"))
p = d.Producer(StandIn(), "orders")
judge = {
    "queue_names": lambda v: d.Producer(StandIn(), text(v)),
    "key_prefixes": lambda v: d.Producer(StandIn(), "orders", key_prefix=text(v)),
    "ids": lambda v: p.send("", id=text(v)),
    "messages": lambda v: send(p, v),
}
out = {"cases": {s: [verdict(lambda: f(c["input"])) for c in cases[s]] for s, f in judge.items()}, "sweep": {}}
ranges = [[int(h, 16) for h in (r.split("-") * 2)[:2]] for r in cases["forbidden_chars"]["ranges"]]


listed = {chr(cp) for lo, hi in ranges for cp in range(lo, hi + 1)}.__contains__


for name, wrap, refused in [
    ("check_id", "a%sb", listed),
    ("check_key_prefix", "a%s:", lambda c: listed(c) or c in "{}"),
]:
    check = getattr(d, name, None)
    out["sweep"][name] = sweep(lambda c: check(wrap % c), refused) if check else "missing"
print(json.dumps(out))
