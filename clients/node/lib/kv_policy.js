// K/V retention policies, the request option `kv_policy` (docs/api.md, docs/kv.md). The helpers
// and the normalization always send the HTTP API's defaults (sinks 4, recent budget / 2), so a
// request means the same over ZeroMQ (whose wire defaults are 0) and HTTP. Ranges are checked by
// the frontend (sinks + window and budget at most the context: BadRequest 103 out_of_range).
import { BadRequest } from "./errors.js";

/** StreamingLLM: the first `sinks` positions plus the last `window`; may generate past the context. */
export function streamingPolicy(window, sinks = 4) {
  return { type: "streaming", sinks, window };
}

/** H2O: `budget` positions, the `recent` most recent (default budget / 2) and the most attended. */
export function h2oPolicy(budget, recent = undefined) {
  return { type: "h2o", budget, recent: recent ?? Math.floor(budget / 2) };
}

/** No retention policy (full attention), overriding the frontend's --kv-policy. */
export function fullAttention() {
  return { type: "none" };
}

function bad(msg) {
  return new BadRequest(100, "invalid_argument", msg);
}

function int(policy, key, required, dflt) {
  const v = policy[key];
  if (v === undefined || v === null) {
    if (required) throw bad(`kv_policy.${key} is required for type ${policy.type}`);
    return dflt;
  }
  if (!Number.isInteger(v)) throw bad(`kv_policy.${key} must be an integer`);
  return v;
}

/** The wire map of a kv_policy option (a helper's result or a plain object), defaults filled. */
export function kvPolicyWire(policy) {
  if (policy === null || typeof policy !== "object" || Array.isArray(policy)) {
    throw bad('kv_policy must be an object such as {type: "streaming", window: 256}');
  }
  const allowed = { none: [], streaming: ["sinks", "window"], h2o: ["budget", "recent"] }[policy.type];
  if (allowed === undefined) throw bad('kv_policy.type must be "none", "streaming" or "h2o"');
  for (const k of Object.keys(policy)) {
    if (k !== "type" && !allowed.includes(k) && policy[k] !== undefined) {
      throw bad(`kv_policy: unknown key ${k} for type ${policy.type}`);
    }
  }
  if (policy.type === "streaming") {
    return { type: "streaming", sinks: int(policy, "sinks", false, 4), window: int(policy, "window", true) };
  }
  if (policy.type === "h2o") {
    const budget = int(policy, "budget", true);
    return { type: "h2o", budget, recent: int(policy, "recent", false, Math.floor(budget / 2)) };
  }
  return { type: "none" };
}
