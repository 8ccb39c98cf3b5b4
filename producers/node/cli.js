#!/usr/bin/env node
'use strict';
/**
 * `delayqueue-producer` (`npx delayqueue-producer`): send to and cancel in a
 * delayqueue queue from a shell.
 *
 *   delayqueue-producer send orders 'close order 42' --delay-ms 1800000 --id order-42
 *   printf data | delayqueue-producer send orders - --header tenant=acme
 *   delayqueue-producer cancel orders order-42
 *   delayqueue-producer abort orders export-7
 *   delayqueue-producer send orders close --after charge-42 --after-in mail=receipt-42
 *
 * `send` prints the message's id; `cancel` prints true or false; `abort`
 * prints cancelled, aborting, already_aborted or not_found. Exit status
 * 1 when the id is live already (send) or Redis fails, 2 for a refused input.
 */

const { parseArgs } = require('util');
const { Producer, InvalidInputError, InvalidFlowError } = require('./delayqueue-producer');

// ioredis is a peer dependency: the project's own, found from this package
// (installed beside it) or, when the package is a link to a folder (`npm
// install <folder>`), from the working directory.
const Redis = require(require.resolve('ioredis', { paths: [__dirname, process.cwd()] }));

const USAGE = `usage: delayqueue-producer [--url URL] [--key-prefix PREFIX] send QUEUE PAYLOAD|- [--delay-ms N | --at-ms T] [--id ID] [--retry-count N] [--priority P] [--header NAME=VALUE]...
         [--after ID]... [--after-in QUEUE=ID]... [--on-dead-child fail|ignore|wait|remove]
       delayqueue-producer [--url URL] [--key-prefix PREFIX] cancel QUEUE ID
       delayqueue-producer [--url URL] [--key-prefix PREFIX] abort QUEUE ID
--url defaults to redis://127.0.0.1:6379, --key-prefix to dq:; PAYLOAD - reads bytes from stdin.`;

const OPTIONS = {
  url: { type: 'string', default: 'redis://127.0.0.1:6379' },
  'key-prefix': { type: 'string', default: 'dq:' },
  'delay-ms': { type: 'string' },
  'at-ms': { type: 'string' },
  id: { type: 'string' },
  'retry-count': { type: 'string' },
  priority: { type: 'string' },
  header: { type: 'string', multiple: true, default: [] },
  after: { type: 'string', multiple: true, default: [] },
  'after-in': { type: 'string', multiple: true, default: [] },
  'on-dead-child': { type: 'string', default: 'fail' },
  help: { type: 'boolean', short: 'h' },
};

class UsageError extends Error {}

/** A number option as given (a refused value is judged by the producer), or undefined. */
const number = (text) => (text === undefined ? undefined : Number(text));

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** Runs the command line `argv`; resolves to the exit status. */
async function main(argv) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true });
  } catch (e) {
    throw new UsageError(e.message);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const [command, queue, arg, ...rest] = positionals;
  if (!['send', 'cancel', 'abort'].includes(command) || arg === undefined || rest.length) throw new UsageError('send, cancel or abort, a queue and one more argument expected');
  const headers = {};
  for (const h of values.header) {
    const eq = h.indexOf('=');
    if (eq < 0) throw new UsageError(`--header ${JSON.stringify(h)}: NAME=VALUE expected`);
    headers[h.slice(0, eq)] = h.slice(eq + 1);
  }
  const after = [...values.after];
  // A queue name holds no '=', so the first one ends it.
  for (const ref of values['after-in']) {
    const eq = ref.indexOf('=');
    if (eq < 0) throw new UsageError(`--after-in ${JSON.stringify(ref)}: QUEUE=ID expected`);
    after.push({ queue: ref.slice(0, eq), id: ref.slice(eq + 1) });
  }
  const producer = new Producer(new Redis(values.url, { lazyConnect: true, maxRetriesPerRequest: 1 }), queue, { keyPrefix: values['key-prefix'] });
  try {
    if (command === 'cancel') {
      console.log(String(await producer.cancel(arg)));
      return 0;
    }
    if (command === 'abort') {
      console.log(await producer.abort(arg));
      return 0;
    }
    const payload = arg === '-' ? await readStdin() : arg;
    const options = { id: values.id, headers, after, onDeadChild: values['on-dead-child'] };
    for (const [key, option] of [['delayMs', 'delay-ms'], ['atMs', 'at-ms'], ['retryCount', 'retry-count'], ['priority', 'priority']]) {
      if (values[option] !== undefined) options[key] = number(values[option]);
    }
    console.log(await producer.send(payload, options));
    return 0;
  } finally {
    producer.client.disconnect();
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (status) => {
      process.exitCode = status;
    },
    (e) => {
      console.error(`delayqueue-producer: ${e.message}`);
      if (e instanceof UsageError) console.error(USAGE);
      process.exitCode = e instanceof UsageError || e instanceof InvalidInputError || e instanceof InvalidFlowError ? 2 : 1;
    },
  );
}

module.exports = { main };
