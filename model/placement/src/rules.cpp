// Parsing placement rules from YAML (yaml-cpp) into a RuleSet (placement.h). yaml-cpp reports
// errors by exception; they are caught here and become kInvalidArgument "<source>:<line>: ...".
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "tessera/placement/placement.h"

namespace tessera::placement {
namespace {

constexpr const char* kKeys = "match, layers, kind, device, type, allow_requantize, op, thread_share";

std::string at(const std::string& source, const YAML::Mark& mark) {
  return source + ":" + std::to_string(mark.line < 0 ? 0 : mark.line + 1);
}

Error bad(const std::string& where, const std::string& why) { return make_error(ErrorCode::kInvalidArgument, where + ": " + why); }

std::string all_kinds() {
  std::string s;
  for (int k = 0; k <= static_cast<int>(Kind::kOther); ++k) s += (s.empty() ? "" : ", ") + std::string(kind_name(static_cast<Kind>(k)));
  return s;
}

std::string all_types() {
  std::string s = "keep";
  for (int t = 0; t < kDTypeCount; ++t) s += std::string(", ") + dtype_name(static_cast<DType>(t));
  return s;
}

std::optional<DType> parse_type(const std::string& name) {
  for (int t = 0; t < kDTypeCount; ++t) {
    if (name == dtype_name(static_cast<DType>(t))) return static_cast<DType>(t);
  }
  return std::nullopt;
}

Result<std::string> scalar(const YAML::Node& v, const std::string& where, const std::string& key) {
  if (!v.IsScalar()) return bad(where, key + " must be a single value");
  return v.Scalar();
}

Result<int32_t> layer_number(const YAML::Node& v, const std::string& where) {
  int32_t n = -1;
  if (!v.IsScalar() || !YAML::convert<int32_t>::decode(v, n) || n < 0) {
    return bad(where, "layers: '" + (v.IsScalar() ? v.Scalar() : std::string("?")) + "' is not a layer number (0, 1, ...)");
  }
  return n;
}

// layers: 3 | "0-11" | [0, 11]
Result<std::pair<int32_t, int32_t>> parse_layers(const YAML::Node& v, const std::string& where) {
  std::pair<int32_t, int32_t> r;
  if (v.IsSequence()) {
    if (v.size() != 2) return bad(where, "layers: a list must be [first, last]");
    TS_ASSIGN_OR_RETURN(r.first, layer_number(v[0], where));
    TS_ASSIGN_OR_RETURN(r.second, layer_number(v[1], where));
  } else if (v.IsScalar() && v.Scalar().find('-') != std::string::npos && v.Scalar().find('-') > 0) {
    const std::string s = v.Scalar();
    const size_t dash = s.find('-');
    TS_ASSIGN_OR_RETURN(r.first, layer_number(YAML::Node(s.substr(0, dash)), where));
    TS_ASSIGN_OR_RETURN(r.second, layer_number(YAML::Node(s.substr(dash + 1)), where));
  } else {
    TS_ASSIGN_OR_RETURN(r.first, layer_number(v, where));
    r.second = r.first;
  }
  if (r.first > r.second) {
    return bad(where, "layers: " + std::to_string(r.first) + "-" + std::to_string(r.second) + " is an empty range");
  }
  return r;
}

Result<Rule> parse_rule(const YAML::Node& node, const std::string& source, size_t index) {
  Rule rule;
  rule.origin = at(source, node.Mark());
  if (!node.IsMap()) return bad(rule.origin, "rule " + std::to_string(index + 1) + " is not a map of " + kKeys);
  std::vector<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string where = at(source, it->first.Mark());
    const YAML::Node v = it->second;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) return bad(where, "key '" + key + "' appears twice in one rule");
    seen.push_back(key);
    if (key == "match") {
      TS_ASSIGN_OR_RETURN(rule.match, scalar(v, where, key));
      try {
        rule.regex.emplace(rule.match, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        return bad(where, "match: '" + rule.match + "' is not a valid regular expression (" + e.what() + ")");
      }
    } else if (key == "layers") {
      TS_ASSIGN_OR_RETURN(rule.layers, parse_layers(v, where));
    } else if (key == "kind") {
      std::vector<YAML::Node> items;
      if (v.IsSequence()) {
        for (auto k = v.begin(); k != v.end(); ++k) items.push_back(*k);
      } else {
        items.push_back(v);
      }
      if (items.empty()) return bad(where, "kind: an empty list matches nothing");
      for (const YAML::Node& k : items) {
        TS_ASSIGN_OR_RETURN(std::string name, scalar(k, where, key));
        std::optional<Kind> kind = parse_kind(name);
        if (!kind) return bad(where, "kind: unknown kind '" + name + "' (" + all_kinds() + ")");
        rule.kinds.push_back(*kind);
      }
    } else if (key == "device") {
      TS_ASSIGN_OR_RETURN(std::string name, scalar(v, where, key));
      if (name == "auto") {
        rule.device = Device::kAuto;
      } else if (name == "cpu") {
        rule.device = Device::kCpu;
      } else if (name == "cuda") {
        rule.device = Device::kCuda;
      } else {
        return bad(where, "device: unknown device '" + name + "' (auto, cpu, cuda)");
      }
      rule.device_origin = where;
    } else if (key == "type") {
      TS_ASSIGN_OR_RETURN(std::string name, scalar(v, where, key));
      if (name != "keep") {
        rule.type = parse_type(name);
        if (!rule.type) return bad(where, "type: unknown type '" + name + "' (" + all_types() + ")");
      }
      rule.type_origin = where;
    } else if (key == "allow_requantize") {
      bool b = false;
      if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b)) return bad(where, "allow_requantize must be true or false");
      rule.allow_requantize = b;
    } else if (key == "op") {
      TS_ASSIGN_OR_RETURN(std::string name, scalar(v, where, key));
      std::optional<Op> op = parse_op(name);
      if (!op) {
        return bad(where, "op: unknown operator '" + name +
                              "' (auto, matmul, matmul_scalar, matmul_avx2, matmul_avx512, embedding_lookup, cuda)");
      }
      rule.op = *op;
      rule.op_origin = where;
    } else if (key == "thread_share") {
      double share = 0;
      if (!v.IsScalar() || !YAML::convert<double>::decode(v, share) || !std::isfinite(share) || share <= 0.0 ||
          share > 1.0) {
        return bad(where, "thread_share: '" + (v.IsScalar() ? v.Scalar() : std::string("?")) +
                              "' is not a share of the threads in (0, 1] (e.g. 0.5)");
      }
      rule.thread_share = static_cast<float>(share);
      rule.share_origin = where;
    } else {
      return bad(where, "unknown key '" + key + "' (" + kKeys + ")");
    }
  }
  return rule;
}

}  // namespace

Result<RuleSet> parse_rules(std::string_view yaml, const std::string& source) {
  RuleSet set;
  set.source = source;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    if (root.IsNull()) return bad(source + ":1", "empty file; expected a map with a 'rules' list");
    if (!root.IsMap()) return bad(at(source, root.Mark()), "expected a map with a 'rules' list");
    YAML::Node list;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (key != "rules") return bad(at(source, it->first.Mark()), "unknown key '" + key + "' (the file holds 'rules')");
      list = it->second;
    }
    if (!list.IsDefined()) return bad(source + ":1", "no 'rules' list");
    if (list.IsNull()) return set;  // "rules:" with nothing: the built-in rules alone
    if (!list.IsSequence()) return bad(at(source, list.Mark()), "'rules' must be a list of rules");
    for (size_t i = 0; i < list.size(); ++i) {
      TS_ASSIGN_OR_RETURN(Rule rule, parse_rule(list[i], source, i));
      set.rules.push_back(std::move(rule));
    }
  } catch (const YAML::Exception& e) {
    return bad(at(source, e.mark), "YAML: " + e.msg);
  }
  return set;
}

Result<RuleSet> load_rules_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, path + ": cannot read the placement rules file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_rules(text.str(), path);
}

}  // namespace tessera::placement
