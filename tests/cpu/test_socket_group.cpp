// The socket group (core/socket_group.h), its ranks as threads each holding its own socket: the
// collectives against hand-computed results and, on random data, against the in-process fake
// group bit for bit (both sum in rank order); a rank that leaves, ranks that disagree, ranks that
// never come and a path too long all end in an error that names them, never a hang.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "core/socket_group.h"

namespace sl {
namespace {

std::string socket_path(const char* name) {
  return std::string("/tmp/sl-sg-") + std::to_string(::getpid()) + "-" + name + ".sock";
}

// Runs body(rank, comm) on one thread per rank of a socket group at `path`; an error of a rank
// (joining or in its body) is stored by rank and aborts its communicator.
std::vector<std::string> on_socket_ranks(int world, const std::string& path,
                                         const std::function<void(int, Communicator&)>& body, double timeout_s = 20) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> c;
      try {
        c = join_socket_group(path, r, world, timeout_s);
        body(r, *c);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        if (c) c->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(SocketGroup, CollectivesMatchTheirDefinitions) {
  const int W = 3;
  const size_t n = 2;
  std::vector<std::vector<float>> gathered(W), scattered(W), exchanged(W), reduced(W);
  std::vector<std::string> said(W);
  const auto errors = on_socket_ranks(W, socket_path("defs"), [&](int r, Communicator& c) {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.world(), W);
    std::vector<float> in(W * n);  // rank r's chunk j holds 100 r + 10 j + i
    for (int j = 0; j < W; ++j)
      for (size_t i = 0; i < n; ++i) in[size_t(j) * n + i] = float(100 * r + 10 * j + int(i));
    gathered[size_t(r)].resize(W * n);
    c.all_gather(in.data(), gathered[size_t(r)].data(), n);
    scattered[size_t(r)].resize(n);
    c.reduce_scatter_sum(in.data(), scattered[size_t(r)].data(), n);
    exchanged[size_t(r)].resize(W * n);
    c.all_to_all(in.data(), exchanged[size_t(r)].data(), n);
    reduced[size_t(r)] = {float(r), float(r * r)};
    c.all_reduce_sum(reduced[size_t(r)].data(), n);
    char word[8] = {};
    if (r == 0) std::snprintf(word, sizeof word, "rank 0");
    c.broadcast(word, sizeof word);
    said[size_t(r)] = word;
  });
  for (int r = 0; r < W; ++r) {
    ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
    EXPECT_EQ(gathered[size_t(r)], (std::vector<float>{0, 1, 100, 101, 200, 201}));
    EXPECT_EQ(scattered[size_t(r)], (std::vector<float>{float(300 + 30 * r), float(303 + 30 * r)}));
    for (int s = 0; s < W; ++s)
      for (size_t i = 0; i < n; ++i)
        EXPECT_EQ(exchanged[size_t(r)][size_t(s) * n + i], float(100 * s + 10 * r + int(i))) << r << " " << s;
    EXPECT_EQ(reduced[size_t(r)], (std::vector<float>{0 + 1 + 2, 0 + 1 + 4}));
    EXPECT_EQ(said[size_t(r)], "rank 0");
  }
}

// Processes must give the bits threads give: fp32 sums of random values of mixed magnitudes (where
// the order of a sum shows) equal the fake group's.
TEST(SocketGroup, SumsEqualTheFakeGroupBitForBit) {
  const int W = 4;
  const size_t n = 1000;
  std::vector<std::vector<float>> inputs(W, std::vector<float>(W * n));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : inputs)
    for (float& x : v) x = u(rng) * std::ldexp(1.f, int(rng() % 40) - 20);
  auto run = [&](Communicator& c, int r, std::vector<float>& reduced, std::vector<float>& scattered) {
    reduced.assign(inputs[size_t(r)].begin(), inputs[size_t(r)].begin() + long(n));
    c.all_reduce_sum(reduced.data(), n);
    scattered.resize(n);
    c.reduce_scatter_sum(inputs[size_t(r)].data(), scattered.data(), n);
  };
  std::vector<std::vector<float>> fr(W), fs(W), sr(W), ss(W);
  auto fake = make_fake_group(W);
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r) threads.emplace_back([&, r] { run(*fake[size_t(r)], r, fr[size_t(r)], fs[size_t(r)]); });
  for (auto& t : threads) t.join();
  const auto errors = on_socket_ranks(W, socket_path("bits"), [&](int r, Communicator& c) {
    run(c, r, sr[size_t(r)], ss[size_t(r)]);
  });
  for (int r = 0; r < W; ++r) {
    ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
    EXPECT_EQ(sr[size_t(r)], fr[size_t(r)]) << "all_reduce_sum, rank " << r;
    EXPECT_EQ(ss[size_t(r)], fs[size_t(r)]) << "reduce_scatter_sum, rank " << r;
  }
}

// A rank that leaves (its process ended: here its socket closes) fails the others' collective,
// naming it, and the group stays down for later calls.
TEST(SocketGroup, ARankThatLeavesFailsTheOthers) {
  const auto errors = on_socket_ranks(3, socket_path("leave"), [&](int r, Communicator& c) {
    if (r == 2) return;  // leaves: its communicator is destroyed, closing its socket
    float x = 1.f;
    try {
      c.all_reduce_sum(&x, 1);
    } catch (const Error&) {
      float y = 0.f;
      EXPECT_THROW(c.all_reduce_sum(&y, 1), Error) << "rank " << r << ": the group should stay aborted";
      throw;
    }
  });
  EXPECT_NE(errors[0].find("all_reduce_sum: the connection closed (rank 2"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 1: all_reduce_sum"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[2], "");
}

TEST(SocketGroup, RanksThatDisagreeAreRefused) {
  const auto errors = on_socket_ranks(2, socket_path("disagree"), [&](int r, Communicator& c) {
    std::vector<float> x(size_t(r + 1), 1.f);
    c.all_reduce_sum(x.data(), x.size());
  });
  EXPECT_NE(errors[0].find("rank 1 called all_reduce_sum of 2 while rank 0 called all_reduce_sum of 1"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1], "");
}

// The watchdog's question (peer_gone): a collective's data in flight is not a sign, an abort
// frame is (with its reason), and so is a closed connection; nothing is consumed by asking.
TEST(SocketGroup, PeerGoneSeesAbortsAndEndsNotTraffic) {
  std::string why0, why1, why2;
  bool quiet0 = true, quiet1 = true, traffic = true;
  float got = 0;
  const auto errors = on_socket_ranks(3, socket_path("gone"), [&](int r, Communicator& c) {
    if (r == 0) {
      quiet0 = !c.peer_gone(50, &why0);
      // Rank 1's collective arrives before rank 0 joins it: data, not a sign.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      traffic = !c.peer_gone(50, &why0);
      float x = 1.f;
      c.all_reduce_sum(&x, 1);  // its data was only peeked at: the collective still works
      got = x;
      // Rank 2 aborts with a reason: seen with it.
      EXPECT_TRUE(c.peer_gone(5000, &why2));
    } else if (r == 1) {
      quiet1 = !c.peer_gone(50, &why1);
      float x = 2.f;
      c.all_reduce_sum(&x, 1);
      // Then rank 0 ends (its communicator closes when its body returns): seen as a closed connection.
      EXPECT_TRUE(c.peer_gone(5000, &why1));
    } else {
      float x = 3.f;
      c.all_reduce_sum(&x, 1);
      c.abort("rank 2's model failed");
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  EXPECT_TRUE(quiet0 && quiet1) << "an idle group is not gone";
  EXPECT_TRUE(traffic) << "a collective's data was taken for a sign: " << why0;
  EXPECT_EQ(got, 6.f);
  EXPECT_EQ(why2, "rank 2 ended the group: rank 2's model failed");
  EXPECT_EQ(why1, "rank 0 closed its connection (its process ended)");
}

// Rank 0 of a group of 4 that only rank 1 joins gives up at its deadline, naming ranks 2 and 3.
TEST(SocketGroup, RanksThatNeverComeAreNamed) {
  std::string err;
  std::thread one([&] {
    try {
      join_socket_group(socket_path("absent"), 1, 4, 5.0);
    } catch (const std::exception& e) {
      err = e.what();
    }
  });
  try {
    join_socket_group(socket_path("absent"), 0, 4, 0.5);
    ADD_FAILURE() << "a group of 4 formed with 2 ranks";
  } catch (const Error& e) {
    // "ranks 2, 3", or "ranks 1, 2, 3" when a loaded machine kept rank 1 from connecting in time.
    EXPECT_NE(std::string(e.what()).find("2, 3 did not join within 0.5 s"), std::string::npos) << e.what();
  }
  one.join();
}

TEST(SocketGroup, BadArgumentsAreRefused) {
  EXPECT_THROW(join_socket_group("/tmp/" + std::string(200, 'x'), 0, 2, 1.0), Error);
  EXPECT_THROW(join_socket_group(socket_path("bad"), 2, 2, 1.0), Error);
  EXPECT_THROW(join_socket_group(socket_path("bad"), 0, 0, 1.0), Error);
  // A peer with no rank 0 to find gives up at its deadline.
  try {
    join_socket_group(socket_path("nobody"), 1, 2, 0.3);
    ADD_FAILURE() << "joined a group with no rank 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found no rank 0"), std::string::npos) << e.what();
  }
  // A world of one needs no socket.
  auto solo = join_socket_group("", 0, 1, 1.0);
  float x = 3.f;
  solo->all_reduce_sum(&x, 1);
  EXPECT_EQ(x, 3.f);
}

}  // namespace
}  // namespace sl
