#include "core/socket_group.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace sl {

namespace {

constexpr uint32_t kMagic = 0x534c4731;  // "SLG1": a streamlab socket group frame

// What a rank sends before each collective's payload, so that rank 0 can refuse ranks that call
// different collectives or sizes instead of reading garbage.
enum class Op : uint32_t { Hello = 1, AllReduceSum, AllGather, ReduceScatterSum, AllToAll, Broadcast, Abort };

const char* op_name(Op op) {
  switch (op) {
    case Op::Hello: return "join";
    case Op::AllReduceSum: return "all_reduce_sum";
    case Op::AllGather: return "all_gather";
    case Op::ReduceScatterSum: return "reduce_scatter_sum";
    case Op::AllToAll: return "all_to_all";
    case Op::Broadcast: return "broadcast";
    case Op::Abort: return "abort";
  }
  return "?";
}

struct Header {
  uint32_t magic = kMagic;
  uint32_t op = 0;
  uint64_t size = 0;  // n (values) of the collective, or bytes of a broadcast; the world for Hello
  int32_t rank = 0;
  int32_t pad = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

sockaddr_un address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  SL_CHECK(!path.empty() && path.size() < sizeof(a.sun_path), "socket group: the socket path '", path, "' is ",
           path.size(), " bytes; a Unix-domain socket path holds 1 to ", sizeof(a.sun_path) - 1,
           " (choose a shorter TMPDIR)");
  std::memcpy(a.sun_path, path.c_str(), path.size());
  return a;
}

class SocketCommunicator final : public Communicator {
 public:
  SocketCommunicator(int rank, int world, std::vector<int> fds) : rank_(rank), world_(world), fds_(std::move(fds)) {}
  ~SocketCommunicator() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(abort_mu_);  // a watchdog thread may abort while the owner works
    if (!aborted_.empty()) return;
    aborted_ = why.empty() ? "(no reason given)" : why;
    // Tell the peers why (best effort: a peer may be gone), then shut the sockets down, which
    // wakes every peer blocked on us with an end of stream.
    for (int fd : fds_) {
      if (fd < 0) continue;
      Header h;
      h.op = uint32_t(Op::Abort);
      h.size = aborted_.size();
      h.rank = rank_;
      std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
      frame += aborted_;
      (void)::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(fd, SHUT_RDWR);
    }
  }

  // Readable data outside a collective is an abort frame or an end of stream: a peer that ended
  // or aborted. Only peeked at, so that a collective running meanwhile still reads its data.
  bool peer_gone(int timeout_ms, std::string* why) override {
    std::vector<pollfd> ps;
    std::vector<int> peers;
    for (size_t i = 0; i < fds_.size(); ++i)
      if (fds_[i] >= 0) {
        ps.push_back({fds_[i], short(POLLIN | POLLRDHUP), 0});
        peers.push_back(rank_ == 0 ? int(i) : 0);
      }
    if (ps.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return false;
    }
    if (::poll(ps.data(), ps.size(), timeout_ms) <= 0) return false;
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!ps[i].revents) continue;
      Header h;
      const ssize_t k = ::recv(ps[i].fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
      const bool closed = k == 0 || (ps[i].revents & (POLLHUP | POLLERR | POLLRDHUP)) ||
                          (k < 0 && errno != EAGAIN && errno != EINTR);
      const bool aborting = k == ssize_t(sizeof h) && h.magic == kMagic && h.op == uint32_t(Op::Abort);
      if (!closed && !aborting) continue;  // a collective's data
      if (why) {
        std::string reason;
        if (aborting) {
          // The frame in full (the peer wrote it before shutting down): header, then its reason.
          std::string frame(sizeof h + size_t(std::min<uint64_t>(h.size, 1 << 16)), '\0');
          const ssize_t got = ::recv(ps[i].fd, frame.data(), frame.size(), MSG_PEEK | MSG_DONTWAIT);
          reason = got > ssize_t(sizeof h) ? frame.substr(sizeof h, size_t(got) - sizeof h) : "(no reason given)";
        }
        *why = "rank " + std::to_string(peers[i]) +
               (aborting ? " ended the group: " + reason : std::string(" closed its connection (its process ended)"));
      }
      return true;
    }
    return false;
  }

  void all_reduce_sum(float* buf, size_t n) override {
    collective(Op::AllReduceSum, n, buf, n * 4, buf, n * 4, [&](const std::vector<std::vector<float>>& in, int r) {
      (void)r;
      std::vector<float> sum(n, 0.f);  // in rank order, as the fake group sums
      for (int s = 0; s < world_; ++s)
        for (size_t i = 0; i < n; ++i) sum[i] += in[size_t(s)][i];
      return sum;
    });
  }
  void all_gather(const float* in, float* out, size_t n) override {
    collective(Op::AllGather, n, in, n * 4, out, world_ * n * 4, [&](const std::vector<std::vector<float>>& all, int) {
      std::vector<float> o;
      for (int s = 0; s < world_; ++s) o.insert(o.end(), all[size_t(s)].begin(), all[size_t(s)].end());
      return o;
    });
  }
  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    collective(Op::ReduceScatterSum, n, in, world_ * n * 4, out, n * 4,
               [&](const std::vector<std::vector<float>>& all, int r) {
                 std::vector<float> o(n, 0.f);
                 for (int s = 0; s < world_; ++s)
                   for (size_t i = 0; i < n; ++i) o[i] += all[size_t(s)][size_t(r) * n + i];
                 return o;
               });
  }
  void all_to_all(const float* in, float* out, size_t n) override {
    collective(Op::AllToAll, n, in, world_ * n * 4, out, world_ * n * 4,
               [&](const std::vector<std::vector<float>>& all, int r) {
                 std::vector<float> o;
                 for (int s = 0; s < world_; ++s)
                   o.insert(o.end(), all[size_t(s)].begin() + long(size_t(r) * n),
                            all[size_t(s)].begin() + long(size_t(r + 1) * n));
                 return o;
               });
  }
  void broadcast(void* data, size_t bytes) override {
    check_open(Op::Broadcast);
    if (rank_ != 0) {
      send_header(0, Op::Broadcast, bytes);
      expect_header(0, Op::Broadcast, bytes);
      recv_bytes(0, data, bytes, Op::Broadcast);
      return;
    }
    for (int r = 1; r < world_; ++r) expect_header(r, Op::Broadcast, bytes);
    for (int r = 1; r < world_; ++r) {
      send_header(r, Op::Broadcast, bytes);
      send_bytes(r, data, bytes, Op::Broadcast);
    }
  }

 private:
  // One collective through rank 0: every other rank sends its header and `in_bytes` of input and
  // receives `out_bytes`; rank 0 gathers every input (its own first), and `result(inputs, r)` gives
  // rank r's output.
  template <class Result>
  void collective(Op op, size_t n, const void* in, size_t in_bytes, void* out, size_t out_bytes, Result result) {
    check_open(op);
    if (rank_ != 0) {
      send_header(0, op, n);
      send_bytes(0, in, in_bytes, op);
      expect_header(0, op, n);
      recv_bytes(0, out, out_bytes, op);
      return;
    }
    std::vector<std::vector<float>> inputs(size_t(world_), std::vector<float>(in_bytes / 4));
    std::memcpy(inputs[0].data(), in, in_bytes);
    for (int r = 1; r < world_; ++r) {
      expect_header(r, op, n);
      recv_bytes(r, inputs[size_t(r)].data(), in_bytes, op);
    }
    for (int r = 1; r < world_; ++r) {
      const std::vector<float> o = result(inputs, r);
      send_header(r, op, n);
      send_bytes(r, o.data(), out_bytes, op);
    }
    const std::vector<float> mine = result(inputs, 0);
    std::memcpy(out, mine.data(), out_bytes);
  }

  void check_open(Op op) {
    std::lock_guard<std::mutex> lock(abort_mu_);
    SL_CHECK(aborted_.empty(), "socket group, rank ", rank_, ": ", op_name(op), " after the group was aborted: ",
             aborted_);
  }
  // Reads exactly `bytes`, false on an error or an end of stream (no abort: for reading a peer's
  // abort reason, whose loss must not replace the reason).
  bool recv_quietly(int fd, void* data, size_t bytes) {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t k = ::recv(fd, p, bytes, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      p += k;
      bytes -= size_t(k);
    }
    return true;
  }
  // After a failed send: the peer may have aborted the group (shutting its socket down after an
  // abort frame, which is why the send failed); its reason, if it did, else "".
  std::string pending_abort(int fd) {
    Header h;
    if (::recv(fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) != ssize_t(sizeof h) || h.magic != kMagic ||
        h.op != uint32_t(Op::Abort))
      return "";
    recv_quietly(fd, &h, sizeof h);
    std::string why(size_t(std::min<uint64_t>(h.size, 1 << 16)), '\0');
    return recv_quietly(fd, why.data(), why.size()) ? why : std::string("(its reason was cut off)");
  }
  // A failed exchange ends the group for every rank, then throws.
  [[noreturn]] void broken(int peer, Op op, const std::string& what) {
    const std::string why = "socket group, rank " + std::to_string(rank_) + ": " + op_name(op) + ": " + what +
                            (peer == 0 && rank_ != 0 ? " (rank 0" : " (rank " + std::to_string(peer)) +
                            "'s process failed, exited or was killed?)";
    abort(why);
    throw Error(why);
  }
  int fd_of(int peer) const { return fds_[size_t(rank_ == 0 ? peer : 0)]; }

  void send_bytes(int peer, const void* data, size_t bytes, Op op) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t k = ::send(fd_of(peer), p, bytes, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        const std::string err = std::strerror(errno);
        if (const std::string why = pending_abort(fd_of(peer)); !why.empty()) ended_by(peer, op, why);
        broken(peer, op, "sending failed: " + err);
      }
      p += k;
      bytes -= size_t(k);
    }
  }
  void recv_bytes(int peer, void* data, size_t bytes, Op op) {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t k = ::recv(fd_of(peer), p, bytes, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k == 0) broken(peer, op, "the connection closed");
      if (k < 0) broken(peer, op, std::string("receiving failed: ") + std::strerror(errno));
      p += k;
      bytes -= size_t(k);
    }
  }
  void send_header(int peer, Op op, uint64_t size) {
    Header h;
    h.op = uint32_t(op);
    h.size = size;
    h.rank = rank_;
    send_bytes(peer, &h, sizeof h, op);
  }
  // Every message starts with a header: the collective the sender is in, or its abort and why.
  void expect_header(int peer, Op op, uint64_t size) {
    Header h;
    recv_bytes(peer, &h, sizeof h, op);
    if (h.magic != kMagic) broken(peer, op, "a frame that is not a streamlab socket group's");
    if (h.op == uint32_t(Op::Abort)) {
      std::string why(size_t(std::min<uint64_t>(h.size, 1 << 16)), '\0');
      if (!recv_quietly(fd_of(peer), why.data(), why.size())) why = "(its reason was cut off)";
      ended_by(peer, op, why);
    }
    if (h.op != uint32_t(op) || h.size != size)
      broken(peer, op, "rank " + std::to_string(h.rank) + " called " + op_name(Op(h.op)) + " of " +
                           std::to_string(h.size) + " while rank " + std::to_string(rank_) + " called " + op_name(op) +
                           " of " + std::to_string(size) + ": the ranks' calls disagree");
  }

  // A peer aborted the group with `why`: passed on to the others, then thrown.
  [[noreturn]] void ended_by(int peer, Op op, const std::string& why) {
    const std::string msg = "socket group, rank " + std::to_string(rank_) + ": " + op_name(op) + ": rank " +
                            std::to_string(peer) + " ended the group: " + why;
    abort(msg);
    throw Error(msg);
  }

  int rank_, world_;
  std::vector<int> fds_;  // rank 0: one per rank (its own slot -1); others: [0] = rank 0
  std::mutex abort_mu_;
  std::string aborted_;
};

// Waits until `fd` is readable or `deadline` passes; false on timeout.
bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    // At the deadline, one last look without waiting: what has already arrived still counts.
    const int k = ::poll(&p, 1, int(std::clamp<long long>(left.count(), 0, 1000)));
    if (k == 0 && left.count() <= 0) return false;
    if (k > 0) return true;
    if (k < 0 && errno != EINTR) fail("socket group: poll failed: ", std::strerror(errno));
  }
}

struct Fd {  // closes what it still holds
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.release()) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    const int f = fd;
    fd = -1;
    return f;
  }
};

std::unique_ptr<Communicator> host_group(const std::string& path, int world, double timeout_s,
                                         const std::function<void()>& while_waiting) {
  const sockaddr_un addr = address_of(path);
  Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  SL_CHECK(listener.fd >= 0, "socket group: socket(): ", std::strerror(errno));
  ::unlink(path.c_str());  // a stale socket of an earlier run
  SL_CHECK(::bind(listener.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0, "socket group: cannot bind ",
           path, ": ", std::strerror(errno));
  struct Unlink {  // the socket's name goes on every way out: once all joined, nobody needs it
    const std::string& path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_at_end{path};
  SL_CHECK(::listen(listener.fd, world) == 0, "socket group: listen on ", path, ": ", std::strerror(errno));
  std::vector<int> fds(size_t(world), -1);
  std::vector<Fd> held;
  held.reserve(size_t(world));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  for (int joined = 1; joined < world; ++joined) {
    // In slices of a second, so that `while_waiting` can give up early.
    bool ready = false;
    while (!ready && std::chrono::steady_clock::now() < deadline) {
      ready = wait_readable(listener.fd, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1)));
      if (!ready && while_waiting) {
        while_waiting();
      }
    }
    if (!ready) {
      std::string missing;
      for (int r = 1; r < world; ++r)
        if (fds[size_t(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      fail("socket group at ", path, ": ranks ", missing, " did not join within ", timeout_s, " s");
    }
    held.emplace_back(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
    const int fd = held.back().fd;
    SL_CHECK(fd >= 0, "socket group: accept: ", std::strerror(errno));
    Header h;
    size_t got = 0;
    while (got < sizeof h) {  // the hello: a few bytes, sent right after connecting
      SL_CHECK(wait_readable(fd, deadline), "socket group at ", path, ": a rank connected but did not say which");
      const ssize_t k = ::recv(fd, reinterpret_cast<char*>(&h) + got, sizeof h - got, 0);
      SL_CHECK(k > 0, "socket group at ", path, ": a rank connected and left before saying which");
      got += size_t(k);
    }
    SL_CHECK(h.magic == kMagic && h.op == uint32_t(Op::Hello), "socket group at ", path,
             ": something that is not a streamlab rank connected");
    SL_CHECK(int64_t(h.size) == world, "socket group at ", path, ": rank ", h.rank, " joined a group of ", h.size,
             " ranks, this one has ", world);
    SL_CHECK(h.rank >= 1 && h.rank < world, "socket group at ", path, ": rank ", h.rank, " is outside 1..", world - 1);
    SL_CHECK(fds[size_t(h.rank)] < 0, "socket group at ", path, ": rank ", h.rank, " joined twice");
    fds[size_t(h.rank)] = fd;
  }
  for (auto& f : held) f.release();
  return std::make_unique<SocketCommunicator>(0, world, std::move(fds));
}

std::unique_ptr<Communicator> join_as_peer(const std::string& path, int rank, int world, double timeout_s) {
  const sockaddr_un addr = address_of(path);
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    SL_CHECK(fd.fd >= 0, "socket group: socket(): ", std::strerror(errno));
    if (::connect(fd.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      Header h;
      h.op = uint32_t(Op::Hello);
      h.size = uint64_t(world);
      h.rank = rank;
      SL_CHECK(::send(fd.fd, &h, sizeof h, MSG_NOSIGNAL) == ssize_t(sizeof h), "socket group: rank ", rank,
               " could not introduce itself at ", path, ": ", std::strerror(errno));
      return std::make_unique<SocketCommunicator>(rank, world, std::vector<int>{fd.release()});
    }
    // Rank 0 may not listen yet: retry until the deadline.
    SL_CHECK(errno == ENOENT || errno == ECONNREFUSED || errno == EAGAIN, "socket group: rank ", rank,
             " cannot connect to ", path, ": ", std::strerror(errno));
    SL_CHECK(seconds_since(t0) < timeout_s, "socket group: rank ", rank, " found no rank 0 at ", path, " within ",
             timeout_s, " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

std::unique_ptr<Communicator> join_socket_group(const std::string& socket_path, int rank, int world, double timeout_s,
                                                const std::function<void()>& while_waiting) {
  SL_CHECK(world >= 1 && world <= 1024, "socket group: world ", world, " is outside 1..1024");
  SL_CHECK(rank >= 0 && rank < world, "socket group: rank ", rank, " is outside 0..", world - 1);
  SL_CHECK(timeout_s > 0, "socket group: the join timeout must be positive");
  if (world == 1) return std::make_unique<SocketCommunicator>(0, 1, std::vector<int>{-1});
  return rank == 0 ? host_group(socket_path, world, timeout_s, while_waiting) : join_as_peer(socket_path, rank, world, timeout_s);
}

}  // namespace sl
