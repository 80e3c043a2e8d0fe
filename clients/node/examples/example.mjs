// The README's example, run by the conformance test against a real cluster:
//   node example.mjs [tcp://127.0.0.1:8001 ...]
import * as tc from "tessera-client";

const endpoints = process.argv.slice(2).length ? process.argv.slice(2) : ["tcp://127.0.0.1:8001"];

// One connection; several endpoints = failover in that order. Default deadline 30 s per request.
const client = new tc.Client(endpoints, { timeoutMs: 30000 });
try {
  const lim = await client.limits();
  console.log(`model ${lim.model}: context ${lim.context_length}, vocab ${lim.vocab_size}`);

  const r = await client.complete("Once upon a time", { max_tokens: 32, temperature: 0 });
  console.log(JSON.stringify(r.text), r.finish_reason, r.usage.prompt_tokens, r.usage.completion_tokens,
              r.usage.cached_tokens, `${r.timings.total_ms.toFixed(1)} ms`);

  // Streaming: TokenEvents, then the Completion. Cancel with stream.cancel() or an AbortSignal.
  const stream = client.streamComplete("Lily and Tom", { max_tokens: 64, temperature: 0 });
  for await (const ev of stream) {
    if (ev instanceof tc.TokenEvent) {
      process.stdout.write(ev.text);
      if (ev.text.includes("dragon")) stream.cancel(); // any condition: the caller may cancel
    } else { // the last item: the Completion (finish_reason "cancelled" after cancel())
      console.log(`\n[${ev.finish_reason}, ${ev.usage.completion_tokens} tokens]`);
    }
  }

  const chat = await client.chat([{ role: "user", content: "Tell me a story" }], { max_tokens: 16, seed: 7 });
  console.log(JSON.stringify(chat.text));

  // Many requests in flight on one connection.
  const many = await Promise.all([0, 1, 2, 3].map((i) => client.complete(`Once upon a time ${i}`, { max_tokens: 8 })));
  console.log(many.map((m) => m.text));

  try {
    await client.complete("Once", { max_tokens: 0 });
  } catch (e) {
    if (!(e instanceof tc.BadRequest)) throw e;
    console.log("refused:", e.code, e.codeName, e.message);
  }
  try {
    await client.complete("Once upon a time", { max_tokens: 400, ignore_eos: true, timeoutMs: 1 });
  } catch (e) {
    if (!(e instanceof tc.Timeout)) throw e;
    console.log("deadline:", e.code, e.codeName);
  }
} finally {
  await client.close();
}
