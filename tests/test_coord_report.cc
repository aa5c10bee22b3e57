// What the coordinator's HTTP endpoints show (coord/report.h): counters from membership events,
// and the snapshot rendered for Prometheus and for scripts.
#include "coord/report.h"

#include <gtest/gtest.h>

#include <string>

namespace wccl::coord {
namespace {

Event event(Event::Kind kind) {
  Event e;
  e.kind = kind;
  e.epoch = 7;
  return e;
}

Event lost(LossCause cause, bool member) {
  Event e = event(Event::Kind::kLost);
  e.cause = cause;
  e.member = member;
  e.peer.id = 0x42;
  e.peer.info.name = "m1";
  return e;
}

Event epoch(EpochOrigin origin, uint32_t admitted, uint32_t left, uint32_t lost_members) {
  Event e = event(Event::Kind::kEpoch);
  e.origin = origin;
  e.admitted = admitted;
  e.left = left;
  e.lost = lost_members;
  return e;
}

TEST(JobCounters, CountEachEpochChangeOnceUnderEachCause) {
  JobCounters c;
  const auto now = std::chrono::system_clock::now();
  c.add("g", epoch(EpochOrigin::kFirst, 3, 0, 0), now);
  c.add("g", lost(LossCause::kSilent, true), now);
  c.add("g", lost(LossCause::kSilent, true), now);
  c.add("g", lost(LossCause::kProbe, false), now);  // a joiner: no member lost
  c.add("g", event(Event::Kind::kRevoked), now);
  c.add("g", epoch(EpochOrigin::kContinues, 1, 1, 2), now);  // joined, left and lost at once
  Event failed = event(Event::Kind::kRevoked);
  failed.seq = 4;  // an operation's failure
  c.add("g", failed, now);
  c.add("g", epoch(EpochOrigin::kContinues, 0, 0, 0), now);  // the same members, re-formed
  c.add("g", epoch(EpochOrigin::kContinues, 0, 0, 0), now);  // nothing revoked: a re-order
  c.add("h", event(Event::Kind::kAdopted), now);
  const GroupCounters &g = c.groups().at("g");
  EXPECT_EQ(g.epochs, 4u);
  const std::map<std::string, uint64_t> changes = {
      {"first", 1}, {"join", 1}, {"leave", 1}, {"silent", 1}, {"revocation", 1}, {"reorder", 1}};
  EXPECT_EQ(g.epoch_changes, changes);
  EXPECT_EQ(g.lost, (std::map<std::string, uint64_t>{{"silent", 2}, {"probe", 1}}));
  EXPECT_EQ(g.revocations, 2u);
  EXPECT_EQ(g.operations_failed, 1u);
  EXPECT_EQ(c.groups().at("h").adopted, 1u);
  EXPECT_EQ(c.recent().size(), 10u);
}

TEST(JobCounters, KeepTheLatestEventsOnly) {
  JobCounters c;
  for (size_t i = 0; i < JobCounters::kRecentEvents + 5; ++i) {
    Event e = event(Event::Kind::kRegistered);
    e.epoch = i;
    c.add("g", e, std::chrono::system_clock::now());
  }
  ASSERT_EQ(c.recent().size(), JobCounters::kRecentEvents);
  EXPECT_EQ(c.recent().front().event.epoch, 5u);
  EXPECT_EQ(c.groups().at("g").registered, JobCounters::kRecentEvents + 5);
}

JobReport two_members() {
  JobReport r;
  JobReport::Group g;
  g.name = "g\"1";
  g.epoch = 1796313098660189;  // a microsecond timestamp: exact in a double
  g.members = {{0x1, {"a", "10.0.0.1:1", "node\\a", 0}, 0},
               {0x2, {"b\nc", "10.0.0.2:1", "", 0}, 1}};
  g.joiners = {{0x3, {"j", "10.0.0.3:1", "", 0}, -1}};
  g.links = {{0, 1, {25000, 125000000}}};
  g.operations_committed = 12;
  g.counters.lost["disconnected"] = 2;
  r.groups.push_back(g);
  return r;
}

TEST(PrometheusText, EveryFamilyHasHelpAndTypeAndLabelsAreEscaped) {
  const std::string text = prometheus_text(two_members());
  EXPECT_NE(text.find("# TYPE wccl_group_members gauge\nwccl_group_members{group=\"g\\\"1\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("wccl_group_joiners{group=\"g\\\"1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("wccl_group_epoch{group=\"g\\\"1\"} 1796313098660189\n"), std::string::npos);
  EXPECT_NE(text.find("wccl_group_operations_committed_total{group=\"g\\\"1\"} 12\n"),
            std::string::npos);
  EXPECT_NE(text.find("wccl_group_lost_total{group=\"g\\\"1\",cause=\"disconnected\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("wccl_group_lost_total{group=\"g\\\"1\",cause=\"straggler\"} 0\n"),
            std::string::npos)
      << "every cause has a series from the start";
  EXPECT_NE(text.find("node=\"node\\\\a\""), std::string::npos);
  EXPECT_NE(
      text.find("wccl_link_rtt_seconds{group=\"g\\\"1\",member=\"a\",peer=\"b\\nc\"} 0.025\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("wccl_link_delivery_rate_bytes_per_second{group=\"g\\\"1\",member=\"a\","
                      "peer=\"b\\nc\"} 125000000\n"),
            std::string::npos);
  // Every sample line belongs to the family its HELP and TYPE lines named just before.
  std::string family;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    ASSERT_NE(end, std::string::npos) << "the text ends with a line feed";
    const std::string line = text.substr(start, end - start);
    if (line.rfind("# HELP ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
    } else if (line.rfind("# TYPE ", 0) != 0) {
      EXPECT_EQ(line.compare(0, family.size(), family), 0) << line;
    }
    start = end + 1;
  }
}

TEST(StatusJson, CarriesMembersJoinersLinksAndEvents) {
  JobReport r = two_members();
  Event e = lost(LossCause::kStraggler, true);
  r.events.push_back({"g\"1", e, std::chrono::system_clock::now()});
  const std::string j = status_json(r);
  EXPECT_NE(j.find("\"name\":\"g\\\"1\",\"epoch\":1796313098660189,\"revoked\":false"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("{\"id\":\"0000000000000002\",\"name\":\"b\\nc\",\"node\":\"\",\"address\":"
                   "\"10.0.0.2:1\",\"rank\":1}"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"joiners\":[{\"id\":\"0000000000000003\""), std::string::npos);
  EXPECT_NE(j.find("\"links\":[{\"a\":0,\"b\":1,\"rtt_us\":25000,\"bytes_per_s\":125000000}]"),
            std::string::npos);
  EXPECT_NE(j.find("\"event\":\"lost\""), std::string::npos);
  EXPECT_NE(j.find("\"cause\":\"straggler\""), std::string::npos);
  EXPECT_NE(j.find("\"operations_committed\":12"), std::string::npos);
}

TEST(StatusPage, FetchesNothingFromElsewhere) {
  const std::string &page = status_page();
  EXPECT_NE(page.find("status.json"), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
}

}  // namespace
}  // namespace wccl::coord
