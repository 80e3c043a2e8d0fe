// A loopback cluster for the Node client tests, started as tests/integration/clients/cluster.py
// (and tests/support/src/cluster.cpp) do: one tessera-scheduler, one tessera-worker (--backend
// cpu), one tessera-kvstore and tessera-frontends on stories260K, every port chosen by the kernel
// (read from the processes' LISTENING lines). Frontends by role, in the order asked for:
//   "admin"  admin token ADMIN_TOKEN and the kvstore (admin operations)
//   "plain"  no options (e.g. the failover target)
//   "keyed"  --api-key API_KEY and --max-concurrent-requests 1 (401 and 429 answers)
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";

export const ADMIN_TOKEN = "node-admin-secret";
export const API_KEY = "sk-node-test";

/** Polls `pred` (sync or async) until it is true or `timeoutMs` pass; the poll step is no sync sleep. */
export async function waitUntil(pred, timeoutMs, stepMs = 20) {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, stepMs));
  }
  return Boolean(await pred());
}

function field(line, name) {
  for (const part of line.split(/\s+/)) if (part.startsWith(name + "=")) return part.slice(name.length + 1);
  return "";
}

class Proc {
  constructor(args, log) {
    this.log = log;
    const fd = openSync(log, "w");
    this.p = spawn(args[0], args.slice(1), { stdio: ["ignore", "pipe", fd] });
    closeSync(fd);
    this.exited = new Promise((r) => this.p.once("exit", r));
    this.lines = [];
    this.waiters = [];
    createInterface({ input: this.p.stdout }).on("line", (l) => {
      this.lines.push(l);
      for (const w of this.waiters) w();
    });
  }

  async waitLine(prefix, timeoutMs) {
    const found = () => this.lines.find((l) => l.startsWith(prefix));
    const end = performance.now() + timeoutMs;
    while (!found() && performance.now() < end && this.p.exitCode === null) {
      await new Promise((r) => {
        const t = setTimeout(r, Math.max(1, end - performance.now()));
        this.waiters.push(() => { clearTimeout(t); r(); });
      });
      this.waiters = [];
    }
    return found() ?? "";
  }

  async kill(sig = "SIGKILL") {
    if (this.p.exitCode === null && this.p.signalCode === null) this.p.kill(sig);
    const t = setTimeout(() => this.p.kill("SIGKILL"), 5000);
    await this.exited;
    clearTimeout(t);
  }
}

export class Cluster {
  static async start(binDir, shared, roles = ["admin", "plain"]) {
    const c = new Cluster();
    try {
      await c._start(binDir, shared, roles);
    } catch (e) {
      await c.stop();
      throw new Error(`${e.message}\n${c.logs()}`);
    }
    return c;
  }

  async _start(binDir, shared, roles) {
    this.dir = mkdtempSync(path.join(tmpdir(), "tessera-nodeclient-"));
    const model = path.join(shared, "models/stories260K/stories260K.bin");
    const tok = path.join(shared, "models/stories260K/tok512.bin");
    this.procs = [];
    const bin = (n) => path.join(binDir, n);
    // CURVE keys for the internal sockets, as `tessera up` makes them (docs/security.md).
    this.keys = path.join(this.dir, "keys");
    const made = spawnSync(bin("tessera"), ["keys", this.keys], { stdio: "ignore" });
    if (made.status !== 0) throw new Error("tessera keys failed");
    const s = this._spawn([bin("tessera-scheduler"), "--frontend-endpoint", "tcp://127.0.0.1:*", "--worker-endpoint",
                           "tcp://127.0.0.1:*", "--metrics-port", "0", "--heartbeat-ms", "100"], "scheduler");
    const k = this._spawn([bin("tessera-kvstore"), "--listen", "tcp://127.0.0.1:*"], "kvstore");
    const line = await s.waitLine("LISTENING", 10000);
    if (!line) throw new Error("tessera-scheduler did not start");
    const schedFe = field(line, "frontends");
    this.metricsPort = Number(field(line, "metrics"));
    this._spawn([bin("tessera-worker"), "--model", model, "--scheduler", field(line, "workers"), "--threads", "1",
                 "--num-pages", "512", "--name", "w0", "--backend", "cpu",
                 "--tokenizer", tok], "worker");  // the vocabulary: grammar-constrained sampling (tools, response_format)
    const kl = await k.waitLine("tessera-kvstore listening on", 10000);
    if (!kl) throw new Error("tessera-kvstore did not start");
    this.kvstore = kl.split(/\s+/).find((p) => p.startsWith("tcp://"));
    const options = {
      admin: ["--admin-token", ADMIN_TOKEN, "--kvstore", this.kvstore],
      plain: [],
      keyed: ["--api-key", API_KEY, "--max-concurrent-requests", "1"],
    };
    const extra = roles.map((r) => options[r]);
    this.frontends = [];
    for (let i = 0; i < extra.length; ++i) {
      this.frontends.push(this._spawn([bin("tessera-frontend"), "--http-port", "0", "--zmq-endpoint", "tcp://127.0.0.1:*",
                                       "--schedulers", schedFe, "--model", model, "--tokenizer", tok,
                                       "--heartbeat-ms", "100", ...extra[i]], `frontend${i}`));
    }
    this.zmq = [];
    this.http = [];
    for (const f of this.frontends) {
      const fl = await f.waitLine("LISTENING", 15000);
      if (!fl) throw new Error("tessera-frontend did not start");
      this.zmq.push(field(fl, "zmq"));
      this.http.push(`http://127.0.0.1:${field(fl, "http")}`);
    }
    this.role = Object.fromEntries(roles.map((r, i) => [r, { zmq: this.zmq[i], http: this.http[i] }]));
    const ready = async () => (await Promise.all(this.http.map((u) => this._ready(u)))).every(Boolean);
    if (!(await waitUntil(ready, 15000, 50))) throw new Error("/ready did not turn 200 within 15 s");
  }

  _spawn(args, name) {
    const p = new Proc([...args, "--curve-dir", this.keys], path.join(this.dir, `${name}.log`));
    this.procs.push(p);
    return p;
  }

  async _ready(base) {
    try {
      return (await fetch(`${base}/ready`, { signal: AbortSignal.timeout(2000) })).status === 200;
    } catch {
      return false;
    }
  }

  async post(base, p, body, headers = {}) {
    const r = await fetch(`${base}${p}`, { method: "POST", body: JSON.stringify(body),
                                           headers: { "Content-Type": "application/json", ...headers } });
    return r.json();
  }

  /** Sum of the scheduler's samples of `name` whose labels contain `label` (null: none). */
  async metric(name, label = "") {
    const text = await (await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`)).text();
    let total = 0;
    let seen = false;
    for (const l of text.split("\n")) {
      if (l.startsWith(name) && "{ ".includes(l[name.length]) && l.includes(label)) {
        total += Number(l.slice(l.lastIndexOf(" ") + 1));
        seen = true;
      }
    }
    return seen ? total : null;
  }

  async heldPages() {
    return (await this.metric("tessera_scheduler_pages", 'state="held"')) ?? 0;
  }

  logs() {
    let out = "";
    for (const p of this.procs ?? []) {
      try {
        out += `---- ${path.basename(p.log)} (tail)\n${readFileSync(p.log, "utf8").slice(-3000)}`;
      } catch {
        // no log yet
      }
    }
    return out;
  }

  async stop() {
    for (const p of [...(this.procs ?? [])].reverse()) await p.kill("SIGTERM");
  }
}

/** The stories260K greedy cases (prompt, steps, completion). */
export function greedyCases(shared) {
  return JSON.parse(readFileSync(path.join(shared, "models/stories260K/greedy.json"), "utf8")).cases;
}
