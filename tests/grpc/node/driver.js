// Drives Apache RocketMQ's official Node.js client (rocketmq-client-nodejs) for pocketmq's
// compatibility tests (tests/grpc/node/conftest.py is the Python side).
//
// One JSON command per line on stdin, one JSON answer per line on stdout (tests/nodejs_lines.js):
//   {"id": 1, "op": "producer", "endpoints": "127.0.0.1:8081", "topics": ["t"]}
//   {"id": 1, "result": {"client": 1}}      or      {"id": 1, "error": {...}}
// Clients keep running between commands (a push consumer consumes in the background;
// "deliveries" reports what it saw).
// Everything the clients log at WARN or ERROR is reported by "logs": the clients log through the
// logger they are given, but the consume services (which report corrupted messages) always use
// the package's default file logger, so that one is replaced too.
'use strict';

const { serve } = require('../../nodejs_lines.js');
const defaultLogger = require('rocketmq-client-nodejs/dist/client/Logger');

// TransactionResolution values of apache.rocketmq.v2 (the package does not export the enum).
const RESOLUTIONS = { UNSPECIFIED: 0, COMMIT: 1, ROLLBACK: 2 };

const clients = new Map();
let nextClient = 1;
const logLines = [];
const pending = [];

function format(args) {
  const [ template, ...rest ] = args;
  let index = 0;
  const text = String(template).replace(/%[sdjo]/g, () => {
    const value = rest[index++];
    if (value instanceof Error) return value.message;
    return typeof value === 'object' ? JSON.stringify(value) : String(value);
  });
  return text;
}

const logger = {
  info() {},
  debug() {},
  warn(...args) { logLines.push(`WARN ${format(args)}`); },
  error(...args) { logLines.push(`ERROR ${format(args)}`); },
};
defaultLogger.getDefaultLogger = () => logger;

const {
  Producer,
  SimpleConsumer,
  PushConsumer,
  ConsumeResult,
} = require('rocketmq-client-nodejs');

function view(message, extra = {}) {
  const properties = {};
  for (const [ key, value ] of message.properties) {
    properties[key] = value;
  }
  return {
    messageId: message.messageId,
    topic: message.topic,
    body: message.body.toString('utf8'),
    tag: message.tag ?? null,
    keys: message.keys,
    properties,
    messageGroup: message.messageGroup ?? null,
    deliveryAttempt: message.deliveryAttempt ?? null,
    deliveryTimestamp: message.deliveryTimestamp ? message.deliveryTimestamp.getTime() : null,
    bornTimestamp: message.bornTimestamp ? message.bornTimestamp.getTime() : null,
    bornHost: message.bornHost,
    corrupted: Boolean(message.corrupted),
    offset: message.offset ?? null,
    receiptHandle: message.receiptHandle,
    ...extra,
  };
}

function messageOptions(spec) {
  const options = { topic: spec.topic, body: Buffer.from(spec.body, 'utf8') };
  if (spec.tag) options.tag = spec.tag;
  if (spec.keys) options.keys = spec.keys;
  if (spec.messageGroup) options.messageGroup = spec.messageGroup;
  if (spec.delayMs) options.delay = spec.delayMs;
  if (spec.deliveryTimestampMs) options.deliveryTimestamp = new Date(spec.deliveryTimestampMs);
  if (spec.properties) options.properties = new Map(Object.entries(spec.properties));
  return options;
}

// Start a client; one that fails to start is shut down so its timers do not outlive the command.
async function start(client) {
  try {
    await client.startup();
  } catch (err) {
    await client.shutdown().catch(() => {});
    throw err;
  }
  return client;
}

function register(client, state = {}) {
  const id = nextClient++;
  clients.set(id, { client, ...state });
  return id;
}

function entry(id) {
  const found = clients.get(id);
  if (!found) throw new Error(`no client ${id}`);
  return found;
}

function common(command) {
  return {
    endpoints: command.endpoints,
    namespace: '',
    logger,
    requestTimeout: command.requestTimeoutMs ?? 3000,
  };
}

// Consumption rules for push consumers: which deliveries the listener fails.
function shouldFail(rule, message) {
  if (!rule) return false;
  if (rule.all) return true;
  const body = message.body.toString('utf8');
  if (rule.bodies && rule.bodies.includes(body)) {
    return rule.untilAttempt ? (message.deliveryAttempt ?? 1) < rule.untilAttempt : true;
  }
  return false;
}

const handlers = {
  async producer(command) {
    const checks = [];
    let checker;
    if (command.checker) {
      checker = {
        async check(message) {
          checks.push(view(message, { at: Date.now() }));
          return RESOLUTIONS[command.checker];
        },
      };
    }
    const producer = new Producer({
      ...common(command),
      topics: command.topics,
      checker,
      maxAttempts: command.maxAttempts,
    });
    await start(producer);
    return { client: register(producer, { checks }) };
  },

  async send(command) {
    const { client } = entry(command.client);
    const options = messageOptions(command.message);
    let receipt;
    if (command.transaction) {
      const transaction = client.beginTransaction();
      receipt = await client.send(options, transaction);
      if (command.transaction === 'commit') await transaction.commit();
      if (command.transaction === 'rollback') await transaction.rollback();
    } else {
      receipt = await client.send(options);
    }
    return {
      messageId: receipt.messageId,
      transactionId: receipt.transactionId,
      recallHandle: receipt.recallHandle,
      offset: receipt.offset,
    };
  },

  async recall(command) {
    const { client } = entry(command.client);
    const receipt = await client.recallMessage(command.topic, command.recallHandle);
    return { messageId: receipt.messageId };
  },

  async checks(command) {
    return { checks: entry(command.client).checks };
  },

  async simple(command) {
    const consumer = new SimpleConsumer({
      ...common(command),
      consumerGroup: command.group,
      subscriptions: new Map(Object.entries(command.subscriptions)),
      awaitDuration: command.awaitMs ?? 1000,
    });
    await start(consumer);
    return { client: register(consumer, { received: new Map() }) };
  },

  async receive(command) {
    const state = entry(command.client);
    const messages = await state.client.receive(command.max ?? 16, command.invisibleMs ?? 15000);
    for (const message of messages) {
      state.received.set(message.messageId, message);
    }
    return { messages: messages.map(m => view(m, { at: Date.now() })) };
  },

  // receiptHandle (optional): ack with that handle instead of the latest delivery's
  async ack(command) {
    const state = entry(command.client);
    let message = state.received.get(command.messageId);
    if (command.receiptHandle) {
      message = { ...message, endpoints: message.endpoints, receiptHandle: command.receiptHandle };
    }
    await state.client.ack(message);
    return {};
  },

  async changeInvisible(command) {
    const state = entry(command.client);
    const message = state.received.get(command.messageId);
    await state.client.changeInvisibleDuration(message, command.invisibleMs);
    return { receiptHandle: message.receiptHandle };
  },

  async push(command) {
    const deliveries = [];
    const consumer = new PushConsumer({
      ...common(command),
      consumerGroup: command.group,
      subscriptions: new Map(Object.entries(command.subscriptions)),
      messageListener: {
        async consume(message) {
          const failed = shouldFail(command.fail, message);
          deliveries.push(view(message, { at: Date.now(), failed }));
          if (command.consumeMs) {
            await new Promise(resolve => setTimeout(resolve, command.consumeMs));
          }
          return failed ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        },
      },
    });
    await start(consumer);
    return { client: register(consumer, { deliveries }) };
  },

  async deliveries(command) {
    return { deliveries: entry(command.client).deliveries };
  },

  // A push consumer's shutdown waits for its in-flight long poll (up to the broker's long
  // polling timeout): "background" answers at once and lets it finish before the driver exits.
  async shutdown(command) {
    const { client } = entry(command.client);
    clients.delete(command.client);
    const done = client.shutdown();
    if (command.background) {
      pending.push(done);
    } else {
      await done;
    }
    return {};
  },

  async logs() {
    return { lines: logLines.splice(0) };
  },
};

// stdin closed: the test is over; shut down what is still running, then leave
serve(handlers, async () => {
  const closing = [ ...clients.values() ].map(({ client }) => client.shutdown());
  await Promise.allSettled([ ...pending, ...closing ]);
});
