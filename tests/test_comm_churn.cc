// Slow suite: random joins and kills for a bounded number of rounds. After every update, all live
// peers agree on (epoch, members, ring order), and peers admitted by it hold the same view.
#include <future>
#include <random>
#include <thread>

#include "comm/communicator.h"
#include "coord/coordinator.h"
#include "support.h"

namespace wccl::comm {
namespace {

using namespace std::chrono_literals;

TEST(Churn, EveryUpdateEndsInAgreement) {
  test::Pki pki;
  auto coord_files = pki.node("coordinator");
  Config ccfg = test::make_config("coordinator", &coord_files);
  ASSERT_TRUE(ccfg.set("listen", "127.0.0.1:0").ok());
  ASSERT_TRUE(ccfg.set("settle_ms", "50").ok());
  ASSERT_TRUE(ccfg.set("heartbeat_ms", "100").ok());
  ASSERT_TRUE(ccfg.set("peer_timeout_ms", "2000").ok());
  auto coord = coord::Coordinator::start(ccfg);
  ASSERT_TRUE(coord.ok()) << coord.status().to_string();
  const int port = coord.value()->port();
  int next_name = 0;
  auto config = [&] {
    const std::string name = "churn" + std::to_string(next_name++);
    auto files = pki.node(name);
    Config cfg = test::make_config(name, &files);
    EXPECT_TRUE(cfg.set("coordinator", "127.0.0.1:" + std::to_string(port)).ok());
    EXPECT_TRUE(cfg.set("listen", "127.0.0.1:0").ok());
    EXPECT_TRUE(cfg.set("heartbeat_ms", "100").ok());
    EXPECT_TRUE(cfg.set("op_timeout_ms", "20000").ok());
    EXPECT_TRUE(cfg.set("join_timeout_ms", "60000").ok());
    return cfg;
  };
  auto first = Communicator::join(config());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  std::vector<std::unique_ptr<Communicator>> live;
  live.push_back(std::move(first).value());
  std::vector<std::future<Result<std::unique_ptr<Communicator>>>> joining;
  std::mt19937 rng(7);
  int kills = 0, admitted = 0;
  for (int round = 0; round < 100; ++round) {
    // Some joiners arrive; sometimes a member dies without a word.
    for (int j = static_cast<int>(rng() % 3); j > 0 && live.size() + joining.size() < 7; --j) {
      joining.push_back(
          std::async(std::launch::async, [cfg = config()] { return Communicator::join(cfg); }));
    }
    if (live.size() > 1 && rng() % 2 == 0) {
      live.erase(live.begin() + static_cast<long>(rng() % live.size()));  // its links just close
      ++kills;
    }
    // A random pause: some JOINs reach the coordinator before the barrier, some after it.
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 100));
    std::vector<std::future<Status>> updates;
    for (auto &c : live)
      updates.push_back(std::async(std::launch::async, [p = c.get()] { return p->update(); }));
    for (auto &u : updates) {
      Status st = u.get();
      ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.to_string();
    }
    const uint64_t epoch = live[0]->epoch();
    const std::vector<coord::PeerId> ring = live[0]->ring();
    for (auto &c : live) {
      ASSERT_EQ(c->epoch(), epoch) << "round " << round;
      ASSERT_EQ(c->ring(), ring) << "round " << round;
    }
    // Joiners admitted by this update hold the same view; the others wait for a later round.
    for (auto it = joining.begin(); it != joining.end();) {
      if (it->wait_for(std::chrono::milliseconds(ring.size() > live.size() ? 2000 : 0)) !=
          std::future_status::ready) {
        ++it;
        continue;
      }
      auto c = it->get();
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      if (c.value()->epoch() == epoch) {
        EXPECT_EQ(c.value()->ring(), ring) << "round " << round;
      }
      live.push_back(std::move(c).value());
      ++admitted;
      it = joining.erase(it);
    }
    ASSERT_EQ(live.size(), ring.size())
        << "round " << round << ": every admitted peer is live and vice versa";
  }
  EXPECT_GT(kills, 20);
  EXPECT_GT(admitted, 20);
}

}  // namespace
}  // namespace wccl::comm
