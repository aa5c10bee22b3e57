// wccl-coord: the coordinator daemon. Configured from WCCL_* environment variables, then flags;
// prints "wccl-coord listening on port N" once it accepts connections; SIGINT or SIGTERM stop it
// cleanly (exit status 0).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "wccl/wccl.h"

namespace {

const char kUsage[] =
    "usage: wccl-coord [options]\n"
    "  --listen HOST:PORT      address to listen on (default 0.0.0.0:48148, the wccl port; 0 picks "
    "one)\n"
    "  --tls on|off            TLS 1.3 with mutual certificates (default on)\n"
    "  --tls-cert FILE         this node's PEM certificate\n"
    "  --tls-key FILE          its PEM private key\n"
    "  --tls-ca FILE           the job's CA certificate (see docs/tls.md)\n"
    "  --min-peers N           peers to wait for before the first epoch (default 1)\n"
    "  --settle-ms N           the first epoch forms once no peer joined for this long (default "
    "200)\n"
    "  --heartbeat-ms N        peers' heartbeat period, also the probe deadline (default 1000)\n"
    "  --peer-timeout-ms N     silence after which a peer is lost (default 5000)\n"
    "  --events-log FILE       append a JSON line per membership event (join, loss and its "
    "cause, ...)\n"
    "                          to FILE, - for stderr (docs/fault-tolerance.md; default none)\n"
    "  --http HOST:PORT        serve /metrics (Prometheus), /status and /status.json there; "
    "PORT alone\n"
    "                          binds 127.0.0.1 (docs/operations.md; default off)\n"
    "  --http-token-file FILE  every HTTP request must carry the bearer token in FILE\n"
    "  --log-level LEVEL       error, warn, info, debug or trace (default warn)\n"
    "  --help                  this text\n"
    "Every option also reads WCCL_<KEY> from the environment (WCCL_LISTEN, WCCL_TLS_CERT, ...).\n";

}  // namespace

int main(int argc, char **argv) {
  // Block the stop signals before any thread exists, so every thread inherits the mask and only
  // sigwait below receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  wccl_config_t *cfg = nullptr;
  if (wccl_config_create(&cfg) != WCCL_OK) {
    std::fprintf(stderr, "wccl-coord: %s\n", wccl_last_error());
    return 2;
  }
  // The daemon's own default is the wccl port; WCCL_LISTEN or --listen override it.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread exists yet
  if (std::getenv("WCCL_LISTEN") == nullptr) (void)wccl_config_set(cfg, "listen", "0.0.0.0:48148");
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      wccl_config_destroy(cfg);
      return 0;
    }
    if (flag.rfind("--", 0) != 0 || i + 1 >= argc) {
      std::fprintf(stderr, "wccl-coord: unexpected argument \"%s\"\n%s", argv[i], kUsage);
      wccl_config_destroy(cfg);
      return 2;
    }
    std::string key = flag.substr(2);
    for (char &c : key) c = c == '-' ? '_' : c;
    if (wccl_config_set(cfg, key.c_str(), argv[++i]) != WCCL_OK) {
      std::fprintf(stderr, "wccl-coord: %s: %s\n", flag.c_str(), wccl_last_error());
      wccl_config_destroy(cfg);
      return 2;
    }
  }
  wccl_coord_t *coord = nullptr;
  const wccl_result_t rc = wccl_coord_start(&coord, cfg);
  wccl_config_destroy(cfg);
  if (rc != WCCL_OK) {
    std::fprintf(stderr, "wccl-coord: %s\n", wccl_last_error());
    return 1;
  }
  std::printf("wccl-coord listening on port %d\n", wccl_coord_port(coord));
  if (wccl_coord_http_port(coord) != 0) {
    std::printf("wccl-coord serving http on port %d\n", wccl_coord_http_port(coord));
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  wccl_coord_stop(coord);
  std::fprintf(stderr, "wccl-coord: stopped by %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  return 0;
}
