// Tool calls through the official `openai` npm client (issue 11: "tool calls round-trip through
// the official client"; docs/api.md "Tool calls"). stories260K knows nothing of tools, so the
// call is forced with a named tool_choice (grammar-constrained): the client parses the response's
// tool_calls, the test runs the "tool" and sends its result back as a `tool` message, and the
// answer is an ordinary 200 with text. Streamed: the client's chunk iterator yields the call's
// arguments in pieces (delta.tool_calls[0].function.arguments), which the client accumulates.
//
// usage: node --test tools.test.mjs   (environment: see support.mjs)
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Cluster } from "./cluster.mjs";
import { BIN_DIR, SHARED, load } from "./support.mjs";

const openaiModule = await load("openai");
const OpenAI = openaiModule.OpenAI ?? openaiModule.default;
let cluster;
let oa;
let model;

// Small: stories260K's vocabulary spends about a token per character of JSON (context 512).
const tools = [{
  type: "function",
  function: {
    name: "pick",
    parameters: { type: "object", properties: { color: { enum: ["red", "blue"] }, loud: { type: "boolean" } },
                  required: ["color", "loud"] },
  },
}];
const forced = { type: "function", function: { name: "pick" } };

before(async () => {
  cluster = await Cluster.start(BIN_DIR, SHARED, ["plain"]);
  oa = new OpenAI({ baseURL: `${cluster.http[0]}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30000 });
  model = (await oa.models.list()).data[0].id;
});

after(async () => {
  await cluster?.stop();
});

describe("tool calls through the official openai client", { concurrency: false }, () => {
  test("named tool_choice -> tool_calls -> tool message -> 200 answer", async () => {
    const messages = [{ role: "user", content: "Lily saw a big tree." }];
    const r = await oa.chat.completions.create({ model, messages, tools, tool_choice: forced, max_tokens: 96, seed: 7 });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(r));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.match(call.id, /^call_[0-9a-f]{24}$/);
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "pick");
    const args = JSON.parse(call.function.arguments);
    assert.ok(["red", "blue"].includes(args.color), call.function.arguments);
    assert.equal(typeof args.loud, "boolean");
    assert.deepEqual(Object.keys(args).sort(), ["color", "loud"]);
    // The round trip: the assistant's call and the tool's result go back.
    const answer = await oa.chat.completions.create({
      model,
      messages: [...messages, choice.message, { role: "tool", tool_call_id: call.id, content: args.color }],
      tools,
      max_tokens: 12,
      seed: 7,
    });
    assert.equal(answer.choices[0].message.role, "assistant");
    assert.equal(typeof answer.choices[0].message.content, "string");
    assert.ok(["stop", "length"].includes(answer.choices[0].finish_reason), answer.choices[0].finish_reason);
    assert.equal(answer.choices[0].message.tool_calls, undefined);
  });

  test("streamed: the call's arguments arrive in pieces, finish_reason tool_calls", async () => {
    const req = { model, messages: [{ role: "developer", content: "Be kind." }, { role: "user", content: "Tim had a ball." }],
                  tools, tool_choice: forced, max_tokens: 96, seed: 11 };
    const whole = await oa.chat.completions.create(req);
    const deltas = [];
    let finish = null;
    for await (const ch of await oa.chat.completions.create({ ...req, stream: true })) {
      for (const c of ch.choices) {
        for (const d of c.delta?.tool_calls ?? []) deltas.push(d);
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(finish, "tool_calls");
    assert.ok(deltas.length >= 2, `${deltas.length} tool_calls deltas: the arguments are streamed`);
    assert.ok(deltas.every((d) => d.index === 0));
    assert.equal(deltas[0].function.name, "pick");
    assert.match(deltas[0].id, /^call_[0-9a-f]{24}$/);
    assert.ok(deltas.slice(1).every((d) => d.id === undefined && d.function.name === undefined));
    const args = deltas.map((d) => d.function.arguments).join("");
    assert.equal(args, whole.choices[0].message.tool_calls[0].function.arguments);
    // The official client's own accumulation (ChatCompletionStream) gives the same call.
    const stream = oa.beta?.chat?.completions?.stream ? oa.beta.chat.completions.stream({ ...req, stream: true })
                                                      : oa.chat.completions.stream?.({ ...req, stream: true });
    if (stream) {
      const done = await stream.finalChatCompletion();
      assert.equal(done.choices[0].message.tool_calls[0].function.arguments, args);
    }
  });

  test("bad tool fields: BadRequestError naming the field", async () => {
    const err = await oa.chat.completions.create({
      model, messages: [{ role: "user", content: "hi" }], tools, tool_choice: { type: "function", function: { name: "nope" } },
    }).then(() => null, (e) => e);
    assert.ok(err instanceof openaiModule.BadRequestError, String(err));
    assert.equal(err.param, "tool_choice");
  });
});
