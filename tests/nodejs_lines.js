// The line protocol of the suites' Node.js drivers (tests/grpc/node/driver.js,
// tests/remoting/node/driver.js); tests/nodejs.py is the Python side.
//
// One JSON command per line on stdin, one JSON answer per line on stdout:
//   {"id": 1, "op": "producer", ...}
//   {"id": 1, "result": {...}}      or      {"id": 1, "error": {"name", "code", "message"}}
// Commands run one after another, in the order they arrive, each by the function of `ops`
// named by its "op". When stdin closes (the tests are over), `closeAll` closes what is still
// running and the process exits.
'use strict';

const readline = require('node:readline');

// what an answer or a report says of a JavaScript error
function errorView(err) {
  return { name: err.name, code: err.code ?? null, message: String(err.message ?? err) };
}

function serve(ops, closeAll) {
  async function run(command) {
    const op = ops[command.op];
    if (!op) throw new Error(`unknown op ${command.op}`);
    return op(command);
  }

  const input = readline.createInterface({ input: process.stdin });
  let queue = Promise.resolve();
  input.on('line', line => {
    if (!line.trim()) return;
    const command = JSON.parse(line);
    queue = queue.then(async () => {
      let answer;
      try {
        answer = { id: command.id, result: await run(command) };
      } catch (err) {
        answer = { id: command.id, error: errorView(err) };
      }
      process.stdout.write(`${JSON.stringify(answer)}\n`);
    });
  });
  input.on('close', () => {
    queue.then(async () => {
      await closeAll();
      process.exit(0);
    });
  });
}

module.exports = { errorView, serve };
