// Issue 11's ordering races, from Node: two ZeroMQ clients written from docs/protocol.md alone
// (a raw zeromq v6 DEALER with @msgpack/msgpack, and tessera-client) against a real cluster.
//   1. a `cancel` sent right behind its request on the same DEALER always cancels it
//      (final "cancelled", never the 400 tokens of `length`);
//   2. two requests with the same id back to back: the *later* one (not streamed, 1 token) is
//      refused ("duplicate id <id>: this later request is refused") while the earlier (streamed,
//      400 tokens) runs — its token events come — until the test cancels it; or, when the
//      earlier one ended before the gateway read the later (ids are unique among requests in
//      flight only), the later runs on its own (as tests/integration/cluster/cluster_zmq_api_test.cpp).
// Each runs TESSERA_RACE_TRIALS times (default 1000); 0 failures allowed.
//
// usage: node --test zmq_races.test.mjs   (environment: see support.mjs)
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Cluster } from "./cluster.mjs";
import { BIN_DIR, SHARED, load } from "./support.mjs";

const tc = await load("tessera-client");
// zeromq and @msgpack/msgpack as the installed tessera-client depends on them
const cjs = (m) => (m.default && !m.Dealer && !m.encode ? m.default : m);
const zmq = cjs(await load("zeromq"));
const { encode, decode } = cjs(await load("@msgpack/msgpack"));
const TRIALS = Number(process.env.TESSERA_RACE_TRIALS) > 0 ? Number(process.env.TESSERA_RACE_TRIALS) : 1000;
let cluster;

/** A raw DEALER: send a map, receive maps in order (docs/protocol.md "Transport and framing").
 *  sendTimeout 0 makes zeromq.js queue each message synchronously, so two send() calls in one
 *  tick leave back to back (with the default, zeromq.js may defer a send to a later tick). */
class Raw {
  constructor(endpoint) {
    this.sock = new zmq.Dealer({ linger: 0, receiveTimeout: 20000, sendTimeout: 0 });
    this.sock.connect(endpoint);
  }

  send(msg) {
    return this.sock.send(encode(msg));
  }

  /** The next reply of request `id` (replies of other ids, e.g. of an earlier failed trial, are skipped). */
  async recvFor(id) {
    for (;;) {
      const m = await this.recv();
      if (m.id === id) return m;
    }
  }

  async recv() {
    const frames = await this.sock.receive();
    return decode(frames[frames.length - 1]);
  }

  /** Replies until the final/error of `id` (inclusive). */
  async untilEnd(id) {
    const out = [];
    for (;;) {
      const m = await this.recv();
      out.push(m);
      if (m.id === id && (m.type === "final" || m.type === "error")) return out;
    }
  }

  close() {
    this.sock.close();
  }
}

const request = (id, maxTokens, stream) => ({
  v: 1, type: "completion", id, prompt: "Once upon a time", temperature: 0, ignore_eos: true,
  max_tokens: maxTokens, stream,
});

before(async () => {
  cluster = await Cluster.start(BIN_DIR, SHARED, ["plain"]);
});

after(async () => {
  await cluster?.stop();
});

describe(`ZeroMQ ordering races (${TRIALS} trials each)`, { concurrency: false }, () => {
  test("raw DEALER: a cancel right behind its request always cancels it", async () => {
    const raw = new Raw(cluster.zmq[0]);
    let lost = 0;
    const t0 = performance.now();
    for (let i = 0; i < TRIALS; ++i) {
      const id = 1000 + i;
      await Promise.all([raw.send(request(id, 400, true)), raw.send({ v: 1, type: "cancel", id })]);
      const fin = (await raw.untilEnd(id)).at(-1);
      assert.equal(fin.type, "final", `trial ${i}: ${JSON.stringify(fin)}`);
      if (fin.finish_reason !== "cancelled" || fin.usage.completion_tokens >= 400) ++lost;
    }
    raw.close();
    assert.equal(lost, 0, `cancels lost in ${lost} of ${TRIALS} trials`);
    console.log(`# cancel race: ${TRIALS} trials, 0 lost, ${(performance.now() - t0).toFixed(0)} ms`);
  });

  test("raw DEALER: of two requests with one id the later is refused", async () => {
    const raw = new Raw(cluster.zmq[0]);
    let wrong = 0;
    let earlierDoneFirst = 0;
    const t0 = performance.now();
    for (let i = 0; i < TRIALS; ++i) {
      const id = 5000 + i;
      // Ids are unique among requests in flight. Mostly the earlier request (streamed, 400
      // tokens) runs when the gateway reads the later one (not streamed, 1 token): the later is
      // refused, the earlier's token events come and the test cancels it (it may reach its 400
      // tokens first: "length"). But the earlier is over in ~60 ms (0.15 ms a token): when the
      // gateway was descheduled that long, the earlier's final comes first and the later runs as
      // a request of its own (a final of 1 token, no token events: only the earlier streams).
      await Promise.all([raw.send(request(id, 400, true)), raw.send(request(id, 1, false))]);
      let refusal = null;
      let tokens = 0;
      let fin = null;
      let cancelled = false;
      while (fin === null) {
        const m = await raw.recvFor(id);
        if (m.type === "error" && refusal === null) refusal = m;
        else if (m.type === "token") ++tokens;
        else fin = m; // the final, or a second error
        if (!cancelled && refusal !== null && tokens > 0) {
          await raw.send({ v: 1, type: "cancel", id });
          cancelled = true;
        }
      }
      if (refusal === null && tokens > 0 && fin.type === "final" && fin.usage?.completion_tokens === 400) {
        ++earlierDoneFirst;
        const later = await raw.recvFor(id);
        if (later.type !== "final" || later.usage?.completion_tokens !== 1) {
          ++wrong;
          console.log(`# trial ${i}: the earlier ended first, then ${JSON.stringify(later)}`);
        }
        continue;
      }
      const refusedLater = refusal !== null && refusal.code === 100 &&
        refusal.message.startsWith(`duplicate id ${id}: this later request is refused`);
      const ended = fin.type === "final" && (fin.finish_reason === "cancelled" ||
        (fin.finish_reason === "length" && fin.usage?.completion_tokens === 400));
      if (!refusedLater || tokens === 0 || !ended) {
        ++wrong;
        console.log(`# trial ${i}: refusal ${JSON.stringify(refusal)} tokens ${tokens} end ${JSON.stringify(fin)}`);
      }
    }
    raw.close();
    assert.equal(wrong, 0, `duplicate ids handled out of order in ${wrong} of ${TRIALS} trials`);
    assert.ok(earlierDoneFirst < TRIALS, "no trial had both requests in flight at once");
    console.log(`# duplicate-id race: ${TRIALS} trials, 0 wrong (${earlierDoneFirst} with the earlier ended first), ${(performance.now() - t0).toFixed(0)} ms`);
  });

  test("tessera-client: stream.cancel() right behind the request always cancels it", async () => {
    const client = new tc.Client(cluster.zmq[0]);
    let lost = 0;
    for (let i = 0; i < TRIALS; ++i) {
      const s = client.streamComplete("Once upon a time", { max_tokens: 400, temperature: 0, ignore_eos: true });
      s.cancel(); // same tick: the cancel follows the request on the socket
      const fin = await s.result();
      if (fin.finish_reason !== "cancelled" || fin.usage.completion_tokens >= 400) ++lost;
    }
    await client.close();
    assert.equal(lost, 0, `cancels lost in ${lost} of ${TRIALS} trials`);
  });
});
