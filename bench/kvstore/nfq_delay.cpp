// nfq_delay: holds every packet netfilter queues to it for a fixed time, then accepts it — a
// one-way network delay for benchmarks on kernels without sch_netem (`tc qdisc ... netem` answers
// "Specified qdisc kind is unknown"). It delays real IP packets in the kernel's path (ACKs
// included), as netem on an interface would; it is not a proxy (no connection is terminated, no
// byte is copied: only the packet's id and metadata come to user space).
//
//   iptables -A OUTPUT -d 10.88.0.0/24 -j NFQUEUE --queue-num 7
//   nfq_delay 7 500            # queue 7, 500 µs: run it in the namespace whose output is queued
//
// Differences from netem: packets leave in arrival order after exactly `delay` (no jitter, no
// reordering, no rate limit); the delay is applied in user space, so each packet costs a few µs
// of this process's CPU and wake-ups are as precise as ppoll (tens of µs on an idle core).
// Build (needs libnetfilter-queue-dev): bench/kvstore/CMakeLists.txt builds it when the library is
// found; by hand: g++ -O2 -std=c++20 nfq_delay.cpp -lnetfilter_queue -o nfq_delay.
// Single-threaded; stops on SIGINT/SIGTERM (the packets it still holds are accepted first).
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

namespace {

using Clock = std::chrono::steady_clock;

struct Held {
  uint32_t id;
  Clock::time_point due;
};

struct State {
  std::deque<Held> held;  // arrival order = due order (constant delay)
  std::chrono::microseconds delay{0};
  uint64_t packets = 0;
};

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* nfa, void* data) {
  auto* st = static_cast<State*>(data);
  const nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == nullptr) return 0;
  st->held.push_back({ntohl(ph->packet_id), Clock::now() + st->delay});
  ++st->packets;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: nfq_delay QUEUE_NUM DELAY_US\n");
    return 2;
  }
  const int queue = std::atoi(argv[1]);
  State st;
  st.delay = std::chrono::microseconds(std::atol(argv[2]));
  nfq_handle* h = nfq_open();
  if (h == nullptr) {
    std::perror("nfq_open");
    return 1;
  }
  nfq_q_handle* qh = nfq_create_queue(h, static_cast<uint16_t>(queue), &on_packet, &st);
  if (qh == nullptr) {
    std::perror("nfq_create_queue");
    return 1;
  }
  // Metadata only; large GSO packets whole (fewer round trips to user space); a deep queue.
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(qh, 1 << 16) < 0) {
    std::perror("nfq_set_mode/maxlen");
    return 1;
  }
  (void)nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  const int fd = nfq_fd(h);
  const int rcvbuf = 16 << 20;
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::printf("nfq_delay: queue %d, %ld us\n", queue, static_cast<long>(st.delay.count()));
  std::fflush(stdout);
  alignas(8) char buf[65536];
  while (!g_stop) {
    timespec ts{1, 0};
    if (!st.held.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(st.held.front().due - Clock::now()).count();
      ts = {static_cast<time_t>(left > 0 ? left / 1000000000 : 0), static_cast<long>(left > 0 ? left % 1000000000 : 0)};
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ppoll(&p, 1, &ts, nullptr);
    if (ready > 0) {
      for (;;) {  // drain what is there
        const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0) {
          if (errno == ENOBUFS) std::fprintf(stderr, "nfq_delay: queue overrun (packets dropped)\n");
          break;
        }
        nfq_handle_packet(h, buf, static_cast<int>(n));
      }
    }
    const auto now = Clock::now();
    while (!st.held.empty() && st.held.front().due <= now) {
      nfq_set_verdict(qh, st.held.front().id, NF_ACCEPT, 0, nullptr);
      st.held.pop_front();
    }
  }
  for (const Held& p : st.held) nfq_set_verdict(qh, p.id, NF_ACCEPT, 0, nullptr);
  std::printf("nfq_delay: %llu packets\n", static_cast<unsigned long long>(st.packets));
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
