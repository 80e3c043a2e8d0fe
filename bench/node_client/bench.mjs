// Benchmark of the Node client (clients/node) against the raw protocol (a bare zeromq DEALER +
// @msgpack/msgpack that decodes each reply and counts it by id), docs/BENCHMARKS.md "Node client":
//   1. per-request overhead: sequential non-streamed completions of 1 token on a real cluster;
//   2. 32 concurrent streams of stories260K (256 tokens each) on a real cluster: wall time,
//      token events/s and the Node process's CPU per event — does the client keep up?
//   3. the client's event-rate ceiling: 32 streams x 2000 events from a synthetic frontend
//      (blaster.mjs) that sends pre-encoded events as fast as it can.
// Each figure is the median of --runs runs (default 5), raw and client alternating.
// usage: (cd clients/node && npm install) && node bench/node_client/bench.mjs [--runs N]
//        [--bin build/bin] [--shared ../shared]
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.join(here, "../..");
const { values: args } = parseArgs({ options: {
  runs: { type: "string", default: "5" },
  bin: { type: "string", default: path.join(root, "build/bin") },
  shared: { type: "string", default: path.join(root, "../shared") },
} });
const RUNS = Number(args.runs);
const req = createRequire(path.join(root, "clients/node/package.json"));
const zmq = req("zeromq");
const { Encoder, Decoder } = req("@msgpack/msgpack");
const tc = await import(pathToFileURL(path.join(root, "clients/node/index.js")).href);
const { Cluster } = await import(pathToFileURL(path.join(root, "tests/integration/node_client/cluster.mjs")).href);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The raw protocol: one DEALER, replies decoded and dispatched to per-id callbacks. */
class Raw {
  constructor(endpoint) {
    this.enc = new Encoder();
    this.dec = new Decoder();
    this.sock = new zmq.Dealer({ linger: 0, sendTimeout: 0 });
    this.sock.connect(endpoint);
    this.waiting = new Map();
    this.nextId = 1;
    this.loop = (async () => {
      for await (const frames of this.sock) {
        const m = this.dec.decode(frames[frames.length - 1]);
        const w = this.waiting.get(m.id);
        if (w === undefined) continue;
        if (m.type === "token") ++w.events;
        else {
          this.waiting.delete(m.id);
          w.resolve(w.events);
        }
      }
    })().catch(() => {});
  }

  /** Resolves to the number of token events of one request. */
  run(body) {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.waiting.set(id, { events: 0, resolve });
      this.sock.send(this.enc.encode({ v: 1, type: "completion", id, ...body }));
    });
  }

  close() {
    this.sock.close();
  }
}

async function clientRun(client, body, stream) {
  const { prompt, ...opts } = body;
  if (!stream) {
    await client.complete(prompt, opts);
    return 0;
  }
  let events = 0;
  for await (const ev of client.streamComplete(prompt, opts)) if (ev.type === "token") ++events;
  return events;
}

// Runs `n` requests `concurrency` at a time; returns {wall_ms, cpu_ms, events, lat_us (median)}.
async function measure(kind, endpoint, body, { n, concurrency, stream }) {
  const raw = kind === "raw" ? new Raw(endpoint) : null;
  const client = kind === "client" ? new tc.Client(endpoint) : null;
  const one = (b) => (raw ? raw.run({ ...b, stream }) : clientRun(client, b, stream));
  await one(body); // warm-up: connection and JIT
  const lats = [];
  let events = 0;
  let next = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < n) {
      const i = next++;
      const s = performance.now();
      const got = await one({ ...body, prompt: `${body.prompt} ${i % 7}` }); // (not `events += await`: a stale read)
      events += got;
      lats.push((performance.now() - s) * 1000);
    }
  }));
  const wall = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  raw?.close();
  await client?.close();
  return { wall_ms: wall, cpu_ms: (cpu.user + cpu.system) / 1000, events, n, lat_us: median(lats) };
}

async function compare(title, endpoint, body, shape) {
  const res = { raw: [], client: [] };
  for (let r = 0; r < RUNS; ++r) {
    for (const kind of r % 2 ? ["client", "raw"] : ["raw", "client"]) res[kind].push(await measure(kind, endpoint, body, shape));
  }
  console.log(`\n## ${title}`);
  const unit = shape.stream ? "event" : "request";
  console.log(`| | wall ms (min–max) | token events/s | Node CPU µs/${unit} | Node CPU % of wall | request latency p50 µs |`);
  console.log("|---|---|---|---|---|---|");
  const out = {};
  for (const kind of ["raw", "client"]) {
    const rs = res[kind];
    const m = {
      wall: median(rs.map((x) => x.wall_ms)),
      rate: median(rs.map((x) => (x.events / x.wall_ms) * 1000)),
      cpuPerEvent: median(rs.map((x) => (x.cpu_ms * 1000) / (shape.stream ? x.events : x.n))),
      cpuPct: median(rs.map((x) => (100 * x.cpu_ms) / x.wall_ms)),
      lat: median(rs.map((x) => x.lat_us)),
    };
    out[kind] = m;
    const walls = rs.map((x) => x.wall_ms);
    console.log(`| ${kind} | ${m.wall.toFixed(0)} (${Math.min(...walls).toFixed(0)}–${Math.max(...walls).toFixed(0)}) | ${m.rate.toFixed(0)} | ${m.cpuPerEvent.toFixed(1)} | ` +
                `${m.cpuPct.toFixed(0)} | ${m.lat.toFixed(0)} |`);
  }
  console.log(`client - raw: latency ${(out.client.lat - out.raw.lat).toFixed(0)} µs/request, ` +
              `CPU ${(out.client.cpuPerEvent - out.raw.cpuPerEvent).toFixed(1)} µs/${unit}, ` +
              `wall ${((out.client.wall / out.raw.wall - 1) * 100).toFixed(1)} %`);
}

const cluster = await Cluster.start(args.bin, args.shared, ["plain"]);
const blaster = spawn(process.execPath, [path.join(here, "blaster.mjs"), req.resolve("zeromq"), req.resolve("@msgpack/msgpack")],
                      { stdio: ["ignore", "pipe", "inherit"] });
try {
  const fe = cluster.zmq[0];
  console.log(`Node ${process.version}, ${RUNS} runs each (medians), raw and client alternating`);
  await compare("per-request overhead: 300 sequential non-streamed requests of 1 token (real cluster)", fe,
                { prompt: "Once upon a time", max_tokens: 1, temperature: 0 }, { n: 300, concurrency: 1, stream: false });
  await compare("32 concurrent streams of stories260K, 64 requests x 256 tokens (real cluster)", fe,
                { prompt: "Once upon a time", max_tokens: 256, temperature: 0, ignore_eos: true },
                { n: 64, concurrency: 32, stream: true });
  const line = await new Promise((resolve) => createInterface({ input: blaster.stdout }).once("line", resolve));
  const synth = line.split("zmq=")[1];
  await compare("event-rate ceiling: 32 streams x 2000 events from a synthetic frontend", synth,
                { prompt: "x", max_tokens: 2000 }, { n: 32, concurrency: 32, stream: true });
} finally {
  blaster.kill();
  await cluster.stop();
}
