// tessera-worker's options, each bound to its WorkerOptions member (worker_options.h).
#include "worker_options.h"

namespace tessera::worker_app {

void declare_options(config::Options& o, WorkerOptions& c) {
  o.add(c.service.scheduler_endpoint, {.name = "scheduler",
                                       .help = "schedulers' worker endpoints (ZeroMQ ROUTER), comma-separated, each "
                                               "tcp://HOST:PORT, dns:NAME:PORT or file:PATH; the worker registers with "
                                               "one and moves to another when it dies (docs/architecture.md \"Several "
                                               "schedulers\")",
                                       .env = "TESSERA_WORKER_SCHEDULER"});
  o.add({.name = "scheduler-order",
         .help = "which scheduler of --scheduler the worker registers with first: ring (a consistent-hash ring "
                 "read from the worker's name: workers spread over the schedulers) or listed (the list's order: "
                 "the first is this worker's primary, the next ones its fallbacks)",
         .env = "TESSERA_WORKER_SCHEDULER_ORDER", .choices = {"ring", "listed"}},
        c.service.listed_order ? "listed" : "ring", [&c](const std::string& v) { c.service.listed_order = v == "listed"; });
  o.add(c.service.refresh_ms, {.name = "scheduler-refresh-ms",
                               .help = "dns: and file: entries of --scheduler are resolved again this often",
                               .env = "TESSERA_WORKER_SCHEDULER_REFRESH_MS", .min = 100, .max = 3600000});
  o.add(c.model, {.name = "model",
                  .help = "model file or directory (GGUF, safetensors directory, llama2.c checkpoint); required",
                  .env = "TESSERA_MODEL"});
  o.add(c.tokenizer, {.name = "tokenizer",
                      .help = "tokenizer file (llama2.c tokenizer.bin, tokenizer.json) giving the token bytes that "
                              "structured output (response_format) needs when the model file embeds no vocabulary",
                      .env = "TESSERA_WORKER_TOKENIZER"});
  o.add(c.service.name, {.name = "name", .help = "worker name, unique per scheduler (\"\" = hostname:pid)",
                         .env = "TESSERA_WORKER_NAME"});
  o.add(c.backend, {.name = "backend",
                   .help = "compute backend: cpu, cuda, sim (no weights computed: simulated step times and "
                           "deterministic tokens, docs/simulation.md), or auto (cuda when compiled in and a GPU is "
                           "present, unless --kvstore needs kv_fill; else cpu)",
                   .env = "TESSERA_WORKER_BACKEND", .choices = {"auto", "cpu", "cuda", "sim"}});
  o.add(c.placement_rules, {.name = "placement-rules",
                            .help = "YAML file of placement rules: per tensor (by name regex, layer range, kind) the "
                                    "device, the type to convert to at load, the CPU kernel path and thread share "
                                    "(docs/models.md \"Placement rules\"); a rule that places nothing or cannot be "
                                    "applied fails the start; \"\" = every tensor as stored",
                            .env = "TESSERA_WORKER_PLACEMENT_RULES"});
  o.add(c.backend_options.sim_profile, {.name = "sim-profile",
                                        .help = "sim: step cost profile (docs/simulation.md)",
                                        .env = "TESSERA_WORKER_SIM_PROFILE",
                                        .choices = {"h100-llama2-7b", "cpu-stories260k"}});
  o.add(c.backend_options.sim_cost, {.name = "sim-cost",
                                     .help = "sim: \"STEP,PREFILL_TOKEN,DECODE_SEQ,KV_TOKEN[,PREFILL_PAIR]\" costs in microseconds, "
                                             "overriding --sim-profile (\"\" = the profile's)",
                                     .env = "TESSERA_WORKER_SIM_COST"});
  o.add(c.backend_options.sim_time_scale, {.name = "sim-time-scale",
                                           .help = "sim: simulated seconds per real second (10 = steps sleep a tenth "
                                                   "of their simulated time)",
                                           .env = "TESSERA_WORKER_SIM_TIME_SCALE", .min = 1e-3, .max = 1e6});
  o.add(c.backend_options.tensor_parallel, {.name = "tensor-parallel",
                                            .help = "cuda: GPUs of this node to shard the model over (tensor "
                                                    "parallelism, needs NCCL when > 1)",
                                            .env = "TESSERA_WORKER_TENSOR_PARALLEL", .min = 1, .max = 64});
  o.add(c.backend_options.cuda_dtype, {.name = "cuda-dtype",
                                       .help = "cuda: type of weights, activations and K/V pages on the GPU",
                                       .env = "TESSERA_WORKER_CUDA_DTYPE", .choices = {"bf16", "f16"}});
  o.add(c.backend_options.pool.num_pages, {.name = "num-pages",
                                  .help = "K/V pages in the pool (each holds page-size tokens for every layer)",
                                  .env = "TESSERA_NUM_PAGES", .min = 1, .max = 1 << 24});
  o.add({.name = "kv-dtype",
         .help = "element type of the K/V page pool: f32, f16 (half the bytes), int8 (fp16 scale per 32 values, 3.8x "
                 "fewer bytes than f32 at head_dim 64); attention reads it directly (docs/kv.md); the cuda backend keeps its pages in "
                 "--cuda-dtype and refuses int8",
         .env = "TESSERA_WORKER_KV_DTYPE", .choices = {"f32", "f16", "int8"}},
        kernels::kv_dtype_name(c.backend_options.pool.dtype),
        // parse_kv_dtype cannot fail here: the value is one of the choices.
        [&c](const std::string& v) { c.backend_options.pool.dtype = kernels::parse_kv_dtype(v).value(); });
  o.add(c.backend_options.pool.memory_mb, {.name = "kv-memory-mb",
                                           .help = "cpu: size the K/V pool by memory instead of --num-pages: as many "
                                                   "pages of --kv-dtype as fit in this many MiB (0 = use --num-pages)",
                                           .env = "TESSERA_WORKER_KV_MEMORY_MB", .min = 0, .max = 1 << 20});
  o.add(c.backend_options.pool.page_size, {.name = "page-size", .help = "tokens per K/V page", .env = "TESSERA_PAGE_SIZE",
                                  .min = 1, .max = 1024});
  o.add(c.service.max_batch_tokens, {.name = "max-batch-tokens",
                                     .help = "token budget of one step (decodes + prefill chunks)",
                                     .env = "TESSERA_MAX_BATCH_TOKENS", .min = 1, .max = 1 << 20});
  o.add(c.backend_options.threads, {.name = "threads", .help = "compute threads (0 = all cores)",
                           .env = "TESSERA_WORKER_THREADS", .min = 0, .max = 1024});
  o.add({.name = "weight-repack", .help = "cpu: " "repack Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (AVX-512 and AVX2 kernels), Q8_0, Q4_K, Q5_K and Q6_K (AVX-512) matmul weights, MoE experts included, at load into 16-row interleaved blocks (same bytes; the mmap'ed originals' pages are dropped unless AMX reads them); off = compute from the file's layout (docs/models.md)",
         .env = "TESSERA_WORKER_WEIGHT_REPACK", .choices = {"on", "off"}},
        c.backend_options.weight_repack ? "on" : "off",
        [&c](const std::string& v) { c.backend_options.weight_repack = v == "on"; });
  o.add(c.backend_options.blend.recompute_ratio,
        {.name = "blend-recompute-ratio",
         .help = "CacheBlend: share of the reused document tokens recomputed past the check layer (0 = full K/V reuse, "
                 "1 = a full prefill); a request's recompute_ratio overrides it (docs/kv.md)",
         .env = "TESSERA_WORKER_BLEND_RECOMPUTE_RATIO", .min = 0, .max = 1});
  o.add(c.backend_options.blend.check_layer,
        {.name = "blend-check-layer",
         .help = "CacheBlend: the layer whose V deviation selects the tokens to recompute (layers up to it are computed "
                 "for every token)",
         .env = "TESSERA_WORKER_BLEND_CHECK_LAYER", .min = 0, .max = 1024});
  o.add(c.backend_options.blend_cache_mb,
        {.name = "blend-cache-mb",
         .help = "CacheBlend: MiB of host memory for cached document K/V (f32, least recently used evicted; 0 = keep none)",
         .env = "TESSERA_WORKER_BLEND_CACHE_MB", .min = 0, .max = 1 << 20});
  o.add(c.eos_id, {.name = "eos-id",
                   .help = "end-of-sequence token (-2 = the model file's, else 2 as in llama2.c; -1 = none)",
                   .env = "TESSERA_EOS_ID", .min = -2, .max = 1 << 30});
  o.add(c.service.heartbeat_ms, {.name = "heartbeat-ms", .help = "heartbeat interval until the scheduler's ack sets it",
                                 .env = "TESSERA_WORKER_HEARTBEAT_MS", .min = 10, .max = 60000});
  o.add(c.service.dead_after_ms, {.name = "scheduler-dead-ms",
                                  .help = "scheduler silence (or unanswered register) after which the worker "
                                          "registers again, with the next scheduler of --scheduler when there are several",
                                  .env = "TESSERA_WORKER_SCHEDULER_DEAD_MS", .min = 50, .max = 600000});
  o.add(c.kvstore.endpoint, {.name = "kvstore",
                             .help = "tessera-kvstore endpoint for preference K/V (DKI); \"\" = compute every "
                                     "preference, cache nothing",
                             .env = "TESSERA_WORKER_KVSTORE"});
  o.add(c.kvstore.timeout_ms, {.name = "kvstore-timeout-ms",
                               .help = "kvstore request timeout; after a failure gets pause 5 s (preferences are "
                                       "computed meanwhile)",
                               .env = "TESSERA_WORKER_KVSTORE_TIMEOUT_MS", .min = 10, .max = 600000});
  o.add(c.metrics_host, {.name = "metrics-host",
                         .help = "address of the worker's /metrics, /health and /ready endpoint (IPv4 or IPv6; :: = "
                                 "every address, both)",
                         .env = "TESSERA_WORKER_METRICS_HOST"});
  o.add(c.metrics_port, {.name = "metrics-port",
                         .help = "port of that endpoint (0 = any free port, printed in the READY line; -1 = off)",
                         .env = "TESSERA_WORKER_METRICS_PORT", .min = -1, .max = 65535});
  o.add(c.service.min_step_ms, {.name = "min-step-ms",
                                .help = "pacing for demos and tests: every engine step lasts at least this long "
                                        "(the worker holds its result back), so a generation of N tokens takes at "
                                        "least N times this; 0 = off (docs/operations.md \"Pacing\")",
                                .env = "TESSERA_WORKER_MIN_STEP_MS", .min = 0, .max = 1000});
  o.add(c.service.drain_timeout_s, {.name = "drain-timeout-s",
                                    .help = "on SIGTERM the worker drains: no new requests, the running ones finish; "
                                            "after this long it exits anyway (the scheduler re-queues or fails what is "
                                            "left)",
                                    .env = "TESSERA_WORKER_DRAIN_TIMEOUT_S", .min = 0, .max = 86400});
  o.add({.name = "kv-codec",
         .help = "codec of preference K/V put to the kvstore, stored from f16 (int8/int4 use groups of 64 values; kivi: "
                 "per-channel blocks of 64 tokens, entropy-coded; tiered: per-head steps, the last tokens finer, "
                 "range-coded, tuned by --kv-codec-step, --kv-codec-recent and --kv-codec-decay; docs/kv.md)",
         .env = "TESSERA_WORKER_KV_CODEC", .choices = {"none", "zstd", "int8", "int4", "kivi", "tiered"}},
        kvstore::codec_name(c.injector.codec.codec),
        // parse_codec cannot fail here: the value is one of the choices.
        [&c](const std::string& v) { c.injector.codec.codec = kvstore::parse_codec(v).value(); });
  o.add(c.injector.codec.tiered_step,
        {.name = "kv-codec-step",
         .help = "tiered codec: V's quantization step as a fraction of each head's RMS deviation (K's is 0.15 of it); "
                 "on stories260K 0.05 keeps the attention output within 1e-2 at 1.9x smaller than f16, 0.4 gives 3x "
                 "at 0.08 (docs/kv.md)",
         .env = "TESSERA_WORKER_KV_CODEC_STEP", .min = 0.001, .max = 4});
  o.add(c.injector.codec.tiered_recent,
        {.name = "kv-codec-recent",
         .help = "tiered codec: the last this many tokens of a blob are coded with 16x finer steps (they get most of "
                 "the attention of what follows)",
         .env = "TESSERA_WORKER_KV_CODEC_RECENT", .min = 0, .max = 65536});
  o.add(c.injector.codec.tiered_decay,
        {.name = "kv-codec-decay",
         .help = "tiered codec: token steps grow as (1 + distance from the blob's end / 32)^decay, at most 64x (later "
                 "queries attend mostly to the last tokens); 0 = one step for all. On stories260K decay 1.5 with "
                 "--kv-codec-recent 0 and --kv-codec-step 0.012 keeps the attention output within 1e-2 at 1.96x "
                 "(2.37x on a 272-token preference); not for offloaded pages (docs/kv.md)",
         .env = "TESSERA_WORKER_KV_CODEC_DECAY", .min = 0, .max = 4});
  o.add(c.kv_offload, {.name = "kv-offload",
                       .help = "spill radix pages the scheduler evicts to the kvstore (compressed) and reload prefix "
                               "continuations from it instead of recomputing them; needs --kvstore (docs/kv.md)",
                       .env = "TESSERA_WORKER_KV_OFFLOAD"});
  o.add(c.kv_offload_codec, {.name = "kv-offload-codec",
                             .help = "codec of spilled pages, stored from f16: none, zstd (exact), int8 (groups of 64 "
                                     "values), int4, kivi, tiered (their parameters: the --kv-codec-* options), or any other "
                                     "kvstore codec (docs/kv.md)",
                             .env = "TESSERA_WORKER_KV_OFFLOAD_CODEC"});
  o.add({.name = "kv-offload-dtype",
         .help = "element type spilled pages are stored from before the codec: f16 (half the bytes) or f32 (with "
                 "--kv-offload-codec none/zstd: bit-exact reloads into an f32 pool)",
         .env = "TESSERA_WORKER_KV_OFFLOAD_DTYPE", .choices = {"f16", "f32"}},
        c.kv_offload_dtype, [&c](const std::string& v) { c.kv_offload_dtype = v; });
  o.add(c.kv_offload_max_pending_mb, {.name = "kv-offload-max-pending-mb",
                                      .help = "K/V read for spills and not yet put to the kvstore, in MiB; spills beyond "
                                              "it are dropped (counted)",
                                      .env = "TESSERA_WORKER_KV_OFFLOAD_MAX_PENDING_MB", .min = 1, .max = 1 << 20});
  curve::declare_options(o, c.curve, curve::Role::kWorker);
}

}  // namespace tessera::worker_app
