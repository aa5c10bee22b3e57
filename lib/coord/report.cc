#include "coord/report.h"

#include <cstdlib>
#include <set>

#include "coord/events_log.h"
#include "core/status.h"

namespace wccl::coord {
namespace {

constexpr LossCause kLossCauses[] = {LossCause::kDisconnected, LossCause::kSilent,
                                     LossCause::kProbe,        LossCause::kStraggler,
                                     LossCause::kNode,         LossCause::kSuperseded};

std::vector<std::string> epoch_change_causes() {
  std::vector<std::string> causes = {"join", "leave"};
  for (const LossCause c : kLossCauses) causes.emplace_back(loss_cause_name(c));
  causes.insert(causes.end(), {"revocation", "reorder", "first"});
  return causes;
}

double seconds_since_epoch(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// Prometheus label values: backslash, double quote and line feed escaped.
std::string label_value(const std::string &s) {
  std::string out;
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// One metric family of the text format: HELP and TYPE, then the samples added.
class Family {
 public:
  Family(std::string *out, const char *name, const char *type, const char *help)
      : out_(out), name_(name) {
    *out_ += format("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  }
  // labels: name/value pairs.
  void sample(const std::vector<std::pair<const char *, std::string>> &labels, double value) {
    *out_ += name_;
    if (!labels.empty()) {
      *out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i != 0) *out_ += ',';
        *out_ += format("%s=\"%s\"", labels[i].first, label_value(labels[i].second).c_str());
      }
      *out_ += '}';
    }
    // The shortest of 15 to 17 digits that reads back as the same double.
    std::string text;
    for (int digits = 15; digits <= 17; ++digits) {
      text = format("%.*g", digits, value);
      if (std::strtod(text.c_str(), nullptr) == value) break;
    }
    *out_ += " " + text + "\n";
  }

 private:
  std::string *out_;
  const char *name_;
};

double count(uint64_t v) { return static_cast<double>(v); }

uint64_t at(const std::map<std::string, uint64_t> &m, const std::string &key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

void JobCounters::add(const std::string &group, const Event &e,
                      std::chrono::system_clock::time_point at) {
  GroupCounters &g = groups_[group];
  switch (e.kind) {
    case Event::Kind::kRegistered:
      ++g.registered;
      break;
    case Event::Kind::kAdmitted:
      ++g.admitted;
      break;
    case Event::Kind::kLeft:
      ++g.left;
      break;
    case Event::Kind::kLost:
      ++g.lost[loss_cause_name(e.cause)];
      if (e.member) causes_[group].emplace_back(loss_cause_name(e.cause));
      break;
    case Event::Kind::kRevoked:
      ++g.revocations;
      if (e.seq != 0) ++g.operations_failed;
      revoked_[group] = true;
      break;
    case Event::Kind::kEpoch: {
      ++g.epochs;
      std::set<std::string> why;
      if (e.origin == EpochOrigin::kFirst) {
        why.insert("first");
      } else {
        if (e.admitted != 0) why.insert("join");
        if (e.left != 0) why.insert("leave");
        for (const std::string &c : causes_[group]) why.insert(c);
        if (why.empty()) why.insert(revoked_[group] ? "revocation" : "reorder");
      }
      for (const std::string &c : why) ++g.epoch_changes[c];
      causes_.erase(group);
      revoked_.erase(group);
      break;
    }
    case Event::Kind::kAdopted:
      ++g.adopted;
      causes_.erase(group);
      revoked_.erase(group);
      break;
  }
  recent_.push_back({group, e, at});
  if (recent_.size() > kRecentEvents) recent_.pop_front();
}

JobReport make_report(const Job &job, const JobCounters &counters,
                      std::chrono::system_clock::time_point started, int port,
                      std::chrono::system_clock::time_point now) {
  JobReport r;
  r.started = started;
  r.taken = now;
  r.port = port;
  for (const std::string &name : job.group_names()) {
    const Membership &m = *job.group(name);
    JobReport::Group g;
    g.name = name;
    g.epoch = m.epoch();
    g.revoked = m.revoked();
    g.origin = m.origin();
    g.committed = m.committed();
    g.operations_committed = m.operations_committed();
    const std::vector<Member> &ring = m.ring();
    for (size_t i = 0; i < ring.size(); ++i) {
      g.members.push_back({ring[i].id, ring[i].info, static_cast<int>(i)});
    }
    for (const auto &[id, info] : m.live_peers()) {
      if (m.is_joiner(id)) g.joiners.push_back({id, info, -1});
    }
    if (ring.size() <= kMaxMeasuredRing) {
      for (size_t a = 0; a < ring.size(); ++a) {
        for (size_t b = a + 1; b < ring.size(); ++b) {
          const LinkEstimate e = m.link(ring[a].id, ring[b].id);
          if (e.rtt_us != 0 || e.bytes_per_s != 0) {
            g.links.push_back({static_cast<int>(a), static_cast<int>(b), e});
          }
        }
      }
    }
    auto c = counters.groups().find(name);
    if (c != counters.groups().end()) g.counters = c->second;
    r.groups.push_back(std::move(g));
  }
  r.events.assign(counters.recent().begin(), counters.recent().end());
  return r;
}

std::string prometheus_text(const JobReport &r) {
  std::string out;
  Family(&out, "wccl_coord_start_time_seconds", "gauge",
         "When this coordinator started, in seconds since 1970")
      .sample({}, seconds_since_epoch(r.started));
  // A family with one sample a group.
  auto per_group = [&](const char *name, const char *type, const char *help, auto value) {
    Family f(&out, name, type, help);
    for (const JobReport::Group &g : r.groups) f.sample({{"group", g.name}}, value(g));
  };
  per_group("wccl_group_members", "gauge", "Members of the group's current epoch",
            [](const auto &g) { return count(g.members.size()); });
  per_group("wccl_group_joiners", "gauge", "Peers waiting to be admitted at the next update",
            [](const auto &g) { return count(g.joiners.size()); });
  per_group("wccl_group_epoch", "gauge", "The current epoch's number (0: none yet)",
            [](const auto &g) { return count(g.epoch); });
  per_group("wccl_group_revoked", "gauge", "1 while the current epoch is revoked",
            [](const auto &g) { return g.revoked ? 1.0 : 0.0; });
  per_group("wccl_group_epochs_total", "counter", "Epochs formed",
            [](const auto &g) { return count(g.counters.epochs); });
  {
    Family f(&out, "wccl_group_epoch_changes_total", "counter",
             "Epoch changes by cause (a change with several causes counts under each)");
    for (const JobReport::Group &g : r.groups) {
      for (const std::string &cause : epoch_change_causes()) {
        f.sample({{"group", g.name}, {"cause", cause}}, count(at(g.counters.epoch_changes, cause)));
      }
    }
  }
  per_group("wccl_group_registered_total", "counter", "Peers that registered to join",
            [](const auto &g) { return count(g.counters.registered); });
  per_group("wccl_group_admitted_total", "counter", "Peers admitted into an epoch",
            [](const auto &g) { return count(g.counters.admitted); });
  per_group("wccl_group_left_total", "counter", "Members and joiners that left",
            [](const auto &g) { return count(g.counters.left); });
  {
    Family f(&out, "wccl_group_lost_total", "counter",
             "Members and joiners declared lost, by cause");
    for (const JobReport::Group &g : r.groups) {
      for (const LossCause c : kLossCauses) {
        f.sample({{"group", g.name}, {"cause", loss_cause_name(c)}},
                 count(at(g.counters.lost, loss_cause_name(c))));
      }
    }
  }
  per_group("wccl_group_revocations_total", "counter", "Epochs revoked",
            [](const auto &g) { return count(g.counters.revocations); });
  per_group("wccl_group_operations_committed_total", "counter",
            "Operations committed (every member completed them)",
            [](const auto &g) { return count(g.operations_committed); });
  per_group("wccl_group_operations_failed_total", "counter",
            "Operations whose failure on a member revoked the epoch",
            [](const auto &g) { return count(g.counters.operations_failed); });
  per_group("wccl_group_epochs_adopted_total", "counter",
            "Epochs adopted from members after a coordinator restart",
            [](const auto &g) { return count(g.counters.adopted); });
  {
    Family f(&out, "wccl_member_info", "gauge",
             "A member of the current epoch (1), with its rank, node and address");
    for (const JobReport::Group &g : r.groups) {
      for (const JobReport::Peer &p : g.members) {
        f.sample({{"group", g.name},
                  {"member", p.info.name},
                  {"id", peer_id_text(p.id)},
                  {"rank", std::to_string(p.rank)},
                  {"node", p.info.node},
                  {"address", p.info.address}},
                 1);
      }
    }
  }
  // Each measured link once, from the member earlier in the ring to the later one.
  auto per_link = [&](const char *name, const char *help, auto value) {
    Family f(&out, name, "gauge", help);
    for (const JobReport::Group &g : r.groups) {
      for (const JobReport::LinkEntry &l : g.links) {
        const double v = value(l.estimate);
        if (v == 0) continue;  // not measured
        f.sample({{"group", g.name},
                  {"member", g.members[static_cast<size_t>(l.a)].info.name},
                  {"peer", g.members[static_cast<size_t>(l.b)].info.name}},
                 v);
      }
    }
  };
  per_link("wccl_link_rtt_seconds",
           "The smallest round trip a member measured on its link to a peer",
           [](const LinkEstimate &e) { return e.rtt_us / 1e6; });
  per_link("wccl_link_delivery_rate_bytes_per_second",
           "The highest rate a member's link to a peer delivered while busy",
           [](const LinkEstimate &e) { return count(e.bytes_per_s); });
  return out;
}

namespace {

std::string peer_json(const JobReport::Peer &p) {
  std::string j =
      "{\"id\":" + json_string(peer_id_text(p.id)) + ",\"name\":" + json_string(p.info.name) +
      ",\"node\":" + json_string(p.info.node) + ",\"address\":" + json_string(p.info.address);
  if (p.rank >= 0) j += ",\"rank\":" + std::to_string(p.rank);
  return j + "}";
}

std::string counts_json(const std::map<std::string, uint64_t> &m,
                        const std::vector<std::string> &keys) {
  std::string j = "{";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i != 0) j += ",";
    j += json_string(keys[i]) + ":" + std::to_string(at(m, keys[i]));
  }
  return j + "}";
}

std::string counters_json(const JobReport::Group &g) {
  const GroupCounters &c = g.counters;
  std::vector<std::string> loss;
  for (const LossCause cause : kLossCauses) loss.emplace_back(loss_cause_name(cause));
  return format(
      "{\"epochs\":%llu,\"registered\":%llu,\"admitted\":%llu,\"left\":%llu,"
      "\"revocations\":%llu,\"operations_committed\":%llu,\"operations_failed\":%llu,"
      "\"adopted\":%llu,\"lost\":%s,\"epoch_changes\":%s}",
      static_cast<unsigned long long>(c.epochs), static_cast<unsigned long long>(c.registered),
      static_cast<unsigned long long>(c.admitted), static_cast<unsigned long long>(c.left),
      static_cast<unsigned long long>(c.revocations),
      static_cast<unsigned long long>(g.operations_committed),
      static_cast<unsigned long long>(c.operations_failed),
      static_cast<unsigned long long>(c.adopted), counts_json(c.lost, loss).c_str(),
      counts_json(c.epoch_changes, epoch_change_causes()).c_str());
}

}  // namespace

std::string status_json(const JobReport &r) {
  std::string j = format("{\"started\":%.3f,\"taken\":%.3f,\"port\":%d,\"groups\":[",
                         seconds_since_epoch(r.started), seconds_since_epoch(r.taken), r.port);
  for (size_t i = 0; i < r.groups.size(); ++i) {
    const JobReport::Group &g = r.groups[i];
    if (i != 0) j += ",";
    j += "{\"name\":" + json_string(g.name) + ",\"epoch\":" + std::to_string(g.epoch) +
         ",\"revoked\":" + (g.revoked ? "true" : "false") +
         ",\"origin\":" + json_string(epoch_origin_name(g.origin)) +
         ",\"committed\":" + std::to_string(g.committed) + ",\"members\":[";
    for (size_t k = 0; k < g.members.size(); ++k) {
      j += (k != 0 ? "," : "") + peer_json(g.members[k]);
    }
    j += "],\"joiners\":[";
    for (size_t k = 0; k < g.joiners.size(); ++k) {
      j += (k != 0 ? "," : "") + peer_json(g.joiners[k]);
    }
    j += "],\"links\":[";
    for (size_t k = 0; k < g.links.size(); ++k) {
      const JobReport::LinkEntry &l = g.links[k];
      j +=
          format("%s{\"a\":%d,\"b\":%d,\"rtt_us\":%u,\"bytes_per_s\":%llu}", k != 0 ? "," : "", l.a,
                 l.b, l.estimate.rtt_us, static_cast<unsigned long long>(l.estimate.bytes_per_s));
    }
    j += "],\"counters\":" + counters_json(g) + "}";
  }
  j += "],\"events\":[";
  for (size_t i = 0; i < r.events.size(); ++i) {
    const JobCounters::Stamped &s = r.events[i];
    j += (i != 0 ? "," : "") + event_json(s.group, s.event, s.at);
  }
  return j + "]}";
}

const std::string &status_page() {
  static const std::string page = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>wccl coordinator</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.lost { color: #b00; } .revoked { color: #b00; font-weight: bold; }
#error { color: #b00; }
</style>
</head>
<body>
<h1>wccl coordinator</h1>
<p id="summary">loading&hellip;</p>
<p id="error"></p>
<div id="groups"></div>
<h2>Recent events</h2>
<table id="events"><thead><tr><th>time</th><th>group</th><th>event</th><th>epoch</th>
<th>peer</th><th>node</th><th>cause</th><th>reason</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function row(cells, cls) {
  const tr = el("tr", undefined, cls);
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}
function table(head, rows, id) {
  const t = el("table");
  if (id) t.id = id;
  const thead = el("thead"), tr = el("tr");
  for (const h of head) tr.appendChild(el("th", h));
  thead.appendChild(tr); t.appendChild(thead);
  const body = el("tbody");
  for (const r of rows) body.appendChild(r);
  t.appendChild(body);
  return t;
}
// Green up to 20 ms, red from 200 ms.
function rttColour(us) {
  const f = Math.min(1, Math.max(0, (us / 1000 - 20) / 180));
  return "hsl(" + Math.round(120 * (1 - f)) + ", 70%, 80%)";
}
function rate(b) {
  if (!b) return "";
  return b >= 1e9 ? (b / 1e9).toFixed(2) + " GB/s" : (b / 1e6).toFixed(1) + " MB/s";
}
function render(s) {
  document.getElementById("error").textContent = "";
  document.getElementById("summary").textContent = "control port " + s.port + ", started " +
    new Date(s.started * 1000).toISOString() + ", " + s.groups.length + " group(s); as of " +
    new Date(s.taken * 1000).toISOString();
  const groups = document.getElementById("groups");
  groups.replaceChildren();
  for (const g of s.groups) {
    const sec = el("section"); sec.className = "group"; sec.dataset.group = g.name;
    sec.appendChild(el("h2", "group " + g.name));
    sec.appendChild(el("p", "epoch " + g.epoch + " (" + g.origin + "), " + g.members.length +
      " member(s), " + g.joiners.length + " waiting to join, " + g.committed +
      " operation(s) committed in this epoch" + (g.revoked ? ", REVOKED" : ""),
      g.revoked ? "revoked" : ""));
    const peers = [];
    for (const m of g.members) peers.push(row([m.rank, m.name, m.node, m.address, "member"], "member"));
    for (const j of g.joiners) peers.push(row(["", j.name, j.node, j.address, "joining"], "joiner"));
    sec.appendChild(table(["rank", "name", "node", "address", "state"], peers));
    const byPair = new Map();
    for (const l of g.links) byPair.set(l.a + "," + l.b, l);
    const head = [""].concat(g.members.map(m => m.name));
    const rows = [];
    for (const a of g.members) {
      const cells = [el("th", a.name)];
      for (const b of g.members) {
        const l = byPair.get(Math.min(a.rank, b.rank) + "," + Math.max(a.rank, b.rank));
        const td = el("td", a.rank === b.rank ? "\u2014" : "", "num");
        if (l && a.rank !== b.rank) {
          td.textContent = (l.rtt_us ? (l.rtt_us / 1000).toFixed(1) + " ms" : "") +
            (l.bytes_per_s ? " / " + rate(l.bytes_per_s) : "");
          if (l.rtt_us) td.style.background = rttColour(l.rtt_us);
        }
        cells.push(td);
      }
      rows.push(row(cells));
    }
    sec.appendChild(el("p", "Links (round trip / delivery rate, as members measured them):"));
    sec.appendChild(table(head, rows, "links-" + g.name));
    const c = g.counters, lost = Object.entries(c.lost).filter(e => e[1]).map(e => e[0] + " " + e[1]);
    const changes = Object.entries(c.epoch_changes).filter(e => e[1]).map(e => e[0] + " " + e[1]);
    sec.appendChild(el("p", "epochs " + c.epochs + " (" + (changes.join(", ") || "none") +
      "); admitted " + c.admitted + ", left " + c.left + ", lost " + (lost.join(", ") || "0") +
      "; revocations " + c.revocations + "; operations committed " + c.operations_committed +
      ", failed " + c.operations_failed + "; epochs adopted after a restart " + c.adopted));
    groups.appendChild(sec);
  }
  const body = document.querySelector("#events tbody");
  body.replaceChildren();
  for (const e of s.events.slice().reverse()) {
    body.appendChild(row([e.time, e.group, e.event, e.epoch, e.name || "", e.node || "",
      e.cause || "", e.reason || ""], e.event === "lost" ? "lost" : ""));
  }
}
async function refresh() {
  try {
    const r = await fetch("status.json" + location.search, {cache: "no-store"});
    if (!r.ok) throw new Error("status.json: HTTP " + r.status);
    render(await r.json());
  } catch (err) {
    document.getElementById("error").textContent = String(err);
  }
  setTimeout(refresh, 2000);
}
refresh();
</script>
</body>
</html>
)html";
  return page;
}

}  // namespace wccl::coord
