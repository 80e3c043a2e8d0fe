// Admin operations of a frontend (docs/api.md "Admin"): a user's stored preference and the
// invalidation of its preference K/V. The ZeroMQ client API has no admin messages, so these go
// to the frontend's HTTP port with its admin token (global fetch: Node.js >= 18).
//
// Threading: stateless apart from its settings; any number of calls may run at once.
import { CODE_NAMES, errorFor } from "./errors.js";

const NUMBER_OF = new Map(Object.entries(CODE_NAMES).map(([n, name]) => [name, Number(n)]));
const BY_STATUS = new Map([[400, 100], [401, 106], [403, 106], [404, 104], [405, 100], [413, 105],
                           [429, 201], [503, 400], [504, 203]]);

export class AdminClient {
  /**
   * @param baseUrl the frontend's HTTP address, e.g. "http://127.0.0.1:8000"
   * @param options token (its --admin-token, sent as "Authorization: Bearer"), timeoutMs (10000)
   */
  constructor(baseUrl, options = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.token = options.token ?? "";
    this.timeoutMs = options.timeoutMs ?? 10000;
  }

  /** Stores `preference` (non-empty) with `alpha` in [0, 1] for `user`: {user, preference, alpha, stored}. */
  setPreference(user, preference, alpha = 0.5) {
    return this._call("PUT", user, "preference", { preference, alpha });
  }

  /** The stored preference of `user`: {user, preference, alpha}; NotFound when none is stored. */
  getPreference(user) {
    return this._call("GET", user, "preference");
  }

  /** Deletes the stored preference of `user`: {user, deleted}. */
  deletePreference(user) {
    return this._call("DELETE", user, "preference");
  }

  /** Drops the user's preference K/V in every tier and tells every scheduler:
   *  {user, kvstore: {l1, l2}, schedulers_notified}. */
  invalidate(user) {
    return this._call("POST", user, "invalidate");
  }

  async _call(method, user, action, body) {
    const url = `${this.baseUrl}/admin/v1/users/${encodeURIComponent(user)}/${action}`;
    const headers = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                               signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (e) {
      const timedOut = e?.name === "TimeoutError";
      throw errorFor(timedOut ? 203 : 400, `${method} ${url}: ${timedOut ? "no answer in time" : e?.cause?.message ?? e}`);
    }
    const text = await res.text();
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {
      // not JSON: reported below
    }
    if (res.ok && json !== null) return json;
    const err = json?.error ?? {};
    const code = NUMBER_OF.get(err.code) ?? BY_STATUS.get(res.status) ?? 500;
    throw errorFor(code, err.message ?? `${method} ${url}: HTTP ${res.status} ${text.slice(0, 200)}`);
  }
}
