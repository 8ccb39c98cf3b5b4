/**
 * A producer for delayqueue queues in Node, on `ioredis`.
 *
 * It runs the delayqueue crate's own send and cancel scripts, which this
 * package carries in `generated/` exactly as the crate assembles them, with
 * the keys and arguments the Rust operations pass, after checking every input
 * against the crate's rules (`generated/wire.json`): a message sent from here
 * is stored exactly as `queue.send` stores it, and a Rust consumer handles it
 * with the same guarantees (due time, idempotent ids, cancel).
 *
 *   const Redis = require('ioredis');
 *   const { Producer } = require('delayqueue-producer');
 *   const p = new Producer(new Redis(), 'orders');   // key prefix "dq:"
 *   await p.send('close order 42', { delayMs: 1800000, id: 'order-42', retryCount: 5 });
 *   await p.send('report', { atMs: 1893456000000 });
 *   await p.sendBatch([{ payload: 'a' }, { payload: 'b', delayMs: 60000 }]);
 *   await p.cancel('order-42');
 *   await p.send('close order 42', { after: ['charge-42', { queue: 'mail', id: 'receipt-42' }] });
 *
 * For an ordinary (unsharded) queue; the Rust side's `.shards(n)` spreads a
 * queue over n key sets that this module does not pick between.
 */

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

/** A file of `generated/`, written by the delayqueue crate (src/producer_files_tests.rs) and carried by this package. */
const generated = (name) => fs.readFileSync(path.join(__dirname, 'generated', name), 'utf8');

/** The keys and input rules of docs/wire-format.md, from the crate's constants. */
const WIRE = JSON.parse(generated('wire.json'));
/** Messages per script call (the Rust default batch size). */
const BATCH = WIRE.batch_size;
// The wire format this module writes (docs/wire-format.md). send.lua refuses a
// queue in another format with an error reply starting with "DQFORMAT" (a
// ReplyError) before it writes anything.
const FORMAT_VERSION = WIRE.format_version;

/** The id is live already, or a uniqueForMs or throttleMs window of it holds
 * (docs/dedup.md): `until` is when that window ends, ms of Redis time (null:
 * a live message holds it). */
class DuplicateError extends Error {
  constructor(message, until = null) {
    super(message);
    this.until = until;
  }
}
class WrongTypeError extends Error {}
/** A replace found no pending message: `live` is true when the message is due
 * or being handled, false when there is none (docs/dedup.md). */
class NotPendingError extends Error {
  constructor(message, live) {
    super(message);
    this.live = live;
  }
}

/** The source of script `name` ('send', 'cancel', 'flow_deps', 'flow_link' or 'flow_complete') as Redis runs it. */
const script = (name) => generated(`${name}.lua`);

class Script {
  constructor(name) {
    this.source = script(name);
    this.sha = crypto.createHash('sha1').update(this.source, 'utf8').digest('hex');
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

const SEND = new Script('send');
const CANCEL = new Script('cancel');
const FLOW_DEPS = new Script('flow_deps');
const FLOW_LINK = new Script('flow_link');
const FLOW_COMPLETE = new Script('flow_complete');

// --- Validation -------------------------------------------------------------
// The rules of docs/wire-format.md, "Validation", with the numbers and
// character sets of wire.json: exactly what the Rust crate refuses. A message
// stored against one is one no Rust consumer reads as it was sent (or, for a
// queue name, one no Rust consumer can be built for).

/** A regex matching a code point that text rule `rule` refuses; the `u` flag reads code points, a lone surrogate too. */
const refused = (rule, flags = 'u') => {
  const hex = (cp) => `\\u{${cp.toString(16)}}`;
  return new RegExp(`[${WIRE[rule].refused_code_points.map(([lo, hi]) => `${hex(lo)}-${hex(hi)}`).join('')}]`, flags);
};
const TEXT_RULES = Object.fromEntries(['queue-name', 'key-prefix', 'id', 'header-name', 'group'].map((r) => [r, refused(r)]));
const LONE_SURROGATE = /\p{Cs}/u;

/** An input breaks a rule of docs/wire-format.md, "Validation": `rule` names it. */
class InvalidInputError extends RangeError {
  constructor(rule, what, reason) {
    super(`${what}: ${reason} (rule ${rule}, docs/wire-format.md)`);
    this.rule = rule;
  }
}

/**
 * A send with `after` the Rust crate refuses too (its Error::InvalidFlow):
 * more than WIRE['flow-children'].max refs, a message waiting for itself,
 * `after` with uniqueForMs, throttleMs, debounceMs or replace, an unknown
 * onDeadChild, or a sharded queue among the parent's and its children's (this
 * module writes unsharded queues only). Nothing was written.
 */
class InvalidFlowError extends RangeError {}

const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
const INVISIBLE = refused('id', 'gu');

/** `text` quoted, its whitespace and control characters escaped, as an error shows it. */
const shown = (text) => JSON.stringify(text).replace(INVISIBLE, (c) => (c === ' ' ? c : `\\u${codePoint(c).slice(2)}`));

/** Rule text.unicode: a lone surrogate, which a string can hold, has no UTF-8 form (Buffer writes U+FFFD for it). */
function checkUnicode(text, what) {
  const bad = LONE_SURROGATE.exec(text);
  if (bad) throw new InvalidInputError('text.unicode', what, `holds the lone surrogate ${codePoint(bad[0])}`);
}

/**
 * Rules `<rule>.length` (1 to max_bytes bytes of UTF-8, when the rule has
 * a maximum), `<rule>.chars` and text.unicode.
 */
function checkText(value, kind, rule) {
  if (typeof value !== 'string') throw new TypeError(`${kind} must be a string, not ${typeof value}`);
  const what = `invalid ${kind} ${shown(value)}`;
  const most = WIRE[rule].max_bytes;
  const size = Buffer.byteLength(value);
  if (most !== undefined && (size < 1 || size > most)) {
    throw new InvalidInputError(`${rule}.length`, what, `is ${size} bytes of UTF-8; 1 to ${most} allowed`);
  }
  const bad = TEXT_RULES[rule].exec(value);
  if (bad) throw new InvalidInputError(`${rule}.chars`, what, `holds ${codePoint(bad[0])}; ${WIRE[rule].hint}`);
  checkUnicode(value, what);
}

/** Throws InvalidInputError when Rust would refuse `name` as a queue name. */
function checkQueueName(name) {
  checkText(name, 'queue name', 'queue-name');
}

/** Throws InvalidInputError when Rust would refuse `prefix` as a key prefix. */
function checkKeyPrefix(prefix) {
  checkText(prefix, 'key prefix', 'key-prefix');
}

/** Throws InvalidInputError when Rust would refuse `id` as a message id. */
function checkId(id) {
  checkText(id, 'message id', 'id');
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
    checkInt(delay, WIRE.delay.max_ms, 'delay', 'delayMs');
    return delay;
  }
  if (!Number.isSafeInteger(atMs)) throw new InvalidInputError('delay', `invalid atMs ${String(atMs)}`, 'must be an integer (ms since the epoch)');
  const delay = Math.max(0, atMs - Date.now());
  if (delay > WIRE.delay.max_ms) throw new InvalidInputError('delay', `invalid atMs ${atMs}`, `${delay} ms from now; at most ${WIRE.delay.max_ms} allowed`);
  return delay;
}

/** The stored headers section, `<name>=<value bytes>:<value>` per header
 * (docs/wire-format.md, "Headers"), checked against the rules. */
function headersSection(headers = {}) {
  const entries = Object.entries(headers);
  const { max_count: mostCount, max_bytes: mostBytes } = WIRE.headers;
  if (entries.length > mostCount) throw new InvalidInputError('headers.count', `${entries.length} headers`, `at most ${mostCount} allowed`);
  let total = 0;
  const parts = entries.map(([name, value]) => {
    checkText(name, 'header name', 'header-name');
    if (typeof value !== 'string') throw new TypeError(`the value of header ${name} must be a string, not ${typeof value}`);
    checkUnicode(value, `invalid value of header ${name}`);
    const v = Buffer.from(value, 'utf8');
    total += name.length + v.length;
    if (total > mostBytes) throw new InvalidInputError('headers.bytes', 'headers', `names and values exceed ${mostBytes} bytes`);
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

/** send.lua's mode letters of a message (docs/dedup.md), checked; `timed`: delayMs or atMs was given. */
function modeOf(id, { uniqueForMs, throttleMs, debounceMs, replace = false }, timed) {
  const given = [['u', uniqueForMs], ['t', throttleMs], ['d', debounceMs]].filter(([, v]) => v !== undefined);
  if (given.length + (replace ? 1 : 0) > 1) throw new RangeError('give at most one of uniqueForMs, throttleMs, debounceMs and replace');
  if ((given.length || replace) && id === undefined) throw new RangeError('uniqueForMs, throttleMs, debounceMs and replace need an id');
  if (replace) return timed ? 'R' : 'r';
  if (!given.length) return '';
  const [letter, ms] = given[0];
  checkInt(ms, WIRE.window.max_ms, 'window', 'window');
  if (ms < 1) throw new InvalidInputError('window', `a window of ${ms} ms`, `1 ms to ${WIRE.window.max_ms} ms allowed`);
  if (letter === 'd' && timed) throw new RangeError('debounceMs sets the due time: give no delayMs or atMs with it');
  return letter === 'd' ? 'd' : `${letter}${ms}`;
}

/**
 * onDeadChild's values and the letters the scripts keep them as
 * (docs/workflows.md): fail the parent, ignore the child, wait for it to be
 * requeued, remove the parent.
 */
const POLICIES = { fail: 'f', ignore: 'i', wait: 'w', remove: 'r' };

/**
 * The children of a send with `after` (ids of this queue, or `{ queue, id }`),
 * checked as the Rust crate checks them (rules queue-name.* and id.* per ref;
 * InvalidFlowError for the rest): `{ children: [[queue or null, id], ...]
 * (sorted, without repeats), policy letter }`, or null when it waits for none.
 */
function depsOf(after, onDeadChild, mode) {
  if (!Object.hasOwn(POLICIES, onDeadChild)) {
    throw new InvalidFlowError(`onDeadChild must be one of ${Object.keys(POLICIES).join(', ')}, not ${shown(String(onDeadChild))}`);
  }
  if (after === undefined) return null;
  if (!Array.isArray(after)) throw new TypeError('after must be an array of ids or { queue, id } objects');
  if (!after.length) return null;
  const most = WIRE['flow-children'].max;
  if (after.length > most) throw new InvalidFlowError(`${after.length} children, more than ${most}`);
  if (mode) throw new InvalidFlowError('a message that waits for others cannot be sent with uniqueForMs, throttleMs, debounceMs or replace');
  const children = new Map();
  for (const ref of after) {
    let queue = null;
    let id = ref;
    if (ref !== null && typeof ref === 'object') {
      ({ queue, id } = ref);
      checkQueueName(queue);
    } else if (typeof ref !== 'string') {
      throw new TypeError(`a ref of after must be an id or a { queue, id } object, not ${typeof ref}`);
    }
    checkId(id);
    children.set(JSON.stringify([queue, id]), [queue, id]);
  }
  const key = ([q, id]) => [q ?? '', id];
  const order = (a, b) => {
    const [x, y] = [key(a), key(b)];
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0;
  };
  return { children: [...children.values()].sort(order), policy: POLICIES[onDeadChild] };
}

/** [id, stored value, delay ms, own id, mode letters, children or null] of one message, checked. */
function message(
  payload,
  { delayMs, atMs, id, retryCount = WIRE.default_retry_count, priority = 0, group, headers, after, onDeadChild = 'fail', ...modes } = {},
) {
  const mode = modeOf(id, modes, delayMs !== undefined || atMs !== undefined);
  const deps = depsOf(after, onDeadChild, mode);
  if (modes.debounceMs !== undefined) delayMs = modes.debounceMs;
  let bytes;
  if (typeof payload === 'string') {
    checkUnicode(payload, 'invalid payload');
    bytes = Buffer.from(payload, 'utf8');
  } else if (payload instanceof Uint8Array) {
    bytes = Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  } else {
    throw new TypeError('payload must be a Buffer, a Uint8Array or a string');
  }
  const most = WIRE.payload.max_bytes;
  if (bytes.length > most) throw new InvalidInputError('payload.size', `payload of ${bytes.length} bytes`, `at most ${most} allowed`);
  const delay = delayOf(delayMs, atMs);
  checkInt(retryCount, WIRE['retry-count'].max, 'retry-count', 'retryCount');
  checkInt(priority, WIRE.priority.max, 'priority', 'priority');
  const own = id !== undefined;
  if (own) checkId(id);
  if (group !== undefined) checkText(group, 'group', 'group');
  const section = headersSection(headers);
  // "<retry count>[!<priority>][=<group>][#<headers bytes>]:[<headers>]<payload>"
  // (docs/wire-format.md); send.lua adds the times.
  const head = `${retryCount}${priority ? `!${priority}` : ''}${group !== undefined ? `=${group}` : ''}${section.length ? `#${section.length}` : ''}:`;
  return [own ? id : generateId(), Buffer.concat([Buffer.from(head), section, bytes]), delay, own, mode, deps];
}

class Producer {
  /**
   * Sends to and cancels in queue `name` under `keyPrefix`.
   * `deadLetterRetentionMs`: the queue's (the Rust default when not given),
   * for a parent sent with `after` that a child already dead fails.
   */
  constructor(client, name, { keyPrefix = 'dq:', deadLetterRetentionMs = WIRE.dead_letter_retention_ms } = {}) {
    checkQueueName(name);
    checkKeyPrefix(keyPrefix);
    checkInt(deadLetterRetentionMs, WIRE.delay.max_ms, 'delay', 'deadLetterRetentionMs');
    this.client = client;
    this.name = name;
    this.prefix = keyPrefix;
    this.base = this.baseOf(name);
    this.retention = deadLetterRetentionMs;
  }

  /** `<keyPrefix>{<queue>}:`, the start of every key of queue `queue` (docs/wire-format.md, "Keys"), which a flow's refs name it by. */
  baseOf(queue) {
    return `${this.prefix}{${queue}}:`;
  }

  /** The base of a child's queue: the parent's when the ref named none. */
  childBase(queue) {
    return queue === null ? this.base : this.baseOf(queue);
  }

  /**
   * Refuses a send with after that names a sharded queue (its shard count in
   * the totals' field `shards`, docs/wire-format.md), before anything is
   * written: its messages are not in the unsharded keys this module names, so
   * a child there would be taken as finished.
   */
  async checkUnsharded(queues) {
    for (const queue of [...new Set(queues.map((q) => q ?? this.name))].sort()) {
      const shards = await this.client.hget(`${this.baseOf(queue)}totals`, 'shards');
      if (shards === null) continue;
      throw new InvalidFlowError(`queue ${JSON.stringify(queue)} is spread over ${shards} shards: this module writes unsharded queues only`);
    }
  }

  /**
   * Step one of a send with after (docs/wire-format.md, "Sending with
   * after"): each parent's set of children to wait for, filled before the
   * parent is stored. A parent already live (which send.lua refuses as a
   * duplicate) gets none: returns, per parent id, the children to link in
   * step three, for a live one those its set holds.
   */
  async addDeps(msgs) {
    const parents = msgs.filter(([, , , , , deps]) => deps);
    if (parents.length) await this.checkUnsharded([null, ...parents.flatMap(([, , , , , deps]) => deps.children.map(([q]) => q))]);
    const linkable = new Map();
    for (const [id, , , , , deps] of parents) {
      const members = deps.children.map(([q, child]) => `${this.childBase(q)} ${child}`);
      if (members.includes(`${this.base} ${id}`)) throw new InvalidFlowError(`message ${id} cannot wait for itself`);
      const keys = [this.base + WIRE.deps_key + id, this.base + WIRE.message_key + id];
      const held = [];
      for (let i = 0; i < members.length; i += BATCH) {
        const chunk = members.slice(i, i + BATCH);
        const reply = await FLOW_DEPS.call(this.client, keys, chunk);
        // [-1, flags...]: live, nothing added; [added]: all to link.
        held.push(...(reply[0] === -1 ? reply.slice(1).map((f) => f === 1) : chunk.map(() => true)));
      }
      linkable.set(id, { ...deps, children: deps.children.filter((_, i) => held[i]) });
    }
    return linkable;
  }

  /**
   * Step three: links parent `id`, stored (or found stored: a re-send), to
   * each child in the child's queue, and completes at once the children no
   * longer stored (taken as acked) or dead under a policy that does not wait.
   */
  async link(id, { children, policy }) {
    const link = `${policy} ${this.base} ${id}`;
    const byBase = new Map();
    for (const [q, child] of children) {
      const base = this.childBase(q);
      if (!byBase.has(base)) byBase.set(base, []);
      byBase.get(base).push(child);
    }
    const done = [];
    for (const base of [...byBase.keys()].sort()) {
      const ids = byBase.get(base);
      const keys = WIRE.flow_link_keys.map((k) => base + k);
      for (let i = 0; i < ids.length; i += BATCH) {
        const chunk = ids.slice(i, i + BATCH);
        const statuses = await FLOW_LINK.call(this.client, keys, [base + WIRE.message_key, link, ...chunk]);
        // 1 linked; 3 acked, its completion (with its kept result)
        // recorded for the relay; 0 no longer stored (acked); 2 dead.
        chunk.forEach((child, j) => {
          if (statuses[j] === 0 || statuses[j] === 2) done.push(id, `${base} ${child}`, `${statuses[j] === 0 ? 'a' : 'd'}${policy}`, '');
        });
      }
    }
    const keys = WIRE.flow_complete_keys.map((k) => this.base + k);
    const head = [this.base + WIRE.message_key, this.base + WIRE.wake_channel, this.retention];
    for (let i = 0; i < done.length; i += 4 * BATCH) await FLOW_COMPLETE.call(this.client, keys, [...head, ...done.slice(i, i + 4 * BATCH)]);
  }

  /** The KEYS of script `which`: the queue's, then each message's. */
  keys(which, ids) {
    return [...WIRE[`${which}_keys`].map((k) => this.base + k), ...ids.map((id) => this.base + WIRE.message_key + id)];
  }

  async store(msgs) {
    const linkable = await this.addDeps(msgs);
    const args = [this.base + WIRE.wake_channel, FORMAT_VERSION];
    // expire_after 0: never expires.
    // The mode follows the id flag (docs/dedup.md); "w": a parent that waits for its children.
    for (const [id, value, delay, own, mode, deps] of msgs) args.push(id, value, delay, 0, `${own ? 1 : 0}${deps ? 'w' : mode}`);
    // A uniqueForMs or throttleMs message's marker follows the message keys.
    const markers = msgs.filter(([, , , , mode]) => /^[ut]/.test(mode)).map(([id]) => this.base + WIRE.marker_key + id);
    const reply = await SEND.call(this.client, [...this.keys('send', msgs.map(([id]) => id)), ...markers], args);
    const statuses = reply.slice(0, msgs.length);
    const untils = reply.slice(msgs.length);
    if (statuses.length !== msgs.length) throw new Error(`send.lua returned ${statuses.length} statuses for ${msgs.length} messages`);
    // A parent stored, or live already (a re-send), is linked to its children.
    for (const [i, [id, , , , , deps]] of msgs.entries()) {
      // 8: stored after a child linked to it finished; the link completes it.
      if (deps && [0, 1, 8].includes(statuses[i])) await this.link(id, linkable.get(id));
    }
    return msgs.map(([id, , , , mode], i) => {
      const duplicate = `message ${id} already exists in queue ${JSON.stringify(this.name)}`;
      const s = statuses[i];
      if (s === 1 || s === 5 || s === 8) return id;
      if (s === 0 && /^[rR]/.test(mode)) return new NotPendingError(`message ${id} is due or being handled`, true);
      if (s === 0) return new DuplicateError(duplicate);
      if (s === 4) {
        const until = Number(untils.shift());
        return new DuplicateError(duplicate, until >= 0 ? until : null);
      }
      if (s === 6) return new NotPendingError(`no message ${id} in queue ${JSON.stringify(this.name)}`, false);
      return new WrongTypeError(`the key of message ${id} holds another type`);
    });
  }

  /**
   * Sends one message; resolves to its id; rejects with DuplicateError when
   * `id` is live already, or a uniqueForMs or throttleMs window of it holds;
   * debounceMs replaces a pending message of `id` (docs/dedup.md). `after`:
   * messages it waits for (ids of this queue, or `{ queue, id }`): it becomes
   * due once all have finished, and not before its own delay; `onDeadChild`
   * ('fail', 'ignore', 'wait' or 'remove') says what a child that becomes a
   * dead letter does to it (docs/workflows.md).
   */
  async send(payload, options = {}) {
    const [result] = await this.store([message(payload, options)]);
    if (result instanceof Error) throw result;
    return result;
  }

  /**
   * Replaces the pending message `id`, keeping its due time unless delayMs
   * or atMs is given; rejects with NotPendingError, nothing written, when it
   * is due, being handled or missing (docs/dedup.md).
   */
  async replace(id, payload, options = {}) {
    const [result] = await this.store([message(payload, { ...options, id, replace: true })]);
    if (result instanceof Error) throw result;
    return result;
  }

  /**
   * Sends `[{ payload, delayMs, atMs, id, retryCount, priority, group, headers, after, onDeadChild }, ...]`, BATCH
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
    // Then the id's marker (docs/dedup.md), whose window a cancel starts.
    const keys = [...this.keys('cancel', [id]), this.base + WIRE.marker_key + id];
    return (await CANCEL.call(this.client, keys, [id, this.base + WIRE.group_key])) === 1;
  }

  /**
   * Aborts a message (docs/handlers.md in the crate, "Aborting a running
   * handler"): one waiting is cancelled ('cancelled'); one being handled has
   * its handler told and ends as aborted ('aborting'); 'already_aborted'
   * while an aborted one has not ended yet, 'not_found' for an unknown or
   * finished id (both write nothing).
   */
  async abort(id) {
    checkId(id);
    const keys = [...this.keys('cancel', [id]), this.base + WIRE.marker_key + id];
    const args = [id, this.base + WIRE.group_key, 'abort', this.base + WIRE.wake_channel];
    const outcome = await CANCEL.call(this.client, keys, args);
    return ['not_found', 'cancelled', 'aborting', 'already_aborted'][Number(outcome)];
  }

  /**
   * The result the handler of acked message `id` returned (a Buffer), while
   * the queue keeps it (its result_retention); null when there is none.
   */
  async result(id) {
    checkId(id);
    return this.client.getBuffer(this.base + WIRE.result_key + id);
  }
}

module.exports = {
  Producer,
  DuplicateError,
  NotPendingError,
  WrongTypeError,
  InvalidInputError,
  InvalidFlowError,
  checkQueueName,
  checkKeyPrefix,
  checkId,
  generateId,
  script,
  WIRE,
  FORMAT_VERSION,
  BATCH,
};
