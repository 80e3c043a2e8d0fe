// Endpoint discovery (common/discovery.h): the source syntax and its errors, file: and dns:
// resolution, the watcher's membership versions and its "keep the last good list" rule, and the
// failover order workers use to pick a scheduler.
#include "tessera/common/discovery.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "tessera/testing/paths.h"
#include "tessera/testing/wait.h"

namespace tessera::discovery {
namespace {

using std::chrono::milliseconds;

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  ASSERT_EQ(::rename(tmp.c_str(), path.c_str()), 0);  // atomically, as an operator's tool would
}

TEST(Discovery, ParsesTheThreeKindsAndNamesWhatIsWrong) {
  auto ok = parse_source_list("tcp://10.0.0.1:8100, dns:sched.ns.svc.cluster.local:8100,file:/etc/tessera/s", "--schedulers");
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[0].kind, Source::Kind::kStatic);
  EXPECT_EQ((*ok)[1].kind, Source::Kind::kDns);
  EXPECT_EQ((*ok)[1].host, "sched.ns.svc.cluster.local");
  EXPECT_EQ((*ok)[1].port, 8100);
  EXPECT_EQ((*ok)[2].path, "/etc/tessera/s");
  EXPECT_TRUE(any_dynamic(*ok));
  EXPECT_FALSE(any_dynamic(*parse_source_list("tcp://a:1,ipc:///tmp/x", "--schedulers")));
  for (const char* bad : {"dns:host", "dns:host:0", "dns:host:70000", "dns::80", "dns:host:8x", "file:", "10.0.0.1:8100", ""}) {
    auto r = parse_sources({bad}, "--schedulers");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("--schedulers"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(tcp_endpoint("10.1.2.3", 8100), "tcp://10.1.2.3:8100");
  EXPECT_EQ(tcp_endpoint("fd00::5", 8100), "tcp://[fd00::5]:8100");
}

TEST(Discovery, DnsNamesResolveToEveryAddress) {
  auto r = resolve(*parse_sources({"dns:localhost:8100"}, "x")->begin());
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_NE(std::find(r->begin(), r->end(), "tcp://127.0.0.1:8100"), r->end()) << r->front();
  auto missing = resolve(*parse_sources({"dns:no-such-host.invalid:8100"}, "x")->begin());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(missing.error().message.find("no-such-host.invalid"), std::string::npos);
}

TEST(Discovery, WatcherFollowsAFileAndKeepsTheLastGoodListOnErrors) {
  const std::string dir = testing::make_temp_dir("tessera-discovery");
  const std::string path = dir + "/schedulers";
  write_file(path, "# schedulers\ntcp://127.0.0.1:7001\n\ntcp://127.0.0.1:7000  # the first\n");
  EndpointWatcher w(*parse_source_list("tcp://127.0.0.1:7000,file:" + path, "--schedulers"), milliseconds(3600000), "schedulers");
  EXPECT_TRUE(w.dynamic());
  EXPECT_EQ(w.version(), 1u);
  EXPECT_EQ(w.endpoints(), (std::vector<std::string>{"tcp://127.0.0.1:7000", "tcp://127.0.0.1:7001"})) << "merged, sorted, unique";
  w.refresh_now();
  EXPECT_EQ(w.version(), 1u) << "an unchanged list keeps its version";
  write_file(path, "tcp://127.0.0.1:7002\n");
  w.refresh_now();
  EXPECT_EQ(w.version(), 2u);
  EXPECT_EQ(w.endpoints(), (std::vector<std::string>{"tcp://127.0.0.1:7000", "tcp://127.0.0.1:7002"}));
  write_file(path, "not an endpoint\n");  // a bad line: the file's last good list stays
  w.refresh_now();
  EXPECT_EQ(w.version(), 2u);
  ASSERT_EQ(::unlink(path.c_str()), 0);  // unreadable: the same
  w.refresh_now();
  EXPECT_EQ(w.endpoints(), (std::vector<std::string>{"tcp://127.0.0.1:7000", "tcp://127.0.0.1:7002"}));
  write_file(path, "\n");  // an empty (readable) file is a real answer: nothing from it
  w.refresh_now();
  EXPECT_EQ(w.endpoints(), (std::vector<std::string>{"tcp://127.0.0.1:7000"}));
  EXPECT_EQ(w.version(), 3u);
}

TEST(Discovery, WatcherThreadPicksUpAChangeWithinItsPeriod) {
  const std::string path = testing::make_temp_dir("tessera-discovery") + "/s";
  write_file(path, "tcp://127.0.0.1:7000\n");
  EndpointWatcher w(*parse_source_list("file:" + path, "--schedulers"), milliseconds(50), "schedulers");
  write_file(path, "tcp://127.0.0.1:7000\ntcp://127.0.0.1:7001\n");
  ASSERT_TRUE(testing::wait_until([&] { return w.version() >= 2; }, milliseconds(5000)));
  EXPECT_EQ(w.endpoints().size(), 2u);
}

TEST(FailoverOrder, SpreadsClientsAndPassesOverFailedEndpoints) {
  const std::vector<std::string> eps = {"tcp://10.0.0.1:8101", "tcp://10.0.0.2:8101", "tcp://10.0.0.3:8101"};
  std::map<std::string, int> first;
  const auto t0 = std::chrono::steady_clock::now();
  for (int w = 0; w < 300; ++w) {
    FailoverOrder o("worker" + std::to_string(w), milliseconds(1000));
    o.set_endpoints(eps);
    ASSERT_EQ(o.order().size(), 3u);
    ++first[o.choose(t0)];
  }
  for (const auto& e : eps) {
    EXPECT_GT(first[e], 60) << e << ": 300 workers over 3 schedulers";
  }
  FailoverOrder o("worker7", milliseconds(1000));
  o.set_endpoints(eps);
  const std::vector<std::string> order = o.order();
  o.failed(order[0], t0);
  EXPECT_EQ(o.choose(t0), order[1]);
  o.failed(order[1], t0 + milliseconds(10));
  EXPECT_EQ(o.choose(t0 + milliseconds(20)), order[2]);
  o.failed(order[2], t0 + milliseconds(20));
  EXPECT_EQ(o.choose(t0 + milliseconds(30)), order[0]) << "all failed: the one that failed longest ago";
  EXPECT_EQ(o.choose(t0 + milliseconds(1000)), order[0]) << "its cooldown is over";
  o.set_endpoints({});
  EXPECT_EQ(o.choose(t0), "");
}

TEST(FailoverOrder, ListedOrderMakesTheFirstThePrimary) {
  const std::string path = testing::make_temp_dir("tessera-discovery") + "/s";
  write_file(path, "tcp://10.0.0.9:8101\ntcp://10.0.0.1:8101\n");
  EndpointWatcher w(*parse_source_list("tcp://10.0.0.5:8101,file:" + path, "--scheduler"), milliseconds(3600000), "schedulers");
  EXPECT_EQ(w.endpoints_in_order(),
            (std::vector<std::string>{"tcp://10.0.0.5:8101", "tcp://10.0.0.9:8101", "tcp://10.0.0.1:8101"}));
  const auto t0 = std::chrono::steady_clock::now();
  FailoverOrder o("any-name", milliseconds(1000), /*listed=*/true);
  o.set_endpoints(w.endpoints_in_order());
  EXPECT_EQ(o.choose(t0), "tcp://10.0.0.5:8101");
  o.failed("tcp://10.0.0.5:8101", t0);
  EXPECT_EQ(o.choose(t0), "tcp://10.0.0.9:8101") << "the next one listed";
}

}  // namespace
}  // namespace tessera::discovery
