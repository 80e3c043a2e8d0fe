// The official `openai` npm client against a real cluster (issue 11 item 3), for the features
// the HTTP API has today (docs/api.md "Fields"): completions and chat, streamed and not, logprobs,
// stream_options.include_usage, seed, logit_bias, stop, n / best_of / echo / prompt lists, GET /v1/models/{id}, and the error
// classes the client raises for 400 / 401 / 404 / 429. Texts are checked against the ZeroMQ API
// (tessera-client) for the same greedy request: both APIs must agree.
//
// usage: node --test openai.test.mjs   (environment: see support.mjs)
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { API_KEY, Cluster, greedyCases } from "./cluster.mjs";
import { BIN_DIR, SHARED, load } from "./support.mjs";

const tc = await load("tessera-client");
const openaiModule = await load("openai");
const OpenAI = openaiModule.OpenAI ?? openaiModule.default;
let cluster;
let oa; // the plain frontend
let zc; // tessera-client on the same frontend
let model;

const greedy = { temperature: 0 };

async function collect(stream) {
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  return chunks;
}

async function raises(promise, Cls, status) {
  const err = await promise.then(() => null, (e) => e);
  assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err?.constructor?.name}: ${err?.message}`);
  assert.equal(err.status, status);
  return err;
}

before(async () => {
  cluster = await Cluster.start(BIN_DIR, SHARED, ["plain", "keyed"]);
  oa = new OpenAI({ baseURL: `${cluster.http[0]}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30000 });
  zc = new tc.Client(cluster.zmq[0]);
  model = (await oa.models.list()).data[0].id;
});

after(async () => {
  await zc?.close();
  await cluster?.stop();
});

describe("official openai client", { concurrency: false }, () => {
  test("completions: greedy text equals the ZeroMQ API's, streamed and not", async () => {
    for (const c of greedyCases(SHARED)) {
      const req = { model, prompt: c.prompt, max_tokens: c.steps, ...greedy, ignore_eos: true };
      const r = await oa.completions.create(req);
      const z = await zc.complete(c.prompt, { max_tokens: c.steps, temperature: 0, ignore_eos: true });
      assert.equal(r.choices[0].text, z.text);
      assert.ok(r.choices[0].text.startsWith(c.completion));
      assert.equal(r.choices[0].finish_reason, "length");
      assert.equal(r.usage.completion_tokens, c.steps);
      assert.equal(r.object, "text_completion");
      const chunks = await collect(await oa.completions.create({ ...req, stream: true }));
      assert.equal(chunks.map((ch) => ch.choices[0]?.text ?? "").join(""), z.text);
      assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
    }
  });

  test("chat: streamed equals non-streamed, and equals the ZeroMQ API's", async () => {
    const messages = [{ role: "user", content: "Once upon a time" }];
    const r = await oa.chat.completions.create({ model, messages, max_tokens: 24, ...greedy });
    const z = await zc.chat(messages, { max_tokens: 24, temperature: 0 });
    assert.equal(r.choices[0].message.role, "assistant");
    assert.equal(r.choices[0].message.content, z.text);
    assert.equal(r.object, "chat.completion");
    const chunks = await collect(await oa.chat.completions.create({ model, messages, max_tokens: 24, ...greedy, stream: true }));
    assert.equal(chunks.map((ch) => ch.choices[0]?.delta?.content ?? "").join(""), z.text);
    assert.equal(chunks.at(-1).choices[0].finish_reason, r.choices[0].finish_reason);
  });

  test("stream_options.include_usage: one usage chunk with choices [] only when asked", async () => {
    const req = { model, prompt: "Once upon a time", max_tokens: 8, ...greedy, ignore_eos: true, stream: true };
    const withUsage = await collect(await oa.completions.create({ ...req, stream_options: { include_usage: true } }));
    const last = withUsage.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 8);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + 8);
    assert.ok(withUsage.slice(0, -1).every((ch) => !ch.usage));
    const without = await collect(await oa.completions.create(req));
    assert.ok(without.every((ch) => !ch.usage && ch.choices.length === 1));
    const chat = await collect(await oa.chat.completions.create({
      model, messages: [{ role: "user", content: "Hi" }], max_tokens: 4, stream: true, stream_options: { include_usage: true },
    }));
    assert.deepEqual(chat.at(-1).choices, []);
    assert.equal(typeof chat.at(-1).usage.prompt_tokens, "number");
  });

  test("logprobs: completions (n alternatives) and chat (top_logprobs), streamed and not", async () => {
    const c = await oa.completions.create({ model, prompt: "Once upon a time", max_tokens: 6, ...greedy, logprobs: 2 });
    const lp = c.choices[0].logprobs;
    assert.equal(lp.tokens.length, 6);
    assert.equal(lp.token_logprobs.length, 6);
    assert.ok(lp.token_logprobs.every((x) => x <= 0));
    assert.ok(lp.top_logprobs.every((alts) => Object.keys(alts).length >= 1 && Object.keys(alts).length <= 2));
    assert.equal(lp.tokens.join(""), c.choices[0].text);
    const z = await zc.complete("Once upon a time", { max_tokens: 6, temperature: 0, logprobs: true });
    lp.token_logprobs.forEach((x, i) => assert.ok(Math.abs(x - z.logprobs[i]) < 1e-4, `${x} vs ${z.logprobs[i]}`));

    const messages = [{ role: "user", content: "Once upon a time" }];
    const ch = await oa.chat.completions.create({ model, messages, max_tokens: 6, ...greedy, ignore_eos: true,
                                                  logprobs: true, top_logprobs: 3 });
    const content = ch.choices[0].logprobs.content;
    assert.equal(content.length, 6);
    assert.ok(content.every((t) => typeof t.token === "string" && t.logprob <= 0 && t.top_logprobs.length === 3));
    const streamed = await collect(await oa.chat.completions.create({ model, messages, max_tokens: 6, ...greedy,
                                                                      ignore_eos: true, logprobs: true, top_logprobs: 3,
                                                                      stream: true }));
    const sContent = streamed.flatMap((s) => s.choices[0]?.logprobs?.content ?? []);
    assert.deepEqual(sContent.map((t) => t.logprob), content.map((t) => t.logprob));
    // without logprobs asked none come back
    const plain = await oa.chat.completions.create({ model, messages, max_tokens: 2 });
    assert.ok(plain.choices[0].logprobs == null);
  });

  test("seed: the same seed gives the same text; no seed is random per request", async () => {
    const req = { model, prompt: "Once upon a time", max_tokens: 32, temperature: 1, ignore_eos: true };
    const a = await oa.completions.create({ ...req, seed: 42 });
    const b = await oa.completions.create({ ...req, seed: 42 });
    assert.equal(a.choices[0].text, b.choices[0].text);
    const z = await zc.complete("Once upon a time", { max_tokens: 32, temperature: 1, ignore_eos: true, seed: 42 });
    assert.equal(z.text, a.choices[0].text);
    const texts = new Set();
    for (let i = 0; i < 3; ++i) texts.add((await oa.completions.create(req)).choices[0].text);
    assert.ok(texts.size > 1, "three unseeded requests gave the same text");
  });

  test("logit_bias: honoured, and the same as over ZeroMQ", async () => {
    const base = await zc.complete("Once upon a time", { max_tokens: 8, temperature: 0, ignore_eos: true });
    const banned = base.tokens[0];
    const r = await oa.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, ...greedy, ignore_eos: true,
                                            logit_bias: { [banned]: -100 } });
    assert.notEqual(r.choices[0].text, base.text);
    const z = await zc.complete("Once upon a time", { max_tokens: 8, temperature: 0, ignore_eos: true,
                                                      logit_bias: { [banned]: -100 } });
    assert.equal(r.choices[0].text, z.text);
    assert.notEqual(z.tokens[0], banned);
  });

  test("stop: the text ends before the stop string, finish_reason stop", async () => {
    const full = await oa.completions.create({ model, prompt: "Once upon a time", max_tokens: 32, ...greedy });
    const text = full.choices[0].text;
    assert.ok(text.includes(" girl"), text);
    for (const stream of [false, true]) {
      const req = { model, prompt: "Once upon a time", max_tokens: 32, ...greedy, stop: [" girl"] };
      let got;
      let reason;
      if (stream) {
        const chunks = await collect(await oa.completions.create({ ...req, stream: true }));
        got = chunks.map((ch) => ch.choices[0]?.text ?? "").join("");
        reason = chunks.at(-1).choices[0].finish_reason;
      } else {
        const r = await oa.completions.create(req);
        got = r.choices[0].text;
        reason = r.choices[0].finish_reason;
      }
      assert.equal(got, text.slice(0, text.indexOf(" girl")));
      assert.equal(reason, "stop");
    }
  });

  test("models: list and retrieve with max_model_len; an unknown id is NotFoundError", async () => {
    const m = await oa.models.retrieve(model);
    assert.equal(m.id, model);
    assert.equal(m.object, "model");
    assert.ok(m.max_model_len > 0);
    const lim = await zc.limits();
    assert.equal(m.max_model_len, lim.context_length);
    await raises(oa.models.retrieve("no-such-model"), openaiModule.NotFoundError, 404);
  });

  test("n, best_of, echo and prompt lists (docs/api.md \"Several choices\")", async () => {
    const base = { model, prompt: "Once upon a time", max_tokens: 8, temperature: 1.0, seed: 11, ignore_eos: true };
    const r = await oa.completions.create({ ...base, n: 3 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    assert.equal(r.usage.completion_tokens, 24);
    const again = await oa.completions.create({ ...base, n: 3 });
    assert.deepEqual(again.choices.map((c) => c.text), r.choices.map((c) => c.text));
    const chunks = await collect(await oa.completions.create({ ...base, n: 3, stream: true, stream_options: { include_usage: true } }));
    const streamed = ["", "", ""];
    for (const ch of chunks) for (const c of ch.choices) streamed[c.index] += c.text;
    assert.deepEqual(streamed, r.choices.map((c) => c.text));
    assert.equal(chunks.at(-1).usage.completion_tokens, 24);
    const chat = await oa.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], n: 2, max_tokens: 4, seed: 3 });
    assert.deepEqual(chat.choices.map((c) => c.index), [0, 1]);
    const best = await oa.completions.create({ ...base, n: 1, best_of: 3 });
    assert.equal(best.choices.length, 1);
    assert.equal(best.usage.completion_tokens, 24);
    const echo = await oa.completions.create({ ...base, temperature: 0, echo: true });
    assert.ok(echo.choices[0].text.startsWith("Once upon a time"), echo.choices[0].text);
    const list = await oa.completions.create({ ...base, prompt: ["Once", "The cat"], n: 2 });
    assert.deepEqual(list.choices.map((c) => c.index), [0, 1, 2, 3]);
    const e = await raises(oa.completions.create({ ...base, best_of: 2, stream: true }), openaiModule.BadRequestError, 400);
    assert.equal(e.param, "best_of");
  });

  test("errors: 400 BadRequestError, 401 AuthenticationError, 404 NotFoundError, 429 RateLimitError", async () => {
    const e400 = await raises(oa.completions.create({ model, prompt: "Once", max_tokens: 0 }), openaiModule.BadRequestError, 400);
    assert.match(e400.message, /max_tokens/);
    await raises(oa.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], n: 17 }),
                 openaiModule.BadRequestError, 400);
    await raises(oa.completions.create({ model: "no-such-model", prompt: "Once" }), openaiModule.NotFoundError, 404);
    const keyedUrl = `${cluster.http[1]}/v1`;
    const wrongKey = new OpenAI({ baseURL: keyedUrl, apiKey: "sk-wrong", maxRetries: 0 });
    const e401 = await raises(wrongKey.completions.create({ model, prompt: "Once", max_tokens: 2 }),
                              openaiModule.AuthenticationError, 401);
    assert.equal(e401.code, "invalid_api_key");
    // The keyed frontend takes one request at a time (--max-concurrent-requests 1): a second
    // one while a stream runs is refused with 429 and Retry-After.
    const keyed = new OpenAI({ baseURL: keyedUrl, apiKey: API_KEY, maxRetries: 0 });
    const ctl = new AbortController();
    const long = await keyed.completions.create({ model, prompt: "Once upon a time", max_tokens: 400, ignore_eos: true,
                                                  stream: true }, { signal: ctl.signal });
    const it = long[Symbol.asyncIterator]();
    await it.next(); // the first chunk: the request holds the slot
    const e429 = await raises(keyed.completions.create({ model, prompt: "Once", max_tokens: 2 }),
                              openaiModule.RateLimitError, 429);
    assert.equal(e429.headers.get("retry-after"), "1");
    ctl.abort();
    await it.return?.();
    // once the stream is gone the slot is free again
    const ok = await keyed.completions.create({ model, prompt: "Once", max_tokens: 2 }).catch((e) => e);
    if (ok instanceof openaiModule.RateLimitError) {
      // the frontend notices the disconnect asynchronously: wait for it with the client's own retries
      const retrying = new OpenAI({ baseURL: keyedUrl, apiKey: API_KEY, maxRetries: 5 });
      assert.equal((await retrying.completions.create({ model, prompt: "Once", max_tokens: 2 })).usage.completion_tokens, 2);
    } else {
      assert.equal(ok.usage.completion_tokens, 2);
    }
  });
});
