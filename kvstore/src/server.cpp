#include "tessera/kvstore/server.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "messages.h"
#include "tessera/common/log.h"
#include "tessera/common/metrics.h"

namespace tessera::kvstore {
namespace {

constexpr size_t kInlineDecodeLimit = 64 * 1024;

// A request as received: routing frames (identity, optional empty delimiter) and the body.
struct Incoming {
  std::vector<zmq::message_t> route;
  zmq::message_t body;
  std::string_view view() const { return {static_cast<const char*>(body.data()), body.size()}; }
};

struct Outgoing {
  std::vector<zmq::message_t> route;
  std::string body;
};

}  // namespace

struct Server::Impl {
  ServerConfig config;
  Store* store = nullptr;
  zmq::context_t ctx{1};
  std::unique_ptr<curve::Authenticator> auth;  // ZAP handler when secure; destroyed before ctx
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t replies{ctx, zmq::socket_type::pull};
  std::string endpoint;
  std::string inproc;
  std::atomic<bool> stopping{false};

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void(zmq::socket_t&)>> queue;  // GUARDED_BY(mu)
  bool pool_stop = false;                                  // GUARDED_BY(mu)
  std::vector<std::thread> workers;

  std::atomic<uint64_t> requests[wire::kNumOps] = {};
  std::atomic<uint64_t> bad_requests{0}, overloaded{0}, inline_answers{0};

  Outgoing handle(const wire::Request& req);
  std::string metrics() const;
  void worker_loop();
  void send(zmq::socket_t& sock, Outgoing out);
  bool try_inline(Incoming& in, Outgoing* out);
};

void Server::Impl::send(zmq::socket_t& sock, Outgoing out) {
  for (auto& frame : out.route) sock.send(frame, zmq::send_flags::sndmore);
  // Zero-copy: the message owns the body string and frees it when ZeroMQ is done with it.
  auto* body = new std::string(std::move(out.body));
  zmq::message_t msg(body->data(), body->size(), [](void*, void* hint) { delete static_cast<std::string*>(hint); }, body);
  sock.send(msg, zmq::send_flags::none);
}

// The store's metrics and the service's own, rendered by common's metrics registry.
std::string Server::Impl::metrics() const {
  metrics::Registry reg;
  store->export_metrics(reg);
  for (int i = 0; i < wire::kNumOps; ++i) {
    reg.counter("tessera_kvstore_requests_total", "Requests decoded, by type.",
                {{"type", wire::op_name(static_cast<wire::Op>(i))}})
        .inc(static_cast<double>(requests[i].load()));
  }
  reg.counter("tessera_kvstore_bad_requests_total",
              "Requests answered with an error before reaching the store (undecodable, wrong version, bad fields).")
      .inc(static_cast<double>(bad_requests.load()));
  reg.counter("tessera_kvstore_overloaded_total", "Requests refused because the worker queue was full.")
      .inc(static_cast<double>(overloaded.load()));
  if (auth) {
    reg.counter("tessera_kvstore_refused_peers_total",
                "Connections refused at the CURVE handshake (public key not in the allow-list).")
        .inc(static_cast<double>(auth->refused("kvstore")));
  }
  return reg.render();
}

std::string Server::metrics_text() const { return impl_->metrics(); }

Outgoing Server::Impl::handle(const wire::Request& req) {
  Outgoing out;
  Blob keep;  // holds a get's blob until the reply is encoded (r.blob_view points into it)
  wire::Reply r;
  r.id = req.id;
  r.type = std::string(wire::op_name(req.op)) + "_reply";
  auto fail = [&](const Error& e) {
    out.body = wire::encode_error(req.id, e.code, e.message);
    return std::move(out);
  };
  switch (req.op) {
    case wire::Op::kPut: {
      auto p = store->put(req.key, std::string(req.blob), req.ttl_s);
      if (!p.ok()) return fail(p.error());
      r.stored_l1 = p->l1;
      r.stored_l2 = p->l2;
      r.note = p->note;
      break;
    }
    case wire::Op::kGet: {
      auto g = store->get(req.key);
      if (!g.ok()) return fail(g.error());
      r.found = g->blob != nullptr;
      r.tier = tier_name(g->tier);
      if (r.found) {
        keep = g->blob;  // L1 may not hold it (L1 off, or evicted meanwhile)
        r.blob_view = *keep;
      }
      break;
    }
    case wire::Op::kGetMany: {
      // The hashes in order, each as get answers it (L1, then Redis: Store::get_many asks Redis
      // for the L1 misses pipelined, per shard); a failure of any one fails the request. The
      // reply stops before the blob bytes would pass one message (max_message_bytes less 64 KiB
      // of envelope): it then answers a prefix of the hashes, at least one, and the client asks
      // again for the rest.
      const size_t budget = config.max_message_bytes > (size_t{64} << 10) ? config.max_message_bytes - (size_t{64} << 10) : 0;
      std::vector<BlobKey> keys;
      keys.reserve(req.hashes.size());
      for (const std::string& h : req.hashes) keys.push_back(BlobKey{req.key.fingerprint, req.key.user, h});
      auto got = store->get_many(keys, budget);
      if (!got.ok()) return fail(got.error());
      for (const GetResult& g : *got) {  // *got holds the blobs the reply's views point into
        wire::ManyEntry e;
        e.found = g.blob != nullptr;
        e.tier = tier_name(g.tier);
        if (e.found) e.blob_view = *g.blob;
        r.results.push_back(std::move(e));
      }
      out.body = wire::encode_reply(r);
      return out;
    }
    case wire::Op::kExists: {
      auto e = store->exists(req.key);
      if (!e.ok()) return fail(e.error());
      r.found = *e != Tier::kNone;
      r.tier = tier_name(*e);
      break;
    }
    case wire::Op::kDelete: {
      auto d = store->remove(req.key);
      if (!d.ok()) return fail(d.error());
      r.removed = *d;
      break;
    }
    case wire::Op::kInvalidateUser:
    case wire::Op::kClear: {
      auto i = req.op == wire::Op::kClear ? store->clear() : store->invalidate_user(req.key.user);
      if (!i.ok()) return fail(i.error());
      r.removed_l1 = i->l1;
      r.removed_l2 = i->l2;
      break;
    }
    case wire::Op::kStats: {
      const L1Stats s = store->l1_stats();
      r.metrics = metrics();
      r.redis_configured = store->l2_configured();
      r.redis_up = store->l2_up();
      r.l1_entries = s.entries;
      r.l1_bytes = s.bytes;
      break;
    }
  }
  out.body = wire::encode_reply(r);
  return out;
}

// Answers on the ROUTER thread what needs no I/O. Returns false to hand the request to the pool.
bool Server::Impl::try_inline(Incoming& in, Outgoing* out) {
  if (in.body.size() > kInlineDecodeLimit) return false;
  auto req = wire::decode_request(in.view());
  if (!req.ok()) {
    bad_requests.fetch_add(1);
    out->body = wire::encode_error(wire::peek_id(in.view()), req.error().code, req.error().message);
    return true;
  }
  if (req->op == wire::Op::kStats) {
    requests[static_cast<int>(req->op)].fetch_add(1);
    out->body = handle(*req).body;
    return true;
  }
  if (req->op == wire::Op::kGet || req->op == wire::Op::kExists) {
    GetResult hit = store->get_l1(req->key);
    if (hit.blob == nullptr) return false;
    wire::Reply r;
    r.id = req->id;
    r.type = req->op == wire::Op::kGet ? "get_reply" : "exists_reply";
    r.found = true;
    r.tier = "l1";
    if (req->op == wire::Op::kGet) r.blob_view = *hit.blob;
    out->body = wire::encode_reply(r);
    requests[static_cast<int>(req->op)].fetch_add(1);
    inline_answers.fetch_add(1);
    return true;
  }
  // Other small requests are decoded again by the worker (cheap) to keep one code path.
  return false;
}

void Server::Impl::worker_loop() {
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  push.connect(inproc);
  while (true) {
    std::function<void(zmq::socket_t&)> task;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return pool_stop || !queue.empty(); });
      if (queue.empty()) return;  // pool_stop and drained
      task = std::move(queue.front());
      queue.pop_front();
    }
    task(push);
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  stop();
  {
    std::lock_guard lock(impl_->mu);
    impl_->pool_stop = true;
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->workers) {
    if (t.joinable()) t.join();
  }
}

Result<std::unique_ptr<Server>> Server::create(const ServerConfig& config, Store& store) {
  if (config.threads < 1 || config.threads > 256) {
    return make_error(ErrorCode::kOutOfRange, "threads must be in [1, 256] (got " + std::to_string(config.threads) + ")");
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->store = &store;
  TS_ASSIGN_OR_RETURN(curve::Keys keys, curve::Keys::load(config.curve, curve::Role::kKvstore));
  if (keys.secure()) {
    TS_ASSIGN_OR_RETURN(impl->auth, curve::Authenticator::start(impl->ctx));
    TS_TRY(curve::serve(impl->router, impl->auth.get(), keys,
                        {.domain = "kvstore", .admit = {curve::Role::kFrontend, curve::Role::kWorker}}));
  }
  try {
    impl->router.set(zmq::sockopt::linger, 0);
    impl->router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(config.max_message_bytes));
    impl->router.bind(config.listen);
    impl->endpoint = impl->router.get(zmq::sockopt::last_endpoint);
    impl->inproc = "inproc://kvstore-replies-" + std::to_string(reinterpret_cast<uintptr_t>(impl.get()));
    impl->replies.set(zmq::sockopt::linger, 0);
    impl->replies.bind(impl->inproc);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, "cannot listen on " + config.listen + ": " + e.what());
  }
  Impl* raw = impl.get();
  for (int i = 0; i < config.threads; ++i) impl->workers.emplace_back([raw] { raw->worker_loop(); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const std::string& Server::endpoint() const { return impl_->endpoint; }

void Server::stop() { impl_->stopping.store(true); }

Status Server::run() {
  Impl& s = *impl_;
  TS_LOG(kInfo) << "listening on " << s.endpoint;
  zmq::pollitem_t items[] = {{s.router.handle(), 0, ZMQ_POLLIN, 0}, {s.replies.handle(), 0, ZMQ_POLLIN, 0}};
  while (!s.stopping.load()) {
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return make_error(ErrorCode::kInternal, std::string("zmq poll: ") + e.what());
    }
    // Replies from workers first: they finish work already done.
    while (items[1].revents & ZMQ_POLLIN) {
      std::vector<zmq::message_t> frames;
      zmq::message_t m;
      do {
        if (!s.replies.recv(m, zmq::recv_flags::dontwait)) break;
        frames.push_back(std::move(m));
      } while (frames.back().more());
      if (frames.empty()) break;
      for (size_t i = 0; i < frames.size(); ++i) {
        s.router.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::dontwait);
      }
      if (!(s.replies.get(zmq::sockopt::events) & ZMQ_POLLIN)) break;
    }
    for (int budget = 0; budget < 256; ++budget) {
      std::vector<zmq::message_t> frames;
      zmq::message_t m;
      if (!s.router.recv(m, zmq::recv_flags::dontwait)) break;
      frames.push_back(std::move(m));
      while (frames.back().more()) {
        zmq::message_t part;
        (void)s.router.recv(part, zmq::recv_flags::none);
        frames.push_back(std::move(part));
      }
      Incoming in;
      // [identity, body] or [identity, "", body]; the body is the last frame.
      in.body = std::move(frames.back());
      frames.pop_back();
      in.route = std::move(frames);
      Outgoing out;
      const bool envelope_ok = in.route.size() == 1 || (in.route.size() == 2 && in.route[1].size() == 0);
      if (!envelope_ok) {
        s.bad_requests.fetch_add(1);
        out.body = wire::encode_error(0, ErrorCode::kMalformedMessage,
                                      "expected [body] or [\"\", body] after the identity; got " +
                                          std::to_string(in.route.size()) + " extra frames");
        while (in.route.size() > 1) in.route.pop_back();
        out.route = std::move(in.route);
        s.send(s.router, std::move(out));
        continue;
      }
      if (s.try_inline(in, &out)) {
        out.route = std::move(in.route);
        s.send(s.router, std::move(out));
        continue;
      }
      std::unique_lock lock(s.mu);
      if (s.queue.size() >= s.config.max_queue) {
        lock.unlock();
        s.overloaded.fetch_add(1);
        out.body = wire::encode_error(wire::peek_id(in.view()), ErrorCode::kOverloaded, "kvstore worker queue is full");
        out.route = std::move(in.route);
        s.send(s.router, std::move(out));
        continue;
      }
      auto shared = std::make_shared<Incoming>(std::move(in));
      Impl* impl = &s;
      s.queue.emplace_back([impl, shared](zmq::socket_t& push) {
        Outgoing o;
        auto req = wire::decode_request(shared->view());
        if (!req.ok()) {
          impl->bad_requests.fetch_add(1);
          o.body = wire::encode_error(wire::peek_id(shared->view()), req.error().code, req.error().message);
        } else {
          impl->requests[static_cast<int>(req->op)].fetch_add(1);
          o = impl->handle(*req);
        }
        o.route = std::move(shared->route);
        impl->send(push, std::move(o));
      });
      lock.unlock();
      s.cv.notify_one();
    }
  }
  TS_LOG(kInfo) << "stopping";
  return ok_status();
}

}  // namespace tessera::kvstore
