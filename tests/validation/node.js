'use strict';
// Judges every case of tests/validation/cases.json (argv[3]) with the Node
// producer in argv[2], through its public API over a stand-in Redis client,
// and prints one JSON object for tests/polyglot.rs: per section, per case,
// null (accepted) or the rule and message it was refused with; and per
// character check, the code points it judges otherwise than the table's list.

const fs = require('fs');
const path = require('path');
const d = require(path.resolve(process.argv[2], 'delayqueue-producer.js'));

/** Answers send.lua as Redis would for new ids: stored (1) each. */
const standIn = { evalsha: async (sha, numkeys) => Array(numkeys - 5).fill(1) };

function text(v) {
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) return v.map(text).join('');
  if ('repeat' in v) return text(v.repeat).repeat(v.times);
  return String.fromCharCode(...v.utf16);
}

const number = (v) => (typeof v === 'object' ? Number(v.number) : v);

async function verdict(f) {
  try {
    await f();
    return null;
  } catch (e) {
    // A wrong error type is reported, not thrown.
    return { rule: e.rule || e.constructor.name, error: String(e.message) };
  }
}

function send(p, v) {
  const options = {};
  if ('delay_ms' in v) options.delayMs = number(v.delay_ms);
  if ('retry_count' in v) options.retryCount = number(v.retry_count);
  if ('priority' in v) options.priority = number(v.priority);
  if ('id' in v) options.id = text(v.id);
  if ('at_ms_from_now' in v) options.atMs = Date.now() + v.at_ms_from_now;
  if ('group' in v) options.group = text(v.group);
  if ('headers' in v) options.headers = Object.fromEntries(v.headers.map(([n, x]) => [text(n), text(x)]));
  return p.send(text(v.payload === undefined ? '' : v.payload), options);
}

/** Code points (surrogates aside) that `check` judges otherwise than `refused`. */
function sweep(check, refused) {
  const wrong = [];
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    let accepted = true;
    try {
      check(c);
    } catch (e) {
      accepted = false;
    }
    if (accepted === refused(c)) wrong.push(`U+${cp.toString(16).toUpperCase().padStart(4, '0')}`);
  }
  return wrong.slice(0, 20);
}

(async () => {
  const cases = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
  const p = new d.Producer(standIn, 'orders');
  const judge = {
    queue_names: (v) => new d.Producer(standIn, text(v)),
    key_prefixes: (v) => new d.Producer(standIn, 'orders', { keyPrefix: text(v) }),
    ids: (v) => p.send('', { id: text(v) }),
    messages: (v) => send(p, v),
  };
  const out = { cases: {}, sweep: {} };
  for (const [section, f] of Object.entries(judge)) {
    out.cases[section] = [];
    for (const c of cases[section]) out.cases[section].push(await verdict(() => f(c.input)));
  }
  const ranges = cases.forbidden_chars.ranges.map((r) => (r.includes('-') ? r : `${r}-${r}`).split('-').map((h) => parseInt(h, 16)));
  const listed = (c) => ranges.some(([lo, hi]) => lo <= c.codePointAt(0) && c.codePointAt(0) <= hi);
  for (const [name, wrap, refused] of [
    ['checkId', (c) => `a${c}b`, listed],
    ['checkKeyPrefix', (c) => `a${c}:`, (c) => listed(c) || '{}'.includes(c)],
  ]) {
    const check = d[name];
    out.sweep[name] = check ? sweep((c) => check(wrap(c)), refused) : 'missing';
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
