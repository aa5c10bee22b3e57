#include "sim/topology.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace wccl::sim {
namespace {

[[noreturn]] void fail(const std::string &why) { throw std::runtime_error(why); }

double parse_number(const std::string &text, const std::string &what, size_t *unit_at) {
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v >= 0) || !std::isfinite(v))
    fail("bad " + what + ": '" + text + "'");
  *unit_at = static_cast<size_t>(end - text.c_str());
  return v;
}

double parse_with_unit(const std::string &text, const std::string &what,
                       const std::map<std::string, double> &units) {
  size_t at = 0;
  const double v = parse_number(text, what, &at);
  const auto unit = units.find(text.substr(at));
  if (unit == units.end()) fail("bad " + what + ": '" + text + "'");
  return v * unit->second;
}

double parse_rate(const std::string &t) {
  const double bps = parse_with_unit(t, "rate", {{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}});
  if (bps <= 0) fail("a rate must be positive: '" + t + "'");
  return bps;
}

int64_t parse_time(const std::string &t) {
  return static_cast<int64_t>(parse_with_unit(t, "time", {{"us", 1e3}, {"ms", 1e6}}));
}

}  // namespace

int Topology::index(const std::string &name) const {
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Topology parse_topology(const std::string &path) {
  std::ifstream in(path);
  if (!in) fail("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_topology_text(text.str(), path);
}

Topology parse_topology_text(const std::string &text, const std::string &name) {
  Topology topo;
  struct Delay {
    std::string a, b;
    int64_t ns;
  };
  std::vector<Delay> delays;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string s; words >> s;) w.push_back(s);
    if (w.empty()) continue;
    try {
      if (w[0] == "host" && w.size() >= 2) {
        Host h;
        h.name = w[1];
        bool down = false;
        size_t count = 0;
        for (size_t k = 2; k < w.size(); ++k) {
          const size_t eq = w[k].find('=');
          if (eq == std::string::npos) fail("expected key=value: '" + w[k] + "'");
          const std::string key = w[k].substr(0, eq), value = w[k].substr(eq + 1);
          size_t at = 0;
          if (key == "region") {
            h.region = value;
          } else if (key == "up") {
            h.up_bps = parse_rate(value);
          } else if (key == "down") {
            h.down_bps = parse_rate(value), down = true;
          } else if (key == "jitter") {
            h.jitter_ns = parse_time(value);
          } else if (key == "loss") {
            h.loss = parse_number(value, "loss", &at);
            if (at != value.size() || h.loss > 1) fail("bad loss: '" + value + "'");
          } else if (key == "count") {
            const double c = parse_number(value, "count", &at);
            if (at != value.size() || c < 1 || c > 65536 || c != std::floor(c))
              fail("bad count: '" + value + "'");
            count = static_cast<size_t>(c);
          } else {
            fail("unknown host setting '" + key + "'");
          }
        }
        if (h.up_bps <= 0) fail("host " + h.name + " needs up=RATE");
        if (!down) h.down_bps = h.up_bps;
        if (h.region.empty()) h.region = h.name;
        const std::string base = h.name;
        for (size_t k = 0; k < std::max<size_t>(count, 1); ++k) {
          if (count > 0) h.name = base + std::to_string(k);
          if (topo.index(h.name) >= 0) fail("host " + h.name + " appears twice");
          topo.hosts.push_back(h);
        }
      } else if (w[0] == "delay" && w.size() == 4) {
        delays.push_back({w[1], w[2], parse_time(w[3])});
      } else if (w[0] == "queue" && w.size() == 2) {
        topo.queue_bytes = static_cast<size_t>(
            parse_with_unit(w[1], "queue", {{"", 1}, {"K", 1024}, {"M", 1 << 20}}));
        if (topo.queue_bytes < 65536) fail("a queue must hold at least 64K");
      } else if (w[0] == "mtu" && w.size() == 2) {
        size_t at = 0;
        topo.mtu = static_cast<int>(parse_number(w[1], "mtu", &at));
        if (at != w[1].size() || topo.mtu < 576 || topo.mtu > 65535) fail("mtu must be 576..65535");
      } else if (w[0] == "seed" && w.size() == 2) {
        topo.seed = std::strtoull(w[1].c_str(), nullptr, 10);
      } else {
        fail("unknown statement '" + line + "'");
      }
    } catch (const std::runtime_error &e) {
      fail(name + ":" + std::to_string(number) + ": " + e.what());
    }
  }
  const size_t n = topo.hosts.size();
  if (n < 2) fail(name + ": a topology needs at least 2 hosts");
  // Each pair's delay: a statement naming both hosts wins over one naming their regions.
  topo.delay_ns.assign(n, std::vector<int64_t>(n, -1));
  for (int pass = 0; pass < 2; ++pass) {
    for (const Delay &d : delays) {
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) {
          const Host &a = topo.hosts[i], &b = topo.hosts[j];
          const bool hosts = d.a == a.name && d.b == b.name;
          const bool regions = d.a == a.region && d.b == b.region;
          if (i != j && (pass == 0 ? regions : hosts))
            topo.delay_ns[i][j] = topo.delay_ns[j][i] = d.ns;
        }
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j && topo.delay_ns[i][j] < 0) {
        fail(name + ": no delay between " + topo.hosts[i].name + " and " + topo.hosts[j].name);
      }
    }
  }
  return topo;
}

}  // namespace wccl::sim
