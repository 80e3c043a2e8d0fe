// Pinned-prefix admin routes: see prefix_admin.h.
#include "prefix_admin.h"

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tessera/common/routing.h"
#include "tessera/frontend/hub.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/request_preparer.h"

namespace tessera::frontend {

using json = nlohmann::json;

namespace {

AdminReply reply(int status, const json& body) { return {status, body.dump(-1, ' ', false, json::error_handler_t::replace)}; }
AdminReply fail(int status, ErrorCode code, const std::string& message, std::string_view param = "") {
  return {status, error_json(make_error(code, message), param, "", status)};
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

json entry_json(const std::string& scheduler, const protocol::PrefixEntry& e) {
  json j{{"scheduler", scheduler}, {"worker", e.worker}};
  if (!e.error.empty()) {
    j["error"] = e.error;
    return j;
  }
  j["prefix"] = hex16(e.hash);
  j["namespace"] = hex16(e.ns_hash);
  j["tokens"] = e.tokens;
  j["pages"] = e.pages;
  j["hits"] = e.hits;
  j["pinned"] = e.pinned;
  return j;
}

// The schedulers' answers as one JSON reply: every entry, the pin totals, and each scheduler
// that failed under "errors".
struct Gathered {
  json entries = json::array();
  json errors = json::array();
  int32_t pinned_pages = 0;
  int32_t pin_budget_pages = 0;
  int ok_entries = 0;      // entries without an error
  std::string first_error;
};

Gathered gather_answers(const std::vector<protocol::Message>& answers) {
  Gathered g;
  for (const auto& m : answers) {
    if (const auto* r = std::get_if<protocol::PrefixReport>(&m)) {
      for (const auto& e : r->entries) {
        g.entries.push_back(entry_json(r->scheduler, e));
        if (e.error.empty()) {
          ++g.ok_entries;
        } else if (g.first_error.empty()) {
          g.first_error = e.worker + ": " + e.error;
        }
      }
      g.pinned_pages += r->pinned_pages;
      g.pin_budget_pages += r->pin_budget_pages;
    } else if (const auto* e = std::get_if<protocol::ErrorEvent>(&m)) {
      g.errors.push_back({{"code", std::string(error_code_name(e->code))}, {"message", e->message}});
      if (g.first_error.empty()) g.first_error = e->message;
    }
  }
  return g;
}

json totals(const Gathered& g, json body) {
  body["pinned_pages"] = g.pinned_pages;
  body["pin_budget_pages"] = g.pin_budget_pages;
  if (!g.errors.empty()) body["errors"] = g.errors;
  return body;
}

}  // namespace

std::variant<AdminReply, PrefixCall> parse_prefix_call(std::string_view method, std::string_view path, std::string_view query,
                                                       const std::string& body) {
  constexpr std::string_view kBase = "/admin/v1/prefixes";
  std::string_view rest = path.substr(kBase.size());
  if (rest.empty() || rest == "/") {
    if (method == "POST") return PrefixCall{.method = "POST", .body = body};
    if (method != "GET")
      return fail(405, ErrorCode::kInvalidArgument, "method " + std::string(method) + " is not allowed on " + std::string(path) + " (GET, POST)");
    PrefixCall call{.method = "GET"};
    // The one query parameter: limit=N (0..kMaxPrefixListLimit), default 0 (pins only).
    for (size_t start = 0; start < query.size();) {
      const size_t end = std::min(query.find('&', start), query.size());
      const std::string_view kv = query.substr(start, end - start);
      start = end + 1;
      if (kv.substr(0, 6) != "limit=")
        return fail(400, ErrorCode::kInvalidArgument, "unknown query parameter '" + std::string(kv) + "' (limit)", "limit");
      const std::string_view v = kv.substr(6);
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), call.limit);
      if (ec != std::errc() || p != v.data() + v.size() || call.limit < 0 || call.limit > protocol::kMaxPrefixListLimit)
        return fail(400, ErrorCode::kOutOfRange,
                    "limit must be an integer in [0, " + std::to_string(protocol::kMaxPrefixListLimit) + "]", "limit");
    }
    return call;
  }
  if (rest[0] != '/' || method != "DELETE") {
    if (rest[0] == '/' && method != "DELETE")
      return fail(405, ErrorCode::kInvalidArgument, "method " + std::string(method) + " is not allowed on " + std::string(path) + " (DELETE)");
    return fail(404, ErrorCode::kNotFound, "unknown admin route " + std::string(path));
  }
  const std::string_view hex = rest.substr(1);
  PrefixCall call{.method = "DELETE"};
  auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), call.hash, 16);
  if (hex.size() != 16 || ec != std::errc() || p != hex.data() + hex.size() || call.hash == 0)
    return fail(400, ErrorCode::kInvalidArgument, "the prefix in the path must be 16 hex digits, as GET /admin/v1/prefixes lists it");
  return call;
}

void run_prefix_call(const PrefixCall& call, const RequestPreparer& preparer, Hub& hub, std::function<void(AdminReply)> done) {
  if (call.method == "GET") {
    hub.gather(protocol::PrefixAdmin{.op = "list", .limit = call.limit}, /*to_all=*/true, [done](std::vector<protocol::Message> answers) {
      const Gathered g = gather_answers(answers);
      if (g.entries.empty() && !g.errors.empty()) return done(fail(503, ErrorCode::kUnavailable, g.first_error));
      done(reply(200, totals(g, {{"object", "list"}, {"data", g.entries}})));
    });
    return;
  }
  if (call.method == "DELETE") {
    hub.gather(protocol::PrefixAdmin{.op = "unpin", .prefix = call.hash}, /*to_all=*/true,
               [done, hash = call.hash](std::vector<protocol::Message> answers) {
                 const Gathered g = gather_answers(answers);
                 if (g.ok_entries == 0) {
                   if (!g.errors.empty()) return done(fail(503, ErrorCode::kUnavailable, g.first_error));
                   return done(fail(404, ErrorCode::kNotFound, "no worker has prefix " + hex16(hash) + " pinned"));
                 }
                 done(reply(200, totals(g, {{"prefix", hex16(hash)}, {"unpinned", g.entries}})));
               });
    return;
  }
  // POST: the prefix as a request would be tokenized.
  json j = json::parse(call.body, nullptr, false);
  if (!j.is_object())
    return done(fail(400, ErrorCode::kMalformedMessage, "body must be a JSON object with \"prompt\", \"messages\" or \"tokens\""));
  protocol::GenerateRequest r{.max_tokens = 1};
  int given = 0;
  try {
    if (j.contains("prompt")) {
      ++given;
      if (!j["prompt"].is_string() || j["prompt"].get<std::string>().empty())
        return done(fail(400, ErrorCode::kInvalidArgument, "prompt must be a non-empty string", "prompt"));
      r.prompt = j["prompt"].get<std::string>();
    }
    if (j.contains("messages")) {
      ++given;
      r.kind = protocol::RequestKind::kChat;
      if (!j["messages"].is_array() || j["messages"].empty())
        return done(fail(400, ErrorCode::kInvalidArgument, "messages must be a non-empty array", "messages"));
      for (const auto& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") || !m["content"].is_string())
          return done(fail(400, ErrorCode::kInvalidArgument, "each message needs string \"role\" and \"content\"", "messages"));
        r.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
    }
    if (j.contains("tokens")) {
      ++given;
      if (!j["tokens"].is_array() || j["tokens"].empty())
        return done(fail(400, ErrorCode::kInvalidArgument, "tokens must be a non-empty array of token ids", "tokens"));
      for (const auto& t : j["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          return done(fail(400, ErrorCode::kInvalidArgument, "tokens must hold non-negative integer token ids", "tokens"));
        r.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    }
    if (given != 1) return done(fail(400, ErrorCode::kInvalidArgument, "give exactly one of \"prompt\", \"messages\", \"tokens\""));
    std::vector<std::string> workers;
    if (j.contains("workers")) {
      if (!j["workers"].is_array()) return done(fail(400, ErrorCode::kInvalidArgument, "workers must be an array of worker names or [\"*\"]", "workers"));
      for (const auto& w : j["workers"]) {
        if (!w.is_string() || w.get<std::string>().empty() || w.get<std::string>().size() > 256)
          return done(fail(400, ErrorCode::kInvalidArgument, "workers must hold worker names (1-256 bytes) or \"*\"", "workers"));
        workers.push_back(w.get<std::string>());
      }
    }
    for (const char* field : {"tenant", "cache_salt"}) {
      if (!j.contains(field)) continue;
      if (!j[field].is_string()) return done(fail(400, ErrorCode::kInvalidArgument, std::string(field) + " must be a string", field));
      (field[0] == 't' ? r.tenant : r.cache_salt) = j[field].get<std::string>();
    }
    if (r.tenant.size() > protocol::kMaxTenantBytes || r.cache_salt.size() > protocol::kMaxCacheSaltBytes)
      return done(fail(400, ErrorCode::kInvalidArgument, "tenant is at most 128 bytes and cache_salt 256"));
    if (Status st = preparer.prepare(r); !st.ok()) return done(fail(http_status(st.error().code), st.error().code, st.error().message));
    preparer.finish(r);
    protocol::PrefixAdmin a{.op = "pin", .prompt_tokens = std::move(r.prompt_tokens), .routing_key = r.routing_key,
                            .tenant = r.tenant == "default" ? "" : r.tenant, .cache_salt = r.cache_salt, .workers = std::move(workers)};
    const bool to_all = !a.workers.empty();  // named workers or "*": every scheduler pins on those it has
    const size_t tokens = a.prompt_tokens.size();
    hub.gather(std::move(a), to_all, [done, tokens](std::vector<protocol::Message> answers) {
      const Gathered g = gather_answers(answers);
      if (g.ok_entries == 0)
        return done(fail(409, ErrorCode::kUnavailable, "the prefix was pinned nowhere: " + (g.first_error.empty() ? "no worker matched" : g.first_error)));
      done(reply(200, totals(g, {{"prompt_tokens", tokens}, {"workers", g.entries}})));
    });
  } catch (const json::exception& e) {
    done(fail(400, ErrorCode::kInvalidArgument, std::string("bad field: ") + e.what()));
  }
}

}  // namespace tessera::frontend
