// tessera-frontend's options: each bound to its FrontendConfig member, whose initializer is the
// default (frontend.h). `tessera up` reads this table to forward the options it shares.
#include "tessera/frontend/frontend.h"

namespace tessera::frontend {

void declare_options(config::Options& o, FrontendConfig& c) {
  o.add(c.host, {.name = "host", .help = "HTTP listen address", .env = "TESSERA_FRONTEND_HOST"});
  o.add(c.http_port, {.name = "http-port", .help = "HTTP listen port (0 = any free port)", .env = "TESSERA_HTTP_PORT",
                      .min = 0, .max = 65535});
  o.add(c.zmq_endpoint, {.name = "zmq-endpoint",
                         .help = "ZeroMQ ROUTER endpoint of the msgpack client API (\"\" = off; port * = any free "
                                 "port)",
                         .env = "TESSERA_ZMQ_ENDPOINT"});
  o.add(c.schedulers, {.name = "schedulers",
                       .help = "comma-separated schedulers (ZeroMQ ROUTER), each tcp://HOST:PORT, dns:NAME:PORT (every "
                               "address of NAME, re-resolved: a Kubernetes headless Service) or file:PATH (one entry a "
                               "line, re-read); a request goes to the owner of its routing key on a consistent-hash "
                               "ring with bounded loads (docs/architecture.md \"Several schedulers\")",
                       .env = "TESSERA_SCHEDULERS"});
  o.add(c.scheduler_refresh_ms, {.name = "scheduler-refresh-ms",
                                 .help = "dns: and file: entries of --schedulers are resolved again this often; "
                                         "schedulers join and leave without a restart",
                                 .env = "TESSERA_SCHEDULER_REFRESH_MS", .min = 100, .max = 3600000});
  o.add(c.scheduler_load_epsilon, {.name = "scheduler-load-epsilon",
                                   .help = "bounded loads between schedulers: none gets more than (1 + eps) x the mean of "
                                           "this frontend's in-flight requests (rounded up); past it a routing key "
                                           "spills to the next scheduler clockwise (0 = off: plain consistent hashing)",
                                   .env = "TESSERA_SCHEDULER_LOAD_EPSILON", .min = 0, .max = 100});
  o.add(c.model, {.name = "model",
                  .help = "model file or directory: source of the tokenizer (GGUF), chat template and served name",
                  .env = "TESSERA_MODEL"});
  o.add(c.tokenizer, {.name = "tokenizer",
                      .help = "tokenizer file (tokenizer.bin, tokenizer.json, .gguf); \"\" = the model's",
                      .env = "TESSERA_TOKENIZER"});
  o.add(c.model_name, {.name = "model-name",
                       .help = "model id served in /v1/models and accepted in requests; \"\" = model file name "
                               "without extension",
                       .env = "TESSERA_MODEL_NAME"});
  o.add(c.chat_template, {.name = "chat-template",
                          .help = "chat template: auto (render the model's own Jinja template; built-in ChatML when "
                                  "it has none) or a fixed built-in one",
                          .env = "TESSERA_CHAT_TEMPLATE", .choices = {"auto", "chatml", "llama2", "llama3"}});
  o.add(c.chat_template_file, {.name = "chat-template-file",
                               .help = "file with a Jinja chat template to render instead of the model's",
                               .env = "TESSERA_CHAT_TEMPLATE_FILE"});
  o.add(c.http_threads, {.name = "http-threads", .help = "threads serving HTTP", .env = "TESSERA_HTTP_THREADS",
                         .min = 1, .max = 64});
  o.add(c.max_body_bytes, {.name = "max-body-bytes", .help = "largest request body; larger gets 413",
                           .env = "TESSERA_MAX_BODY_BYTES", .min = 1024, .max = 1 << 30});
  o.add(c.max_prompt_tokens, {.name = "max-prompt-tokens", .help = "longest prompt in tokens; longer gets 413",
                              .env = "TESSERA_MAX_PROMPT_TOKENS", .min = 1, .max = 1 << 24});
  o.add(c.max_concurrent_requests, {.name = "max-concurrent-requests",
                                    .help = "requests in flight at this frontend; more get 429",
                                    .env = "TESSERA_MAX_CONCURRENT_REQUESTS", .min = 1, .max = 1 << 20});
  o.add(c.max_queued_requests, {.name = "max-queued-requests",
                                .help = "requests waiting at the schedulers (from their heartbeats) above which new "
                                        "ones get 429",
                                .env = "TESSERA_MAX_QUEUED_REQUESTS", .min = 0, .max = 1 << 24});
  o.add(c.default_max_tokens, {.name = "default-max-tokens", .help = "max_tokens when a request gives none",
                               .env = "TESSERA_DEFAULT_MAX_TOKENS", .min = 1, .max = 1 << 20});
  o.add(c.kv_policy, {.name = "kv-policy",
                      .help = "K/V policy of requests without a kv_policy field (docs/kv.md): none, "
                              "streaming:SINKS:WINDOW or h2o:BUDGET:RECENT",
                      .env = "TESSERA_KV_POLICY"});
  o.add(c.request_timeout_ms, {.name = "request-timeout-ms",
                               .help = "a request still running after this long is cancelled and answered 504",
                               .env = "TESSERA_REQUEST_TIMEOUT_MS", .min = 100, .max = 86400000});
  o.add(c.http_header_timeout_ms, {.name = "http-header-timeout-ms",
                                   .help = "a request header not complete this long after its first byte gets 408 and "
                                           "the connection is closed",
                                   .env = "TESSERA_HTTP_HEADER_TIMEOUT_MS", .min = 10, .max = 3600000});
  o.add(c.http_body_timeout_ms, {.name = "http-body-timeout-ms",
                                 .help = "a request body not complete this long after its header gets 408 and the "
                                         "connection is closed",
                                 .env = "TESSERA_HTTP_BODY_TIMEOUT_MS", .min = 10, .max = 3600000});
  o.add(c.http_write_timeout_ms, {.name = "http-write-timeout-ms",
                                  .help = "a response or SSE chunk the client does not take within this long (or the "
                                          "request timeout) closes the connection and cancels its request",
                                  .env = "TESSERA_HTTP_WRITE_TIMEOUT_MS", .min = 10, .max = 3600000});
  o.add(c.http_send_buffer_bytes, {.name = "http-send-buffer-bytes",
                                   .help = "kernel send buffer of each HTTP connection (SO_SNDBUF): what a client that "
                                           "stops reading can hold",
                                   .env = "TESSERA_HTTP_SEND_BUFFER_BYTES", .min = 4096, .max = 64 << 20});
  o.add(c.heartbeat_ms, {.name = "heartbeat-ms", .help = "heartbeat interval towards schedulers",
                         .env = "TESSERA_HEARTBEAT_MS", .min = 10, .max = 60000});
  o.add(c.scheduler_dead_ms, {.name = "scheduler-dead-ms",
                              .help = "a scheduler silent this long is dead: its requests fail (kPeerDead, HTTP 503) "
                                      "and /ready turns false (one whose connection drops is dead at once)",
                              .env = "TESSERA_SCHEDULER_DEAD_MS", .min = 20, .max = 600000});
  o.add(c.admin_token, {.name = "admin-token",
                        .help = "bearer token of the /admin/v1 endpoints (\"\" = admin endpoints answer 403)",
                        .env = "TESSERA_ADMIN_TOKEN"});
  o.add(c.kvstore, {.name = "kvstore",
                    .help = "tessera-kvstore endpoint holding users' stored preferences and serving invalidation "
                            "(\"\" = none)",
                    .env = "TESSERA_FRONTEND_KVSTORE"});
  o.add(c.kvstore_timeout_ms, {.name = "kvstore-timeout-ms", .help = "wait for one kvstore reply",
                               .env = "TESSERA_FRONTEND_KVSTORE_TIMEOUT_MS", .min = 10, .max = 600000});
  o.add(c.api_key, {.name = "api-key",
                    .help = "API key clients must send (HTTP 'Authorization: Bearer <key>', ZeroMQ api_key); tenant "
                            "\"default\", may name any user (\"\" = none; with no key at all the API is open)",
                    .env = "TESSERA_API_KEY"});
  o.add(c.api_keys_file, {.name = "api-keys-file",
                          .help = "file of API keys, one per line: '<key> <tenant> [<user>,... or *]' (tenant = prefix-cache "
                                  "scope; users the key may name; docs/api.md)",
                          .env = "TESSERA_API_KEYS_FILE"});
  o.add(c.drain_timeout_s, {.name = "drain-timeout-s",
                            .help = "on SIGTERM or POST /admin/v1/drain: new requests get 503 and live ones may run "
                                    "this long; those left then end with an error event, and the process exits 0",
                            .env = "TESSERA_FRONTEND_DRAIN_TIMEOUT_S", .min = 0, .max = 86400});
  o.add(c.instance_id, {.name = "instance-id",
                        .help = "id echoed as \"instance\" by /health and /ready (\"\" = random): lets a "
                                "supervisor check that the process answering is its own",
                        .env = "TESSERA_FRONTEND_INSTANCE_ID"});
  curve::declare_options(o, c.curve, curve::Role::kFrontend);
  o.add(c.zmq_curve, {.name = "zmq-curve",
                      .help = "require CURVE on the ZeroMQ client API: clients need frontend.key and a key pair "
                              "admitted by client.key / client.d/*.key of --curve-dir (docs/security.md)",
                      .env = "TESSERA_ZMQ_CURVE"});
}

}  // namespace tessera::frontend
