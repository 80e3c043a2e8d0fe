#include "tessera/scheduler/intake.h"

#include <optional>
#include <span>
#include <utility>

#include "tessera/common/dki.h"

namespace tessera::scheduler {
namespace {

Status check_tokens(const char* field, std::span<const int32_t> tokens, int32_t vocab) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || (vocab > 0 && t >= vocab))
      return make_error(ErrorCode::kInvalidArgument, std::string(field) + "[" + std::to_string(i) + "] = " +
                                                         std::to_string(t) + " is outside the vocabulary [0, " +
                                                         std::to_string(vocab) + ")");
  }
  return ok_status();
}

}  // namespace

Status Intake::validate(const protocol::GenerateRequest& r, const WorkerFacts& facts) {
  if (r.prompt_tokens.empty())
    return make_error(ErrorCode::kInvalidArgument, "prompt_tokens is empty (the frontend sends the tokenized prompt)");
  if (!r.preference.empty() && r.preference_tokens.empty())
    return make_error(ErrorCode::kInvalidArgument,
                      "preference is set but preference_tokens is empty (the frontend tokenizes it)");
  TS_TRY(check_tokens("preference_tokens", r.preference_tokens, facts.vocab_size));
  if (r.tenant.size() > protocol::kMaxTenantBytes)
    return make_error(ErrorCode::kInvalidArgument, "tenant has " + std::to_string(r.tenant.size()) + " bytes, at most " +
                                                       std::to_string(protocol::kMaxTenantBytes));
  if (r.cache_salt.size() > protocol::kMaxCacheSaltBytes)
    return make_error(ErrorCode::kInvalidArgument, "cache_salt has " + std::to_string(r.cache_salt.size()) +
                                                       " bytes, at most " + std::to_string(protocol::kMaxCacheSaltBytes));
  if (r.user.size() > dki::kMaxUserBytes)
    return make_error(ErrorCode::kInvalidArgument, "user has " + std::to_string(r.user.size()) + " bytes, at most " +
                                                       std::to_string(dki::kMaxUserBytes));
  if (!r.blend_chunks.empty()) {  // CacheBlend (docs/kv.md)
    if (r.blend_chunks.size() > kMaxBlendChunks)
      return make_error(ErrorCode::kInvalidArgument, "blend_chunks has " + std::to_string(r.blend_chunks.size()) +
                                                         " documents, at most " + std::to_string(kMaxBlendChunks));
    int64_t end = 0;
    for (size_t i = 0; i < r.blend_chunks.size(); ++i) {
      const BlendChunk& c = r.blend_chunks[i];
      if (c.length < 1 || c.begin < end || static_cast<int64_t>(c.begin) + c.length > static_cast<int64_t>(r.prompt_tokens.size()))
        return make_error(ErrorCode::kInvalidArgument, "blend_chunks[" + std::to_string(i) +
                                                           "] must be non-empty, after the previous one and inside the prompt");
      end = static_cast<int64_t>(c.begin) + c.length;
    }
    if (!r.preference.empty() || r.kv_policy.type != KvPolicyType::kNone)
      return make_error(ErrorCode::kInvalidArgument, "documents (blend_chunks) cannot be combined with a preference or a kv_policy");
    if (r.recompute_ratio > 1.0f)
      return make_error(ErrorCode::kInvalidArgument, "recompute_ratio must be in [0, 1]");
  }
  return check_tokens("prompt_tokens", r.prompt_tokens, facts.vocab_size);
}

Result<Admission> Intake::admit(protocol::GenerateRequest r, uint64_t id, const WorkerFacts& facts) const {
  TS_TRY(validate(r, facts));
  Admission a;
  Request& req = a.request;
  req.id = id;
  req.prompt = std::move(r.prompt_tokens);
  req.ns.model_fingerprint = dki::hex16(facts.model_fingerprint);
  req.ns.tenant_salt = tenant_salt(r.tenant, r.cache_salt);
  if (!config_.prefix_cache) req.ns.tenant_salt = "no-prefix-cache:" + std::to_string(id);
  // dki: preference K/V injection (docs/preference.md). effective_alpha <= 0.1 means none at all.
  if (!r.preference_tokens.empty()) {
    if (const std::optional<float> alpha = dki::effective_alpha(r.preference_alpha)) {
      const uint64_t hash = dki::preference_hash(r.preference_tokens, facts.model_fingerprint);
      req.ns.user = r.user.empty() ? "\x01" "anonymous:" + std::to_string(id) : r.user;  // "" = never shared, never cached
      req.ns.preference_hash = hash == 0 ? 1 : hash;
      req.ns.alpha = *alpha;
      if (const uint64_t ep = epoch(r.user); ep > 0) req.ns.tenant_salt += "|pref-epoch:" + std::to_string(ep);
      a.has_preference = true;
      req.preference = Preference{.blob_key = dki::make_blob_key(r.user, hash),
                                  .num_tokens = static_cast<int32_t>(r.preference_tokens.size()),
                                  .alpha = *alpha,
                                  .tokens = std::move(r.preference_tokens)};
    }
  }
  req.sampling = r.sampling;
  req.max_tokens = r.max_tokens;
  req.stop_ids = std::move(r.stop_token_ids);
  req.ignore_eos = r.ignore_eos;
  req.priority = r.priority;
  req.routing_key = std::move(r.routing_key);
  req.kv_policy = r.kv_policy;
  req.blend_chunks = std::move(r.blend_chunks);
  req.recompute_ratio = r.recompute_ratio;
  return a;
}

std::string Intake::tenant_salt(std::string_view tenant, std::string_view cache_salt) {
  if (tenant == kDefaultTenant) tenant = "";
  if (tenant.empty() && cache_salt.empty()) return "";  // today's shared namespace (and routing seed 0)
  // Length-prefixed, so no (tenant, cache_salt) pair can spell another's salt.
  std::string salt = "tenant:" + std::to_string(tenant.size()) + ":" + std::string(tenant);
  if (!cache_salt.empty()) salt += "|cache_salt:" + std::to_string(cache_salt.size()) + ":" + std::string(cache_salt);
  return salt;
}

uint64_t Intake::invalidate_user(const std::string& user) { return ++preference_epoch_[user]; }

uint64_t Intake::epoch(const std::string& user) const {
  auto it = preference_epoch_.find(user);
  return it == preference_epoch_.end() ? 0 : it->second;
}

}  // namespace tessera::scheduler
