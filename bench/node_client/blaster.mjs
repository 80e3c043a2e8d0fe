// A synthetic frontend for bench.mjs: a ROUTER that answers every `completion` with
// `max_tokens` pre-encoded `token` events and a `final` as fast as it can, and every `heartbeat`
// with a heartbeat, so the client's own per-event cost is what limits the event rate.
// usage: node blaster.mjs ZEROMQ_MODULE_PATH MSGPACK_MODULE_PATH   (prints "LISTENING zmq=...")
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const zmq = require(process.argv[2]);
const { encode, decode } = require(process.argv[3]);

const sock = new zmq.Router({ linger: 0, sendHighWaterMark: 0 });
await sock.bind("tcp://127.0.0.1:*");
console.log(`LISTENING zmq=${sock.lastEndpoint}`);

for await (const [identity, body] of sock) {
  const msg = decode(body);
  if (msg.type === "heartbeat") {
    await sock.send([identity, encode({ v: 1, type: "heartbeat", id: msg.id, role: "frontend", live_workers: 1 })]);
    continue;
  }
  if (msg.type !== "completion") continue;
  const ev = encode({ v: 1, type: "token", id: msg.id, tokens: [42], text: " tok" });
  for (let i = 0; i < msg.max_tokens; ++i) await sock.send([identity, ev]);
  await sock.send([identity, encode({
    v: 1, type: "final", id: msg.id, finish_reason: "length", text: "", tokens: [],
    usage: { prompt_tokens: 1, completion_tokens: msg.max_tokens, cached_tokens: 0 },
    timings: { queue_ms: 0, ttft_ms: 0, decode_ms: 0, total_ms: 0 },
  })]);
}
