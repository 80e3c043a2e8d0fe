// Bad bytes into decode(): truncated, garbage, wrong types, out-of-range values. Each must give
// the documented ErrorCode with a message naming the field, and never crash.
#define MSGPACK_NO_BOOST 1
#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <random>

#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

// Builds a msgpack map from (key, value-packer) pairs.
class MapBuilder {
 public:
  template <class T>
  MapBuilder& add(const std::string& k, const T& v) {
    entries_.push_back([k, v](msgpack::packer<msgpack::sbuffer>& pk) {
      pk.pack(k);
      pk.pack(v);
    });
    return *this;
  }
  MapBuilder& header(const std::string& type, uint64_t id = 1, int v = 1) {
    return add("v", v).add("type", type).add("id", id);
  }
  std::string bytes() const {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(&buf);
    pk.pack_map(static_cast<uint32_t>(entries_.size()));
    for (const auto& e : entries_) e(pk);
    return std::string(buf.data(), buf.size());
  }

 private:
  std::vector<std::function<void(msgpack::packer<msgpack::sbuffer>&)>> entries_;
};

void expect_error(const std::string& bytes, ErrorCode code, const std::string& needle) {
  auto r = decode(bytes);
  ASSERT_FALSE(r.ok()) << "decoded as " << message_type(*r);
  EXPECT_EQ(r.error().code, code) << r.error().to_string();
  EXPECT_NE(r.error().message.find(needle), std::string::npos)
      << "message '" << r.error().message << "' should mention '" << needle << "'";
}

TEST(ProtocolBadInput, EmptyAndGarbage) {
  expect_error("", ErrorCode::kMalformedMessage, "empty");
  expect_error("hello, world", ErrorCode::kMalformedMessage, "trailing");  // fixint 104, then junk
  expect_error("h", ErrorCode::kInvalidArgument, "must be a map (got integer)");
  expect_error(std::string("\xc1", 1), ErrorCode::kMalformedMessage, "msgpack");  // never-used byte
  expect_error(std::string("\x93\x01\x02\x03", 4), ErrorCode::kInvalidArgument, "must be a map");
}

TEST(ProtocolBadInput, TrailingBytes) {
  std::string ok = encode(Message(CancelRequest{.id = 3}));
  expect_error(ok + "x", ErrorCode::kMalformedMessage, "trailing");
}

TEST(ProtocolBadInput, EveryTruncationFailsCleanly) {
  StepPlan p;
  p.step_id = 9;
  p.seqs = {SeqPlan{.request_id = 1, .tokens = {1, 2, 3}, .start_pos = 0, .block_table = {0},
                    .slot_mapping = {0, 1, 2}, .sample = true}};
  GenerateRequest g;
  g.prompt = "Once upon a time";
  g.stop = {"x"};
  for (const std::string& full : {encode(Message(StepPlanMsg{.id = 9, .plan = p})), encode(Message(g)),
                                  encode(Message(FinalEvent{.id = 2}))}) {
    ASSERT_TRUE(decode(full).ok());
    for (size_t n = 1; n < full.size(); ++n) {
      auto r = decode(std::string_view(full).substr(0, n));
      ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes decoded";
      EXPECT_EQ(r.error().code, ErrorCode::kMalformedMessage) << n << ": " << r.error().to_string();
    }
  }
}

TEST(ProtocolBadInput, RandomBytesNeverCrash) {
  std::mt19937 rng(1234);
  std::string base = encode(Message(GenerateRequest{.id = 5, .prompt = "abc", .prompt_tokens = {1, 2}}));
  int ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string b = base;
    // Flip 1-4 random bytes; sometimes append random junk.
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<char>(rng());
    if (iter % 5 == 0) b.resize(rng() % (b.size() + 1));
    auto r = decode(b);
    if (r.ok()) ++ok;
    else EXPECT_NE(r.error().code, ErrorCode::kOk);
  }
  // Also fully random buffers.
  for (int iter = 0; iter < 2000; ++iter) {
    std::string b(1 + rng() % 64, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    auto r = decode(b);
    if (r.ok()) ++ok;
  }
  SUCCEED() << ok << " mutated buffers still decoded";
}

TEST(ProtocolBadInput, HugeDeclaredSizesAreRejected) {
  // array32 claiming 4 billion elements, map32 claiming 4 billion entries, str32 of 4 GiB.
  expect_error(std::string("\xdd\xff\xff\xff\xff", 5), ErrorCode::kMalformedMessage, "msgpack");
  expect_error(std::string("\xdf\xff\xff\xff\xff", 5), ErrorCode::kMalformedMessage, "msgpack");
  expect_error(std::string("\xdb\xff\xff\xff\xff", 5), ErrorCode::kMalformedMessage, "msgpack");
  // Deep nesting: 100 nested arrays.
  expect_error(std::string(100, '\x91') + '\x01', ErrorCode::kMalformedMessage, "msgpack");
}

TEST(ProtocolBadInput, HeaderFields) {
  expect_error(MapBuilder().add("type", "cancel").add("id", 1).bytes(), ErrorCode::kInvalidArgument, "'v'");
  expect_error(MapBuilder().header("cancel", 1, 2).bytes(), ErrorCode::kProtocolMismatch, "version 2");
  expect_error(MapBuilder().add("v", 1).add("id", 1).bytes(), ErrorCode::kInvalidArgument, "'type'");
  expect_error(MapBuilder().add("v", 1).add("type", 7).add("id", 1).bytes(), ErrorCode::kInvalidArgument, "'type' must be a string");
  expect_error(MapBuilder().add("v", 1).add("type", "cancel").bytes(), ErrorCode::kInvalidArgument, "'id'");
  expect_error(MapBuilder().add("v", 1).add("type", "cancel").add("id", -3).bytes(), ErrorCode::kOutOfRange, "'id' must be >= 0");
  expect_error(MapBuilder().add("v", 1).add("type", "cancel").add("id", "abc").bytes(), ErrorCode::kInvalidArgument, "'id' must be an integer");
  expect_error(MapBuilder().header("teleport").bytes(), ErrorCode::kInvalidArgument, "unknown message type 'teleport'");
}

TEST(ProtocolBadInput, UnknownFieldsAndNilAreIgnored) {
  auto r = decode(MapBuilder().header("completion", 12).add("prompt", "hi").add("future_field", 3.5)
                      .add("max_tokens", msgpack::type::nil_t()).bytes());
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  const auto& g = std::get<GenerateRequest>(*r);
  EXPECT_EQ(g.id, 12u);
  EXPECT_EQ(g.prompt, "hi");
  EXPECT_EQ(g.max_tokens, 16);  // documented default
  EXPECT_TRUE(g.stream);
}

TEST(ProtocolBadInput, WrongTypes) {
  expect_error(MapBuilder().header("completion").add("prompt", 5).bytes(), ErrorCode::kInvalidArgument, "'prompt' must be a string");
  expect_error(MapBuilder().header("completion").add("max_tokens", "ten").bytes(), ErrorCode::kInvalidArgument, "'max_tokens' must be an integer");
  expect_error(MapBuilder().header("completion").add("max_tokens", 2.5).bytes(), ErrorCode::kInvalidArgument, "'max_tokens' must be an integer");
  expect_error(MapBuilder().header("completion").add("stream", 1).bytes(), ErrorCode::kInvalidArgument, "'stream' must be a bool");
  expect_error(MapBuilder().header("completion").add("temperature", "hot").bytes(), ErrorCode::kInvalidArgument, "'temperature' must be a number");
  expect_error(MapBuilder().header("completion").add("prompt_tokens", std::vector<std::string>{"a"}).bytes(),
               ErrorCode::kInvalidArgument, "'prompt_tokens[0]' must be an integer");
  expect_error(MapBuilder().header("completion").add("stop", "x").bytes(), ErrorCode::kInvalidArgument, "'stop' must be an array");
  expect_error(MapBuilder().header("chat").add("messages", std::vector<int>{1}).bytes(), ErrorCode::kInvalidArgument, "'messages[0]' must be a map");
  std::map<std::string, std::string> no_content{{"role", "user"}};
  expect_error(MapBuilder().header("chat").add("messages", std::vector<std::map<std::string, std::string>>{no_content}).bytes(),
               ErrorCode::kInvalidArgument, "messages[0].content");
  expect_error(MapBuilder().header("error").add("code", "bad").bytes(), ErrorCode::kInvalidArgument, "'code' must be an integer");
  expect_error(MapBuilder().header("step_plan").add("step_id", 1).add("seqs", std::vector<std::map<std::string, int>>{{{"request_id", 1}}}).bytes(),
               ErrorCode::kInvalidArgument, "seqs[0].tokens");
  expect_error(MapBuilder().header("final").add("usage", 3).bytes(), ErrorCode::kInvalidArgument, "'usage' must be a map");
}

TEST(ProtocolBadInput, OutOfRange) {
  auto req = [] { return MapBuilder().header("completion").add("prompt", "p"); };
  expect_error(req().add("max_tokens", 0).bytes(), ErrorCode::kOutOfRange, "max_tokens must be >= 1 (got 0)");
  expect_error(req().add("max_tokens", -5).bytes(), ErrorCode::kOutOfRange, "max_tokens must be >= 1 (got -5)");
  expect_error(req().add("max_tokens", 1ll << 40).bytes(), ErrorCode::kOutOfRange, "'max_tokens' is too large");
  expect_error(req().add("temperature", -0.1).bytes(), ErrorCode::kOutOfRange, "temperature must be in [0, 2]");
  expect_error(req().add("temperature", std::nan("")).bytes(), ErrorCode::kOutOfRange, "temperature");
  expect_error(req().add("top_p", 0).bytes(), ErrorCode::kOutOfRange, "top_p must be in (0, 1]");
  expect_error(req().add("top_k", -1).bytes(), ErrorCode::kOutOfRange, "top_k must be >= 0");
  expect_error(req().add("min_p", 1.5).bytes(), ErrorCode::kOutOfRange, "min_p");
  expect_error(req().add("top_logprobs", 21).bytes(), ErrorCode::kOutOfRange, "top_logprobs must be in [0, 20]");
  expect_error(req().add("presence_penalty", 3).bytes(), ErrorCode::kOutOfRange, "presence_penalty");
  expect_error(req().add("repetition_penalty", 0).bytes(), ErrorCode::kOutOfRange, "repetition_penalty");
  expect_error(req().add("preference_alpha", 1.5).bytes(), ErrorCode::kOutOfRange, "preference_alpha");
  expect_error(req().add("priority", 101).bytes(), ErrorCode::kOutOfRange, "priority");
  expect_error(req().add("prompt_tokens", std::vector<int>{1, -2}).bytes(), ErrorCode::kOutOfRange, "prompt_tokens[1]");
  expect_error(req().add("stop", std::vector<std::string>{""}).bytes(), ErrorCode::kInvalidArgument, "stop[0] must not be empty");
  expect_error(req().add("stop", std::vector<std::string>(17, "x")).bytes(), ErrorCode::kOutOfRange, "at most 16");
  expect_error(MapBuilder().header("chat").add("messages", std::vector<int>{}).bytes(), ErrorCode::kInvalidArgument, "messages must not be empty");
  std::map<std::string, std::string> bad_role{{"role", "robot"}, {"content", "x"}};
  expect_error(MapBuilder().header("chat").add("messages", std::vector<std::map<std::string, std::string>>{bad_role}).bytes(),
               ErrorCode::kInvalidArgument, "role must be system, user, assistant or tool (got 'robot')");
  expect_error(MapBuilder().header("register").add("worker_name", "w").add("model_fingerprint", 1).add("num_pages", 0)
                   .add("max_batch_tokens", 1).add("max_seq_len", 1).add("vocab_size", 1).bytes(),
               ErrorCode::kOutOfRange, "num_pages must be >= 1 (got 0)");
}

TEST(ProtocolBadInput, InconsistentPlan) {
  StepPlan p;
  p.seqs = {SeqPlan{.request_id = 1, .tokens = {1, 2}, .block_table = {0}, .slot_mapping = {0}}};
  expect_error(encode(Message(StepPlanMsg{.id = 1, .plan = p})), ErrorCode::kInvalidArgument, "slot_mapping has 1 entries for 2 tokens");
  p.seqs = {SeqPlan{.request_id = 1, .tokens = {1}, .block_table = {0}, .slot_mapping = {0}},
            SeqPlan{.request_id = 1, .tokens = {1}, .block_table = {1}, .slot_mapping = {16}}};
  expect_error(encode(Message(StepPlanMsg{.id = 1, .plan = p})), ErrorCode::kInvalidArgument, "appears twice");
  p.seqs = {SeqPlan{.request_id = 1, .tokens = {1}, .block_table = {-1}, .slot_mapping = {0}}};
  expect_error(encode(Message(StepPlanMsg{.id = 1, .plan = p})), ErrorCode::kOutOfRange, "negative page id");
}

}  // namespace
}  // namespace tessera::protocol
