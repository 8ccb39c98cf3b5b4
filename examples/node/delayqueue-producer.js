'use strict';
/**
 * A producer for delayqueue queues in Node, on `ioredis`.
 *
 * It runs the crate's own scripts from `lua/` (send.lua, cancel.lua and the
 * helpers of prelude.lua), assembled as src/store/scripts.rs assembles them,
 * with the keys and arguments the Rust operations pass: a message sent from
 * here is stored exactly as `queue.send` stores it, and a Rust consumer
 * handles it with the same guarantees (due time, idempotent ids, cancel).
 *
 *   const Redis = require('ioredis');
 *   const { Producer } = require('./delayqueue-producer');
 *   const p = new Producer(new Redis(), 'orders');   // key prefix "dq:"
 *   await p.send('close order 42', { delayMs: 1800000, id: 'order-42', retryCount: 5 });
 *   await p.send('report', { atMs: 1893456000000 });
 *   await p.sendBatch([{ payload: 'a' }, { payload: 'b', delayMs: 60000 }]);
 *   await p.cancel('order-42');
 *
 * For an ordinary (unsharded) queue; the Rust side's `.shards(n)` spreads a
 * queue over n key sets that this module does not pick between.
 */

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

/** The crate's `lua/` folder: $DELAYQUEUE_LUA_DIR, else ../../lua from this file. */
const LUA_DIR = process.env.DELAYQUEUE_LUA_DIR || path.join(__dirname, '..', '..', 'lua');

/** Messages per script call (the Rust default batch size). */
const BATCH = 1000;
// The wire format this module writes (docs/wire-format.md). send.lua refuses a
// queue in another format with an error reply starting with "DQFORMAT" (a
// ReplyError) before it writes anything.
const FORMAT_VERSION = 1;

class DuplicateError extends Error {}
class WrongTypeError extends Error {}

// --- Assembling a script as src/store/scripts.rs does ----------------------

/** Lua without its comments, so a name a comment mentions is not a use. */
function codeOf(lua) {
  let code = '';
  let rest = lua;
  for (let at = rest.indexOf('--'); at >= 0; at = rest.indexOf('--')) {
    code += rest.slice(0, at);
    const comment = rest.slice(at);
    let end;
    if (comment.startsWith('--[[')) {
      end = comment.indexOf(']]', 4);
      end = end < 0 ? comment.length : end + 2;
    } else {
      end = comment.indexOf('\n');
      end = end < 0 ? comment.length : end;
    }
    rest = comment.slice(end);
  }
  return code + rest;
}

function definedNames(block) {
  const names = [];
  for (let line of block.split('\n')) {
    if (!line.startsWith('local ')) continue;
    line = line.slice('local '.length);
    if (line.startsWith('function ')) line = line.slice('function '.length);
    const name = /^[A-Za-z0-9_]*/.exec(line)[0];
    if (name) names.push(name);
  }
  return names;
}

function uses(text, name) {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(?<![A-Za-z0-9_])${escaped}(?![A-Za-z0-9_])`).test(text);
}

/** The prelude's blocks (split at blank lines) that `body` needs. */
function preludeFor(prelude, body) {
  const blocks = prelude.split('\n\n').map((b) => [b, definedNames(b)]);
  const needed = blocks.map(([, names]) => names.length === 0);
  const users = [codeOf(body)];
  while (users.length) {
    const user = users.pop();
    blocks.forEach(([block, names], i) => {
      if (!needed[i] && names.some((n) => uses(user, n))) {
        needed[i] = true;
        users.push(codeOf(block));
      }
    });
  }
  return blocks
    .filter((_, i) => needed[i])
    .map(([b]) => b.replace(/\n+$/, '') + '\n\n')
    .join('');
}

/** lua/<name>.lua as Redis runs it: shebang line, the prelude helpers it uses, the rest. */
function loadScript(name, luaDir = LUA_DIR) {
  const text = fs.readFileSync(path.join(luaDir, `${name}.lua`), 'utf8');
  const prelude = fs.readFileSync(path.join(luaDir, 'prelude.lua'), 'utf8');
  const nl = text.indexOf('\n');
  const [shebang, body] = nl < 0 ? [text, ''] : [text.slice(0, nl), text.slice(nl + 1)];
  return `${shebang}\n${preludeFor(prelude, body)}${body}`;
}

class Script {
  constructor(source) {
    this.source = source;
    this.sha = crypto.createHash('sha1').update(source, 'utf8').digest('hex');
  }

  /** EVALSHA; on NOSCRIPT (first use, restart, SCRIPT FLUSH) EVAL with the source. */
  async call(client, keys, args) {
    try {
      return await client.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!String(e.message).startsWith('NOSCRIPT')) throw e;
      return client.eval(this.source, keys.length, ...keys, ...args);
    }
  }
}

// --- Validation -------------------------------------------------------------
// The rules of docs/wire-format.md, "Validation": exactly what the Rust crate
// refuses. A message stored against one is one no Rust consumer reads as it
// was sent (or, for a queue name, one no Rust consumer can be built for).

const MAX_QUEUE_NAME_LEN = 128;
const MAX_ID_LEN = 200;
const MAX_HEADER_NAME_LEN = 64;
const MAX_HEADERS = 16;
const MAX_HEADERS_BYTES = 4096;
const MAX_RETRY_COUNT = 1000;
const MAX_PRIORITY = 9;
/** The Rust crate's MAX_DELAY (3660 days), in ms. */
const MAX_DELAY_MS = 3660 * 24 * 3600 * 1000;
/** The Rust crate's default max_payload_size. */
const MAX_PAYLOAD = 1024 * 1024;

// Rust's char::is_whitespace or char::is_control: JavaScript's \s differs
// from it (it holds U+FEFF, not U+0085).
const WHITESPACE_OR_CONTROL = '\\u0000-\\u0020\\u007f-\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
// The `u` flag makes a regex read code points: a lone surrogate is one, a pair is one.
const NOT_IN_QUEUE_NAME = /[^A-Za-z0-9\-_.:/@]/u;
const NOT_IN_HEADER_NAME = /[^A-Za-z0-9\-_.]/u;
const NOT_IN_ID = new RegExp(`[${WHITESPACE_OR_CONTROL}]`, 'u');
const NOT_IN_KEY_PREFIX = new RegExp(`[{}${WHITESPACE_OR_CONTROL}]`, 'u');
const LONE_SURROGATE = /\p{Cs}/u;

/** An input breaks a rule of docs/wire-format.md, "Validation": `rule` names it. */
class InvalidInputError extends RangeError {
  constructor(rule, what, reason) {
    super(`${what}: ${reason} (rule ${rule}, docs/wire-format.md)`);
    this.rule = rule;
  }
}

const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
const INVISIBLE = new RegExp(NOT_IN_ID.source, 'gu');

/** `text` quoted, its whitespace and control characters escaped, as an error shows it. */
const shown = (text) => JSON.stringify(text).replace(INVISIBLE, (c) => (c === ' ' ? c : `\\u${codePoint(c).slice(2)}`));

/** Rule text.unicode: a lone surrogate, which a string can hold, has no UTF-8 form (Buffer writes U+FFFD for it). */
function checkUnicode(text, what) {
  const bad = LONE_SURROGATE.exec(text);
  if (bad) throw new InvalidInputError('text.unicode', what, `holds the lone surrogate ${codePoint(bad[0])}`);
}

/**
 * Rules `<rule>.length` (1 to maxBytes bytes of UTF-8, when given),
 * `<rule>.chars` (no character `notAllowed` matches) and text.unicode.
 */
function checkText(value, kind, rule, notAllowed, allowed, maxBytes) {
  if (typeof value !== 'string') throw new TypeError(`${kind} must be a string, not ${typeof value}`);
  const what = `invalid ${kind} ${shown(value)}`;
  const size = Buffer.byteLength(value);
  if (maxBytes !== undefined && (size < 1 || size > maxBytes)) {
    throw new InvalidInputError(`${rule}.length`, what, `is ${size} bytes of UTF-8; 1 to ${maxBytes} allowed`);
  }
  const bad = notAllowed.exec(value);
  if (bad) throw new InvalidInputError(`${rule}.chars`, what, `holds ${codePoint(bad[0])}; ${allowed}`);
  checkUnicode(value, what);
}

/** Throws InvalidInputError when Rust would refuse `name` as a queue name. */
function checkQueueName(name) {
  checkText(name, 'queue name', 'queue-name', NOT_IN_QUEUE_NAME, 'allowed are ASCII letters, digits and - _ . : / @', MAX_QUEUE_NAME_LEN);
}

/** Throws InvalidInputError when Rust would refuse `prefix` as a key prefix. */
function checkKeyPrefix(prefix) {
  checkText(prefix, 'key prefix', 'key-prefix', NOT_IN_KEY_PREFIX, 'braces, whitespace and control characters are not allowed');
}

/** Throws InvalidInputError when Rust would refuse `id` as a message id. */
function checkId(id) {
  checkText(id, 'message id', 'id', NOT_IN_ID, 'whitespace and control characters are not allowed', MAX_ID_LEN);
}

function checkInt(value, most, rule, kind) {
  if (!Number.isSafeInteger(value) || value < 0 || value > most) {
    throw new InvalidInputError(rule, `invalid ${kind} ${String(value)}`, `must be an integer from 0 to ${most}`);
  }
}

/** The delay to send: delayMs, or atMs turned into one by this host's clock (as `.at()` does in Rust); rule delay. */
function delayOf(delayMs, atMs) {
  if (delayMs !== undefined && atMs !== undefined) throw new RangeError('give delayMs or atMs, not both');
  if (atMs === undefined) {
    const delay = delayMs === undefined ? 0 : delayMs;
    checkInt(delay, MAX_DELAY_MS, 'delay', 'delayMs');
    return delay;
  }
  if (!Number.isSafeInteger(atMs)) throw new InvalidInputError('delay', `invalid atMs ${String(atMs)}`, 'must be an integer (ms since the epoch)');
  const delay = Math.max(0, atMs - Date.now());
  if (delay > MAX_DELAY_MS) throw new InvalidInputError('delay', `invalid atMs ${atMs}`, `${delay} ms from now; at most ${MAX_DELAY_MS} allowed`);
  return delay;
}

/** The stored headers section, `<name>=<value bytes>:<value>` per header
 * (docs/wire-format.md, "Headers"), checked against the rules. */
function headersSection(headers = {}) {
  const entries = Object.entries(headers);
  if (entries.length > MAX_HEADERS) throw new InvalidInputError('headers.count', `${entries.length} headers`, `at most ${MAX_HEADERS} allowed`);
  let total = 0;
  const parts = entries.map(([name, value]) => {
    checkText(name, 'header name', 'header-name', NOT_IN_HEADER_NAME, 'allowed are ASCII letters, digits and - _ .', MAX_HEADER_NAME_LEN);
    if (typeof value !== 'string') throw new TypeError(`the value of header ${name} must be a string, not ${typeof value}`);
    checkUnicode(value, `invalid value of header ${name}`);
    const v = Buffer.from(value, 'utf8');
    total += name.length + v.length;
    if (total > MAX_HEADERS_BYTES) throw new InvalidInputError('headers.bytes', 'headers', `names and values exceed ${MAX_HEADERS_BYTES} bytes`);
    return Buffer.concat([Buffer.from(`${name}=${v.length}:`), v]);
  });
  return Buffer.concat(parts);
}

// --- Messages ---------------------------------------------------------------

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** An id ordered by its millisecond like the Rust side's: a UUIDv7 in base62. */
function generateId() {
  const r = crypto.randomBytes(10);
  let n = BigInt(Date.now()) << 80n;
  n |= 0x7n << 76n;
  n |= BigInt(r.readUInt16BE(0) & 0xfff) << 64n;
  n |= 0b10n << 62n;
  n |= r.readBigUInt64BE(2) & ((1n << 62n) - 1n);
  let out = '';
  while (n > 0n) {
    out = BASE62[Number(n % 62n)] + out;
    n /= 62n;
  }
  return out || '0';
}

/** [id, stored value, delay ms, own id] of one message, checked. */
function message(payload, { delayMs, atMs, id, retryCount = 3, priority = 0, headers } = {}) {
  let bytes;
  if (typeof payload === 'string') {
    checkUnicode(payload, 'invalid payload');
    bytes = Buffer.from(payload, 'utf8');
  } else if (payload instanceof Uint8Array) {
    bytes = Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  } else {
    throw new TypeError('payload must be a Buffer, a Uint8Array or a string');
  }
  if (bytes.length > MAX_PAYLOAD) throw new InvalidInputError('payload.size', `payload of ${bytes.length} bytes`, `at most ${MAX_PAYLOAD} allowed`);
  const delay = delayOf(delayMs, atMs);
  checkInt(retryCount, MAX_RETRY_COUNT, 'retry-count', 'retryCount');
  checkInt(priority, MAX_PRIORITY, 'priority', 'priority');
  const own = id !== undefined;
  if (own) checkId(id);
  const section = headersSection(headers);
  // "<retry count>[!<priority>][#<headers bytes>]:[<headers>]<payload>"
  // (docs/wire-format.md); send.lua adds the times.
  const head = `${retryCount}${priority ? `!${priority}` : ''}${section.length ? `#${section.length}` : ''}:`;
  return [own ? id : generateId(), Buffer.concat([Buffer.from(head), section, bytes]), delay, own];
}

class Producer {
  /** Sends to and cancels in queue `name` under `keyPrefix`. */
  constructor(client, name, { keyPrefix = 'dq:', luaDir = LUA_DIR } = {}) {
    checkQueueName(name);
    checkKeyPrefix(keyPrefix);
    this.client = client;
    this.name = name;
    const base = `${keyPrefix}{${name}}`; // src/store/keys.rs
    this.keys = {};
    for (const k of ['pending', 'retries', 'unack', 'garbage', 'totals', 'wake']) this.keys[k] = `${base}:${k}`;
    this.msgPrefix = `${base}:m:`;
    this.sendScript = new Script(loadScript('send', luaDir));
    this.cancelScript = new Script(loadScript('cancel', luaDir));
  }

  async store(msgs) {
    const k = this.keys;
    const keys = [k.pending, k.retries, k.unack, k.garbage, k.totals, ...msgs.map((m) => this.msgPrefix + m[0])];
    const args = [k.wake, FORMAT_VERSION];
    // expire_after 0: never expires.
    for (const [id, value, delay, own] of msgs) args.push(id, value, delay, 0, own ? 1 : 0);
    const statuses = await this.sendScript.call(this.client, keys, args);
    if (statuses.length !== msgs.length) throw new Error(`send.lua returned ${statuses.length} statuses for ${msgs.length} messages`);
    return msgs.map(([id], i) => {
      if (statuses[i] === 1) return id;
      if (statuses[i] === 0) return new DuplicateError(`message ${id} already exists in queue ${JSON.stringify(this.name)}`);
      return new WrongTypeError(`the key of message ${id} holds another type`);
    });
  }

  /** Sends one message; resolves to its id; rejects with DuplicateError when `id` is live already. */
  async send(payload, options = {}) {
    const [result] = await this.store([message(payload, options)]);
    if (result instanceof Error) throw result;
    return result;
  }

  /**
   * Sends `[{ payload, delayMs, atMs, id, retryCount, priority }, ...]`, BATCH
   * per script call. Every message is checked before any is sent; resolves,
   * in order, to each one's id or its DuplicateError / WrongTypeError.
   */
  async sendBatch(messages) {
    const msgs = messages.map(({ payload, ...options }) => message(payload, options));
    const out = [];
    for (let i = 0; i < msgs.length; i += BATCH) out.push(...(await this.store(msgs.slice(i, i + BATCH))));
    return out;
  }

  /** Deletes a message waiting for delivery; false when unknown or being handled. */
  async cancel(id) {
    checkId(id);
    const k = this.keys;
    const keys = [k.pending, k.retries, k.unack, k.garbage, this.msgPrefix + id];
    return (await this.cancelScript.call(this.client, keys, [id])) === 1;
  }
}

module.exports = {
  Producer,
  DuplicateError,
  WrongTypeError,
  InvalidInputError,
  checkQueueName,
  checkKeyPrefix,
  checkId,
  loadScript,
  generateId,
  LUA_DIR,
};
