// Drives ali-ons (npm ali-ons 3.12, a pure JavaScript client of RocketMQ's remoting protocol)
// for pocketmq's remoting tests (tests/remoting/node/conftest.py is the Python side), as
// tests/grpc/node/driver.js drives the official Node.js gRPC client.
//
// One JSON command per line on stdin, one JSON answer per line on stdout (tests/nodejs_lines.js):
//   {"id": 1, "op": "producer", "nameSrv": "127.0.0.1:9876", "group": "PG"}
//   {"id": 1, "result": {"client": 1}}      or      {"id": 1, "error": {...}}
// Clients keep running between commands (a consumer pulls in the background); "errors" reports
// what a client emitted, "logs" what ali-ons logged at WARN or ERROR.
'use strict';

const { errorView, serve } = require('../../nodejs_lines.js');
const { Producer, Consumer, Message } = require('ali-ons');

const clients = new Map();
let nextClient = 1;
const logLines = [];

function text(args) {
  return args.map(a => (a instanceof Error ? `${a.name}: ${a.message}` :
    typeof a === 'object' ? JSON.stringify(a) : String(a))).join(' ');
}

const logger = {
  info() {},
  debug() {},
  warn(...args) { logLines.push(`WARN ${text(args)}`); },
  error(...args) { logLines.push(`ERROR ${text(args)}`); },
};

// ali-ons asserts an HTTP client even when nameSrv is given (lib/remoting_client.js); it is used
// only to fetch name-server addresses from an "onsAddr" URL, which these tests never give
const httpclient = {
  async request(url) { throw new Error(`no HTTP in these tests (asked for ${url})`); },
};

function options(command, extra) {
  const opts = {
    nameSrv: command.nameSrv,
    httpclient,
    logger,
    // each client its own MQClient (ali-ons shares one per clientId = ip@instanceName)
    instanceName: `pocketmq-${process.pid}-${nextClient}`,
    ...extra,
  };
  if (command.accessKey) {
    opts.accessKeyId = command.accessKey;
    opts.accessKeySecret = command.secretKey;
  }
  return opts;
}

function track(client) {
  const id = nextClient++;
  const entry = { client, errors: [], received: [] };
  client.on('error', err => entry.errors.push(errorView(err)));
  clients.set(id, entry);
  return id;
}

function entryOf(command) {
  const entry = clients.get(command.client);
  if (!entry) throw new Error(`no client ${command.client}`);
  return entry;
}

const ops = {
  async producer(command) {
    const producer = new Producer(options(command, { producerGroup: command.group }));
    const id = track(producer);
    await producer.ready();
    return { client: id };
  },

  // what the producer learned of a topic from the name server: its queues, the route data, and
  // the master address it will send to
  async route(command) {
    const producer = entryOf(command).client;
    const info = await producer.tryToFindTopicPublishInfo(command.topic);
    const queues = (info && info.messageQueueList || []).map(q => ({
      brokerName: q.brokerName, queueId: q.queueId,
    }));
    const mqClient = producer._mqClient;
    const brokers = {};
    for (const q of queues) {
      brokers[q.brokerName] = mqClient.findBrokerAddressInPublish(q.brokerName) || null;
    }
    return { queues, brokers, routeData: mqClient._topicRouteTable.get(command.topic) || null };
  },

  async send(command) {
    const producer = entryOf(command).client;
    const message = new Message(command.topic, command.tags || null, command.body);
    if (command.keys) message.keys = command.keys;
    if (command.delayLevel) message.delayTimeLevel = command.delayLevel;
    try {
      const result = await producer.send(message);
      return { sent: { msgId: result.msgId, sendStatus: result.sendStatus } };
    } catch (err) {
      return { failed: errorView(err) };
    }
  },

  // a push consumer; "failTimes": its handler throws on the first n deliveries of each message
  // (counted by body), "maxReconsumeTimes", "broadcast", "expression", "persistInterval" (ms),
  // "parallel" (parallelConsumeLimit), "countOnly" (keep nothing but the count: measuring)
  async consumer(command) {
    const extra = {
      consumerGroup: command.group,
      isBroadcast: !!command.broadcast,
      persistConsumerOffsetInterval: command.persistInterval || 1000,
      rebalanceInterval: command.rebalanceInterval || 10000,
    };
    if (command.maxReconsumeTimes !== undefined) extra.maxReconsumeTimes = command.maxReconsumeTimes;
    if (command.parallel) extra.parallelConsumeLimit = command.parallel;
    const consumer = new Consumer(options(command, extra));
    const id = track(consumer);
    const entry = clients.get(id);
    const failures = new Map();
    await consumer.ready();
    entry.count = 0;
    consumer.subscribe(command.topic, command.expression || '*', async message => {
      entry.count += 1;
      if (command.countOnly) return;  // measuring: nothing kept
      const body = message.body.toString();
      entry.received.push({
        msgId: message.msgId, topic: message.topic, tags: message.tags || null,
        keys: message.keys || null, body, reconsumeTimes: message.reconsumeTimes,
        queueId: message.queueId, uniqKey: message.properties.UNIQ_KEY || null,
      });
      const failed = failures.get(body) || 0;
      if (failed < (command.failTimes || 0)) {
        failures.set(body, failed + 1);
        throw new Error(`failing ${body} on purpose (${failed + 1})`);
      }
    });
    return { client: id };
  },

  // how many messages a consumer's handler was called with so far
  async count(command) {
    return { count: entryOf(command).count };
  },

  // the queues of a topic a consumer holds now (its share after the latest rebalance)
  async assigned(command) {
    const consumer = entryOf(command).client;
    const queues = [];
    for (const { messageQueue } of consumer.processQueueTable.values()) {
      if (messageQueue.topic === command.topic) queues.push(messageQueue.queueId);
    }
    return { queues: queues.sort() };
  },

  // what a consumer received since the last call
  async received(command) {
    const entry = entryOf(command);
    return { messages: entry.received.splice(0) };
  },

  // the queues a consumer knows for a topic (from the name server's route) and the broker
  // addresses it holds
  async subscription(command) {
    const consumer = entryOf(command).client;
    const queues = (consumer._topicSubscribeInfoTable.get(command.topic) || []).map(q => ({
      brokerName: q.brokerName, queueId: q.queueId,
    }));
    const brokers = {};
    for (const [ name, addrs ] of consumer._mqClient._brokerAddrTable) {
      brokers[name] = addrs;
    }
    return { queues, brokers };
  },

  async errors(command) {
    const entry = entryOf(command);
    const errors = entry.errors;
    entry.errors = [];
    return { errors };
  },

  // closing tells the brokers (UNREGISTER_CLIENT): what they answered is reported, not thrown
  async close(command) {
    const entry = entryOf(command);
    clients.delete(command.client);
    try {
      await entry.client.close();
      return { failed: null };
    } catch (err) {
      return { failed: errorView(err) };
    }
  },

  async logs() {
    return { lines: logLines.splice(0) };
  },
};

serve(ops, async () => {
  for (const [ id, entry ] of clients) {
    clients.delete(id);
    try { await entry.client.close(); } catch (err) { /* closing anyway */ }
  }
});
