// Compiled (tsc --noEmit --strict) by npm_setup.sh against the installed package's index.d.ts:
// every part of the public API, so a wrong or missing declaration fails the fixture.
import {
  AdminClient, BadRequest, Client, Completion, PeerDead, Stream, TesseraError, Timeout, TokenEvent,
  type KvPolicy, type Limits, type StreamEvent, type Usage, fullAttention, h2oPolicy, kvPolicyWire, streamingPolicy,
} from "tessera-client";

async function main(): Promise<void> {
  const client = new Client(["tcp://127.0.0.1:8001", "tcp://127.0.0.1:8011"],
                            { heartbeatIntervalMs: 500, deadAfterMs: 1500, timeoutMs: 30_000, apiKey: null });
  const lim: Limits = await client.limits(1000);
  const ctx: number | null = lim.context_length;
  const r: Completion = await client.complete("Once upon a time", {
    max_tokens: 8, temperature: 0, seed: 7n, logit_bias: { 42: -100 }, stop: ["."], logprobs: true, top_logprobs: 2,
    user: "alice", preference: "likes dragons", preference_alpha: 0.5, routing_key: "k", priority: 1,
  });
  const policies: KvPolicy[] = [streamingPolicy(252), h2oPolicy(128, 64), fullAttention(), { type: "streaming", window: 8 }];
  for (const p of policies) await client.complete("Once", { max_tokens: 4, kv_policy: p });
  const sinks: number = kvPolicyWire({ type: "streaming", window: 8 }).type === "streaming" ? streamingPolicy(8).sinks : 0;
  const u: Usage = r.usage;
  const cached: number = u.cached_tokens;
  const src: string | null = u.preference_source;
  const total: number = r.timings.total_ms;
  const ctl = new AbortController();
  const s: Stream = client.streamChat([{ role: "user", content: "hi" }], { signal: ctl.signal, timeoutMs: 100 });
  for await (const ev of s) {
    const e: StreamEvent = ev;
    if (e instanceof TokenEvent) console.log(e.text, e.tokens.length, e.logprobs?.[0]);
    else console.log(e.finish_reason === "cancelled", e.top_logprobs?.[0]?.[0]?.logprob);
  }
  s.cancel();
  const done: Completion = await client.streamComplete([1, 2, 3]).result();
  try {
    await client.complete("x", { max_tokens: 0 });
  } catch (err) {
    if (err instanceof BadRequest || err instanceof Timeout || err instanceof PeerDead) console.log(err.code, err.codeName);
    if (err instanceof TesseraError) console.log(err.requestId, err.message);
  }
  const admin = new AdminClient("http://127.0.0.1:8000", { token: "t" });
  const stored = await admin.setPreference("alice", "likes dragons", 0.5);
  const n: number = (await admin.invalidate("alice")).schedulers_notified;
  console.log(sinks, ctx, cached, src, total, done.text, stored.alpha, n, client.endpoint, client.failovers, client.inFlight);
  await client.close();
}
void main();
