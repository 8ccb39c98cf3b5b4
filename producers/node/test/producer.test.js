'use strict';
// The package against a private redis-server (REDIS_SERVER_BIN, else
// redis-server from PATH) on a free loopback port, killed at the end:
// `npm test`. DELAYQUEUE_PRODUCER names the package to test (default: this
// folder); scripts/test-producers.sh points it at a copy installed with npm.
// tests/polyglot.rs in the crate checks that a Rust consumer handles what it
// sends and that it refuses what Rust refuses.

const { test, before, after, beforeEach } = require('node:test');
const assert = require('node:assert');
const { spawn, execFile } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const dir = path.resolve(process.env.DELAYQUEUE_PRODUCER || path.join(__dirname, '..'));
const d = require(dir);
// ioredis as the package under test resolves it.
const Redis = require(require.resolve('ioredis', { paths: [dir] }));

let server;
let port;
let client;

const freePort = () =>
  new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port: p } = s.address();
      s.close(() => resolve(p));
    });
  });

before(async () => {
  port = await freePort();
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'delayqueue-producer-test-'));
  const binary = process.env.REDIS_SERVER_BIN || 'redis-server';
  server = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', workdir], { stdio: 'ignore' });
  let exited = null;
  server.on('error', (e) => {
    exited = e;
  });
  server.on('exit', (code) => {
    exited = exited || new Error(`${binary} exited with ${code}`);
  });
  client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  // Refused connections while the server starts are expected: connect() reports them.
  client.on('error', () => {});
  const deadline = Date.now() + 30000;
  for (let i = 0; i < 3000; i++) {
    if (exited) throw exited;
    try {
      await client.connect();
      await client.ping();
      return;
    } catch (e) {
      if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer: ${e.message}`);
      client.disconnect();
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  throw new Error(`redis-server on port ${port} did not answer`);
});

after(() => {
  if (client) client.disconnect();
  if (server) server.kill('SIGKILL');
});

beforeEach(async () => {
  await client.flushall();
});

test('a message is stored as the wire format says', async () => {
  const p = new d.Producer(client, 'orders');
  const before = Date.now();
  const id = await p.send('h\u00e9llo', { delayMs: 60000, id: 'order-42', retryCount: 5, priority: 2, headers: { tenant: 'acme' } });
  assert.strictEqual(id, 'order-42');
  const value = await client.getBuffer('dq:{orders}:m:order-42');
  // "<retry count>!<priority>#<headers bytes>/<sent at>+<delay>:<headers><payload>"
  const colon = value.indexOf(':');
  const head = value.subarray(0, colon).toString();
  assert.match(head, /^5!2#13\/\d+\+60000$/);
  assert.deepStrictEqual(value.subarray(colon + 1), Buffer.from('tenant=4:acmeh\u00e9llo'));
  const due = Number(await client.zscore('dq:{orders}:pending', 'order-42'));
  assert.ok(due >= before + 60000, `${due}`);
  assert.strictEqual(await client.hget('dq:{orders}:totals', 'format'), String(d.FORMAT_VERSION));
});

test('a live id is refused and a waiting message cancelled', async () => {
  const p = new d.Producer(client, 'orders');
  await p.send(Buffer.from([0, 255]), { id: 'x', delayMs: 60000 });
  await assert.rejects(p.send('again', { id: 'x' }), d.DuplicateError);
  assert.strictEqual(await p.cancel('x'), true);
  assert.strictEqual(await p.cancel('x'), false);
  assert.strictEqual(await client.exists('dq:{orders}:m:x', 'dq:{orders}:pending'), 0);
  // A grouped message's cancel reads the group key prefix (docs/groups.md).
  await p.send('grouped', { id: 'g', delayMs: 60000, group: 'tenant-1' });
  assert.strictEqual(await p.cancel('g'), true);
  assert.strictEqual(await client.exists('dq:{orders}:m:g'), 0);
});

test('abort cancels a waiting message and marks one being handled', async () => {
  const p = new d.Producer(client, 'orders');
  await p.send('w', { id: 'w', delayMs: 60000 });
  assert.strictEqual(await p.abort('w'), 'cancelled');
  assert.strictEqual(await p.abort('w'), 'not_found');
  // Being handled: as a claim leaves it, in processing (docs/wire-format.md).
  await p.send('r', { id: 'r', delayMs: 60000 });
  await client.zrem('dq:{orders}:pending', 'r');
  await client.zadd('dq:{orders}:unack', '99999999999999999', 'r');
  assert.strictEqual(await p.abort('r'), 'aborting');
  assert.strictEqual(await client.hexists('dq:{orders}:aborted', 'r'), 1);
  assert.strictEqual(await p.abort('r'), 'already_aborted');
  assert.strictEqual(await client.exists('dq:{orders}:m:r'), 1);
});

test('a result is read from the key the ack writes', async () => {
  const p = new d.Producer(client, 'orders');
  assert.strictEqual(await p.result('order-7'), null);
  // As ack.lua writes it (docs/results.md).
  await client.set('dq:{orders}:result:order-7', Buffer.from([0, 112, 97, 105, 100]), 'PX', 60000);
  assert.deepStrictEqual(await p.result('order-7'), Buffer.from([0, 112, 97, 105, 100]));
  await assert.rejects(p.result('bad id'), d.InvalidInputError);
});

test('uniqueForMs, throttleMs, debounceMs and replace', async () => {
  const p = new d.Producer(client, 'orders');
  // docs/dedup.md: a cancel starts a uniqueForMs window.
  await p.send('u', { id: 'u', delayMs: 60000, uniqueForMs: 3600000 });
  assert.strictEqual(await client.pttl('dq:{orders}:uniq:u'), -1);
  assert.strictEqual(await p.cancel('u'), true);
  await assert.rejects(p.send('u again', { id: 'u', uniqueForMs: 3600000 }), (e) => e instanceof d.DuplicateError && e.until > 0);
  await p.send('t', { id: 't', throttleMs: 60000 });
  await assert.rejects(p.send('t again', { id: 't', throttleMs: 60000 }), d.DuplicateError);
  await p.send('d1', { id: 'd', debounceMs: 60000 });
  await p.send('d2', { id: 'd', debounceMs: 60000 });
  assert.ok((await client.get('dq:{orders}:m:d')).endsWith(':d2'));
  assert.strictEqual(await p.replace('d', 'd3'), 'd');
  assert.ok((await client.get('dq:{orders}:m:d')).endsWith(':d3'));
  await assert.rejects(p.replace('none', 'x'), (e) => e instanceof d.NotPendingError && e.live === false);
  await assert.rejects(p.send('x', { uniqueForMs: 1000 }), RangeError);
  await assert.rejects(p.send('x', { id: 'w', throttleMs: 0 }), d.InvalidInputError);
});

test('a batch reports each message', async () => {
  const p = new d.Producer(client, 'orders');
  await p.send('first', { id: 'b1' });
  const out = await p.sendBatch([{ payload: 'a' }, { payload: 'b', id: 'b1' }, { payload: 'c', atMs: 0 }]);
  assert.strictEqual(typeof out[0], 'string');
  assert.ok(out[1] instanceof d.DuplicateError);
  assert.strictEqual(typeof out[2], 'string');
  assert.strictEqual(await client.zcard('dq:{orders}:pending'), 3);
});

test('a parent sent with after waits for its children', async () => {
  const p = new d.Producer(client, 'orders');
  const mail = new d.Producer(client, 'mail');
  await p.send('charge', { id: 'c1', delayMs: 60000 });
  await mail.send('receipt', { id: 'r1', delayMs: 60000 });
  const parent = await p.send('close', { id: 'p1', after: ['c1', { queue: 'mail', id: 'r1' }, 'c1'], onDeadChild: 'ignore' });
  assert.strictEqual(parent, 'p1');
  // Waiting, not pending (docs/wire-format.md, "Sending with after").
  assert.notStrictEqual(await client.zscore('dq:{orders}:flow:waiting', 'p1'), null);
  assert.strictEqual(await client.zscore('dq:{orders}:pending', 'p1'), null);
  assert.deepStrictEqual((await client.smembers('dq:{orders}:deps:p1')).sort(), ['dq:{mail}: r1', 'dq:{orders}: c1']);
  // Each child linked in its own queue, with the policy's letter.
  assert.strictEqual(await client.hget('dq:{orders}:parents', 'c1'), 'i dq:{orders}: p1');
  assert.strictEqual(await client.hget('dq:{mail}:parents', 'r1'), 'i dq:{orders}: p1');
  // A re-send links nothing twice.
  await assert.rejects(p.send('close', { id: 'p1', after: ['c1', { queue: 'mail', id: 'r1' }], onDeadChild: 'ignore' }), d.DuplicateError);
  assert.strictEqual(await client.hget('dq:{orders}:parents', 'c1'), 'i dq:{orders}: p1');
});

test('a parent after children no longer stored is due at once', async () => {
  const p = new d.Producer(client, 'orders');
  await p.sendBatch([{ payload: 'close', id: 'p2', after: ['gone', { queue: 'mail', id: 'never-sent' }] }]);
  // Straight to ready: due now, it needs no promote.
  assert.deepStrictEqual(await client.lrange('dq:{orders}:ready', 0, -1), ['p2']);
  assert.strictEqual(await client.exists('dq:{orders}:deps:p2', 'dq:{orders}:flow:waiting'), 0);
  // Taken as acked (docs/workflows.md).
  assert.strictEqual(await client.hget('dq:{orders}:children:p2', 'dq:{orders}: gone'), 'a');
});

test('a bad after is refused with nothing written', async () => {
  const p = new d.Producer(client, 'orders');
  for (const [options, error] of [
    [{ id: 'p', after: ['p'] }, d.InvalidFlowError],
    [{ id: 'p', after: ['c'], uniqueForMs: 1000 }, d.InvalidFlowError],
    [{ after: ['c'], onDeadChild: 'retry' }, d.InvalidFlowError],
    [{ after: ['a b'] }, d.InvalidInputError],
    [{ after: [{ queue: 'no queue!', id: 'c' }] }, d.InvalidInputError],
    [{ after: [{ queue: 'mail' }] }, TypeError],
    [{ after: 'c' }, TypeError],
  ]) {
    await assert.rejects(p.send('x', options), error, JSON.stringify(options));
  }
  assert.strictEqual(await client.dbsize(), 0, 'nothing was written');
  // A sharded queue records its shard count (docs/wire-format.md).
  await client.hset('dq:{mail}:totals', 'shards', 3);
  await assert.rejects(p.send('x', { after: ['c', { queue: 'mail', id: 'r' }] }), d.InvalidFlowError);
  assert.deepStrictEqual(await client.keys('*'), ['dq:{mail}:totals'], 'nothing was written');
});

test('the scripts are the generated files verbatim', async () => {
  for (const name of ['send', 'cancel', 'flow_deps', 'flow_link', 'flow_complete']) {
    const source = fs.readFileSync(path.join(dir, 'generated', `${name}.lua`), 'utf8');
    assert.strictEqual(d.script(name), source);
    assert.ok(source.includes(`Generated by src/store/scripts.rs from lua/${name}.lua`));
  }
  const p = new d.Producer(client, 'orders');
  await p.send('warm');
  await p.cancel('none');
  const shas = ['send', 'cancel'].map((n) => crypto.createHash('sha1').update(d.script(n)).digest('hex'));
  assert.deepStrictEqual(await client.script('EXISTS', ...shas), [1, 1]);
});

test('inputs are checked against the crate rules', async () => {
  const most = d.WIRE['queue-name'].max_bytes;
  d.checkQueueName('q'.repeat(most));
  for (const [check, value, rule] of [
    [d.checkQueueName, 'q'.repeat(most + 1), 'queue-name.length'],
    [d.checkQueueName, 'a#1', 'queue-name.chars'],
    [d.checkKeyPrefix, 'd{q', 'key-prefix.chars'],
    [d.checkId, 'a\u2028b', 'id.chars'],
    [d.checkId, 'a\ud800', 'text.unicode'],
  ]) {
    assert.throws(() => check(value), (e) => e instanceof d.InvalidInputError && e.rule === rule);
  }
  const p = new d.Producer(client, 'orders');
  for (const [options, rule] of [
    [{ priority: d.WIRE.priority.max + 1 }, 'priority'],
    [{ delayMs: d.WIRE.delay.max_ms + 1 }, 'delay'],
    [{ headers: { 'a b': 'x' } }, 'header-name.chars'],
  ]) {
    await assert.rejects(p.send('x', options), (e) => e.rule === rule);
  }
  await assert.rejects(p.send(Buffer.alloc(d.WIRE.payload.max_bytes + 1)), (e) => e.rule === 'payload.size');
  assert.strictEqual(await client.exists('dq:{orders}:pending'), 0, 'nothing was sent');
});

test('the command line sends and cancels', async () => {
  const url = `redis://127.0.0.1:${port}`;
  const run = (args, stdin = '') =>
    new Promise((resolve) => {
      const child = execFile(process.execPath, [path.join(dir, 'cli.js'), '--url', url, ...args], { timeout: 60000 }, (error, stdout, stderr) =>
        resolve({ status: error ? error.code : 0, stdout, stderr }),
      );
      child.stdin.end(stdin);
    });
  const sent = await run(['send', 'orders', '-', '--id', 'cli-1', '--delay-ms', '60000', '--header', 'k=v'], Buffer.from([1, 2]));
  assert.deepStrictEqual([sent.status, sent.stdout], [0, 'cli-1\n'], sent.stderr);
  const value = await client.getBuffer('dq:{orders}:m:cli-1');
  assert.ok(value.toString('latin1').endsWith(':k=1:v\x01\x02'), value.toString());
  const again = await run(['send', 'orders', 'x', '--id', 'cli-1']);
  assert.strictEqual(again.status, 1);
  assert.match(again.stderr, /already exists/);
  const refused = await run(['send', 'orders', 'x', '--id', 'a b']);
  assert.strictEqual(refused.status, 2);
  assert.match(refused.stderr, /rule id\.chars/);
  const parent = await run(['send', 'orders', 'close', '--id', 'p-cli', '--after', 'cli-1', '--after-in', 'mail=r', '--on-dead-child', 'ignore']);
  assert.deepStrictEqual([parent.status, parent.stdout], [0, 'p-cli\n'], parent.stderr);
  assert.strictEqual(await client.hget('dq:{orders}:parents', 'cli-1'), 'i dq:{orders}: p-cli');
  assert.notStrictEqual(await client.zscore('dq:{orders}:flow:waiting', 'p-cli'), null);
  const itself = await run(['send', 'orders', 'x', '--id', 'p-self', '--after', 'p-self']);
  assert.strictEqual(itself.status, 2, itself.stderr);
  const cancelled = await run(['cancel', 'orders', 'cli-1']);
  assert.deepStrictEqual([cancelled.status, cancelled.stdout], [0, 'true\n'], cancelled.stderr);
});
