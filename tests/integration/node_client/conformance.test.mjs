// Conformance of clients/node (tessera-client, installed from its packed tarball) against a real
// loopback cluster on stories260K — issue 13's shared cases, as python_client_test.py: greedy
// text equals the HTTP API's, streaming equals non-streaming, 32 concurrent requests on one
// client, cancel mid-stream (stream.cancel(), AbortSignal, leaving the loop) frees the request
// with the scheduler's held pages back to baseline, deadline expiry, bad requests raise the
// right typed error, limits, the README example, admin operations with preference provenance,
// API keys, and a killed frontend detected within the documented bound with failover.
//
// usage: node --test conformance.test.mjs   (environment: see support.mjs)
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { ADMIN_TOKEN, API_KEY, Cluster, greedyCases, waitUntil } from "./cluster.mjs";
import { BIN_DIR, PROJECT, SHARED, load } from "./support.mjs";

const tc = await load("tessera-client");
const here = path.dirname(fileURLToPath(import.meta.url));
const BOUND_MS = tc.DEFAULT_DEAD_AFTER_MS + tc.DEFAULT_HEARTBEAT_INTERVAL_MS;
let cluster;
let client;

const cases = () => greedyCases(SHARED);
const pagesFreed = () => waitUntil(async () => (await cluster.heldPages()) === 0, 10000);

async function rejects(promise, Cls, code) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err?.constructor?.name}: ${err?.message}`);
  if (code !== undefined) assert.equal(err.code, code, err.message);
  assert.ok(err.message.length > 0);
  return err;
}

async function drain(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  return events;
}

before(async () => {
  cluster = await Cluster.start(BIN_DIR, SHARED, ["admin", "plain", "keyed"]);
  client = new tc.Client(cluster.zmq[0]);
});

after(async () => {
  await client?.close();
  await cluster?.stop();
});

describe("tessera-client conformance", { concurrency: false }, () => {
  test("greedy text equals the HTTP API's on the stories260K cases", async () => {
    for (const c of cases()) {
      const http = await cluster.post(cluster.http[0], "/v1/completions",
                                      { prompt: c.prompt, max_tokens: c.steps, temperature: 0, ignore_eos: true });
      const r = await client.complete(c.prompt, { max_tokens: c.steps, temperature: 0, ignore_eos: true });
      assert.ok(r instanceof tc.Completion);
      assert.equal(r.text, http.choices[0].text);
      assert.ok(r.text.startsWith(c.completion), `${JSON.stringify(r.text)} vs ${JSON.stringify(c.completion)}`);
      assert.equal(r.finish_reason, "length");
      assert.equal(r.usage.completion_tokens, c.steps);
      assert.equal(r.tokens.length, c.steps);
      assert.ok(r.usage.prompt_tokens > 0);
      assert.ok(r.timings.total_ms >= 0);
      assert.equal(r.logprobs, null);
    }
  });

  test("streaming equals non-streaming (with logprobs), for completion and chat", async () => {
    for (const c of cases()) {
      const opts = { max_tokens: c.steps, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 };
      const whole = await client.complete(c.prompt, opts);
      const events = await drain(client.streamComplete(c.prompt, opts));
      const final = events.at(-1);
      assert.ok(final instanceof tc.Completion);
      assert.ok(events.slice(0, -1).every((e) => e instanceof tc.TokenEvent && e.type === "token"));
      assert.equal(final.text, whole.text);
      assert.deepEqual(final.tokens, whole.tokens);
      assert.equal(final.usage.completion_tokens, whole.usage.completion_tokens);
      assert.equal(final.logprobs.length, c.steps);
      assert.deepEqual(final.logprobs, whole.logprobs);
      assert.equal(whole.top_logprobs.length, c.steps);
      assert.ok(whole.top_logprobs.every((alts) => alts.length === 2));
    }
    const msgs = [{ role: "user", content: "Once upon a time" }];
    const chat = await client.chat(msgs, { max_tokens: 16, temperature: 0 });
    const streamed = await client.streamChat(msgs, { max_tokens: 16, temperature: 0 }).result();
    assert.equal(streamed.text, chat.text);
    assert.ok(["stop", "length"].includes(chat.finish_reason));
  });

  test("32 concurrent requests on one client", async () => {
    const prompts = Array.from({ length: 32 }, (_, i) => (i % 2 ? `Lily and Tom ${i}` : `Once upon a time ${i}`));
    const opts = { max_tokens: 48, temperature: 0, ignore_eos: true };
    const ref = [];
    for (const p of prompts.slice(0, 4)) ref.push((await client.complete(p, opts)).text);
    const streamed = await Promise.all(prompts.map((p) => client.streamComplete(p, opts).result()));
    assert.deepEqual(streamed.slice(0, 4).map((r) => r.text), ref);
    assert.ok(streamed.every((r) => r.text.length > 0 && r.usage.completion_tokens === 48));
    const whole = await Promise.all(prompts.map((p) => client.complete(p, opts)));
    assert.deepEqual(whole.map((r) => r.text), streamed.map((r) => r.text));
    assert.equal(client.inFlight, 0);
  });

  test("cancel mid-stream frees the request (held pages back to baseline)", async () => {
    assert.ok(await pagesFreed());
    const long = { max_tokens: 400, temperature: 0, ignore_eos: true };
    // stream.cancel() after the first token
    const s = client.streamComplete("Once upon a time", long);
    const it = s[Symbol.asyncIterator]();
    const first = await it.next();
    assert.ok(first.value instanceof tc.TokenEvent);
    s.cancel();
    const final = await s.result();
    assert.equal(final.finish_reason, "cancelled");
    assert.ok(final.usage.completion_tokens < 400);
    assert.ok(await pagesFreed(), "pages not freed after cancel");
    // an AbortSignal, on a streamed and on a waited-for request
    const ctl = new AbortController();
    const s2 = client.streamComplete("Lily and Tom", { ...long, signal: ctl.signal });
    for await (const ev of s2) {
      if (ev instanceof tc.TokenEvent) ctl.abort();
      else assert.equal(ev.finish_reason, "cancelled");
    }
    const ctl2 = new AbortController();
    const pending = client.complete("Once upon a time", { ...long, signal: ctl2.signal });
    setImmediate(() => ctl2.abort());
    const r = await pending;
    assert.equal(r.finish_reason, "cancelled");
    assert.ok(r.usage.completion_tokens < 400);
    // already aborted: the cancel goes right behind the request, and always applies
    const r0 = await client.complete("Once upon a time", { ...long, signal: AbortSignal.abort() });
    assert.equal(r0.finish_reason, "cancelled");
    // leaving a for-await loop early cancels too
    for await (const ev of client.streamComplete("Once upon a time", long)) {
      assert.ok(ev instanceof tc.TokenEvent);
      break;
    }
    assert.ok(await pagesFreed(), "pages not freed after abort / break");
    assert.ok(await waitUntil(() => client.inFlight === 0, 5000));
  });

  test("a deadline rejects with Timeout (203) and frees the request", async () => {
    const t0 = performance.now();
    const err = await rejects(drain(client.streamComplete("Once upon a time",
                                                          { max_tokens: 400, ignore_eos: true, timeoutMs: 5 })),
                              tc.Timeout, 203);
    assert.ok(err.requestId > 0);
    assert.ok(performance.now() - t0 < 2000);
    assert.ok(await pagesFreed(), "pages not freed after a deadline");
    const short = new tc.Client(cluster.zmq[0], { timeoutMs: 5 }); // the client-wide default deadline
    await rejects(short.complete("Once upon a time", { max_tokens: 400, ignore_eos: true }), tc.Timeout, 203);
    await short.close();
    // the connection keeps serving after timeouts
    assert.equal((await client.complete("Once", { max_tokens: 3 })).usage.completion_tokens, 3);
  });

  test("bad requests raise the right typed error", async () => {
    const checks = [
      ["Once", { max_tokens: 0 }, tc.BadRequest, 103],
      ["Once", { temperature: 5 }, tc.BadRequest, 103],
      ["", {}, tc.BadRequest, 100],
      ["Once", { model: "no-such-model" }, tc.NotFound, 104],
      ["Once", { max_tokens: 100000 }, tc.BadRequest, 105],
      [[100000], {}, tc.BadRequest, 103],
      ["Once", { logit_bias: { 5: 1000 } }, tc.BadRequest, 103],
    ];
    for (const [prompt, opts, Cls, code] of checks) {
      await rejects(client.complete(prompt, opts), Cls, code);
      await rejects(drain(client.streamComplete(prompt, opts)), Cls, code);
    }
    await rejects(client.complete("Once", { no_such_option: 1 }), tc.BadRequest, 100);
    assert.throws(() => client.streamComplete("Once", { no_such_option: 1 }), tc.BadRequest);
    await rejects(client.chat([{ role: "robot", content: "hi" }]), tc.BadRequest, 100);
    assert.throws(() => new tc.Client("localhost:8001"), tc.BadRequest); // not tcp://
    assert.throws(() => new tc.Client([]), tc.BadRequest);
    assert.equal(tc.errorFor(201, "x").constructor, tc.Overloaded);
    assert.equal(tc.errorFor(401, "x").codeName, "peer_dead");
  });

  test("kv_policy: typed helpers equal the HTTP API's JSON form; bad ones raise typed errors", async () => {
    assert.deepEqual(tc.streamingPolicy(32), { type: "streaming", sinks: 4, window: 32 });
    assert.deepEqual(tc.h2oPolicy(40), { type: "h2o", budget: 40, recent: 20 });
    assert.deepEqual(tc.kvPolicyWire({ type: "h2o", budget: 40, recent: 0 }), { type: "h2o", budget: 40, recent: 0 });
    assert.deepEqual(tc.kvPolicyWire({ type: "streaming", window: 9 }), { type: "streaming", sinks: 4, window: 9 });
    assert.deepEqual(tc.fullAttention(), { type: "none" });
    const prompt = "Once upon a time";
    const opts = { max_tokens: 48, temperature: 0, ignore_eos: true };
    for (const [typed, http] of [[tc.streamingPolicy(24), { type: "streaming", window: 24 }],
                                 [tc.h2oPolicy(24), { type: "h2o", budget: 24 }],
                                 [{ type: "h2o", budget: 24 }, { type: "h2o", budget: 24 }],
                                 [tc.fullAttention(), { type: "none" }]]) {
      const want = (await cluster.post(cluster.http[0], "/v1/completions", { prompt, ...opts, kv_policy: http })).choices[0].text;
      const r = await client.complete(prompt, { ...opts, kv_policy: typed });
      assert.equal(r.text, want, JSON.stringify(typed));
      assert.equal(r.usage.completion_tokens, 48);
      assert.equal((await client.streamComplete(prompt, { ...opts, kv_policy: typed }).result()).text, want);
    }
    const full = await client.complete(prompt, opts);
    const window = await client.complete(prompt, { ...opts, kv_policy: tc.streamingPolicy(8, 1) });
    assert.notDeepEqual(window.tokens, full.tokens); // the policy took effect
    await rejects(client.complete(prompt, { max_tokens: 4, kv_policy: tc.streamingPolicy(100000) }), tc.BadRequest, 103);
    await rejects(client.complete(prompt, { max_tokens: 4, kv_policy: "streaming" }), tc.BadRequest, 100);
    await rejects(client.complete(prompt, { max_tokens: 4, kv_policy: { type: "lru" } }), tc.BadRequest, 100);
    await rejects(client.complete(prompt, { max_tokens: 4, kv_policy: { type: "h2o" } }), tc.BadRequest, 100);
    await rejects(client.complete(prompt, { max_tokens: 4, kv_policy: { type: "streaming", window: 1.5 } }), tc.BadRequest, 100);
    assert.equal((await client.complete("Once", { max_tokens: 3 })).usage.completion_tokens, 3);
  });

  test("limits() from the heartbeat reply", async () => {
    const lim = await client.limits();
    assert.equal(lim.protocol_version, 1);
    assert.equal(lim.vocab_size, 512);
    assert.ok(lim.context_length > 0);
    assert.ok(lim.page_size > 0);
    assert.ok(lim.default_max_tokens > 0);
    assert.ok(lim.live_workers > 0);
    assert.equal(lim.endpoint, cluster.zmq[0]);
  });

  test("the README example runs against the installed package", { skip: !PROJECT && "no test project" }, async () => {
    const ex = path.join(PROJECT, "example.mjs");
    copyFileSync(path.join(here, "../../../clients/node/examples/example.mjs"), ex);
    const { stdout } = await promisify(execFile)(process.execPath, [ex, cluster.zmq[0]], { timeout: 60000 });
    assert.match(stdout, /refused: 103 out_of_range/);
    assert.match(stdout, /deadline: 203 deadline_exceeded/);
    assert.match(stdout, /\[cancelled|\[length|\[stop/);
  });

  test("admin operations and preference provenance in usage", async () => {
    const admin = new tc.AdminClient(cluster.http[0], { token: ADMIN_TOKEN });
    const user = `node-user-${process.pid}`;
    const put = await admin.setPreference(user, "Alice likes short stories about dragons.", 0.5);
    assert.equal(put.user, user);
    const got = await admin.getPreference(user);
    assert.equal(got.preference, "Alice likes short stories about dragons.");
    assert.equal(got.alpha, 0.5);
    // a request with the user and no preference uses the stored one
    const r = await client.complete("Once upon a time", { max_tokens: 4, temperature: 0, user });
    assert.ok(["compute", "kvstore", "redis", "memory"].includes(r.usage.preference_source), JSON.stringify(r.usage));
    assert.equal(typeof r.usage.preference_kv_bytes, "number");
    assert.equal(typeof r.usage.preference_transfer_ms, "number");
    const direct = await client.complete("Once upon a time", { max_tokens: 4, user: "bob", preference: "Bob likes cats." });
    assert.notEqual(direct.usage.preference_source, null);
    const inv = await admin.invalidate(user);
    assert.equal(inv.user, user);
    assert.ok(inv.schedulers_notified >= 1);
    assert.equal((await admin.deletePreference(user)).deleted, true);
    await rejects(admin.getPreference(user), tc.NotFound, 104);
    await rejects(new tc.AdminClient(cluster.http[0], { token: "wrong" }).invalidate(user), tc.PermissionDenied, 106);
    await rejects(admin.setPreference(user, "x", 2), tc.BadRequest, 103);
  });

  test("API keys: without one PermissionDenied (106), with one served", async () => {
    const keyless = new tc.Client(cluster.zmq[2]);
    const err = await rejects(keyless.complete("Once", { max_tokens: 2 }), tc.PermissionDenied, 106);
    assert.match(err.message, /^invalid_api_key:/);
    await keyless.close();
    const keyed = new tc.Client(cluster.zmq[2], { apiKey: API_KEY });
    assert.equal((await keyed.complete("Once", { max_tokens: 2 })).usage.completion_tokens, 2);
    await keyed.close();
  });

  test("no frontend at all: PeerDead within the bound, never a hang", async () => {
    const probe = createServer();
    await new Promise((r) => probe.listen(0, "127.0.0.1", r));
    const port = probe.address().port;
    await new Promise((r) => probe.close(r)); // a port with nothing listening
    const t0 = performance.now();
    const c = new tc.Client(`tcp://127.0.0.1:${port}`);
    await rejects(c.complete("Once", { max_tokens: 4 }), tc.PeerDead, 401);
    await rejects(c.limits(200), tc.Unavailable, 400);
    assert.ok(performance.now() - t0 < BOUND_MS + 1000);
    const s = c.streamComplete("Once", { max_tokens: 4 });
    await c.close();
    await rejects(s.result(), tc.ClientClosed, 0);
    await rejects(c.complete("Once"), tc.ClientClosed, 0);
  });

  test("a killed frontend is detected within the bound and the client fails over", async () => {
    const c = new tc.Client([cluster.zmq[0], cluster.zmq[1]]);
    try {
      assert.equal((await c.complete("Once", { max_tokens: 4 })).usage.completion_tokens, 4);
      assert.equal(c.endpoint, cluster.zmq[0]);
      const running = c.streamComplete("Once upon a time", { max_tokens: 400, ignore_eos: true });
      await cluster.frontends[0].kill("SIGKILL");
      const t0 = performance.now();
      const err = await rejects(c.complete("Once upon a time", { max_tokens: 8 }), tc.PeerDead, 401);
      const waited = performance.now() - t0;
      assert.ok(waited <= BOUND_MS + 500, `dead frontend noticed after ${waited} ms (bound ${BOUND_MS})`);
      assert.match(err.message, /did not answer heartbeats/);
      await rejects(running.result(), tc.PeerDead, 401);
      assert.equal(c.failovers, 1);
      assert.equal(c.endpoint, cluster.zmq[1]);
      const r = await c.complete("Once upon a time", { max_tokens: 64, temperature: 0, ignore_eos: true });
      assert.ok(r.text.startsWith(cases()[0].completion.slice(0, 40)));
    } finally {
      await c.close();
    }
  });
});
