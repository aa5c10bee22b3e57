#!/usr/bin/env bash
# State-sync catch-up benchmark (docs/perf.md): a joiner with zeroed tensors catches up BYTES of
# weight-like F32 state from 1, 2 and 3 donors without compression, then from 1 and 3 with it
# (sync_compress=on), in one run. Every member is a process in its own network
# namespace behind a veth on one bridge; each donor's uplink is shaped with tbf to RATE, the
# joiner's link is not, so one donor's uplink is the bottleneck that striping over several
# removes. TLS on, with certificates made here by openssl as docs/tls.md does.
#
#   bench/recovery/state_sync_catchup.sh [BUILD_DIR] [BYTES] [RATE]     (root; defaults: build 1G 400mbit)
set -euo pipefail
build=${1:-build}
bytes=${2:-1G}
rate=${3:-400mbit}
case "$bytes" in
  *G) bytes=$(( ${bytes%G} << 30 )) ;;
  *M) bytes=$(( ${bytes%M} << 20 )) ;;
esac
peer_bin=$(realpath "$build/bench/recovery/wccl-sync-peer")
coord_bin=$(realpath "$build/tools/wccl-coord")
work=$(mktemp -d /tmp/wccl-sync-bench.XXXXXX)
br=wsbr0
cleanup() {
  for k in 0 1 2 3; do ip netns del "wsync$k" 2>/dev/null || true; done
  ip link del "$br" 2>/dev/null || true
  kill "${coord_pid:-}" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Certificates: one CA, one key and certificate for everybody (a benchmark, not a deployment).
(
  cd "$work"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key 2>/dev/null
  openssl req -x509 -new -key ca.key -sha256 -days 2 -subj "/CN=sync-bench CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" -out ca.pem
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' > node.ext
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out node.key 2>/dev/null
  openssl req -new -key node.key -subj "/CN=sync-bench node" -out node.csr
  openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -sha256 -extfile node.ext \
    -out node.pem 2>/dev/null
)
export WCCL_TLS_CERT=$work/node.pem WCCL_TLS_KEY=$work/node.key WCCL_TLS_CA=$work/ca.pem WCCL_LOG_LEVEL=error

# The network: namespace wsync0 is the joiner, wsync1..3 the donors, 10.88.0.1 the coordinator.
ip link add "$br" type bridge
ip addr add 10.88.0.1/24 dev "$br"
ip link set "$br" up
for k in 0 1 2 3; do
  ns=wsync$k
  ip netns add "$ns"
  ip link add "vh$k" type veth peer name "vn$k"
  ip link set "vh$k" master "$br" up
  ip link set "vn$k" netns "$ns"
  ip -n "$ns" addr add "10.88.0.$((10 + k))/24" dev "vn$k"
  ip -n "$ns" link set "vn$k" up
  ip -n "$ns" link set lo up
  if [ "$k" -gt 0 ]; then
    ip netns exec "$ns" tc qdisc add dev "vn$k" root tbf rate "$rate" burst 1mb latency 100ms
  fi
done

echo "# state-sync catch-up: $bytes bytes (16 F32 tensors) to one joiner, each donor's uplink $rate (tbf), TLS on"
printf '# %7s %5s %10s %12s %10s %8s %6s\n' donors zstd seconds "wire bytes" "GB/s" "vs first" wrong
base=""
run=0
for spec in 1:off 2:off 3:off 1:on 3:on; do
  donors=${spec%:*}
  export WCCL_SYNC_COMPRESS=${spec#*:}
  run=$((run + 1))
  port=$((48200 + run))
  "$coord_bin" --listen "10.88.0.1:$port" --min-peers $((donors + 1)) --settle-ms 100 \
    --tls-cert "$WCCL_TLS_CERT" --tls-key "$WCCL_TLS_KEY" --tls-ca "$WCCL_TLS_CA" --log-level error >"$work/coord$run.log" 2>&1 &
  coord_pid=$!
  pids=()
  for k in $(seq 1 "$donors"); do
    WCCL_COORDINATOR=10.88.0.1:$port WCCL_LISTEN=10.88.0.$((10 + k)):0 WCCL_NAME=donor$k \
      ip netns exec "wsync$k" "$peer_bin" donor "$bytes" &
    pids+=($!)
  done
  out=$(WCCL_COORDINATOR=10.88.0.1:$port WCCL_LISTEN=10.88.0.10:0 WCCL_NAME=joiner \
    ip netns exec wsync0 "$peer_bin" joiner "$bytes")
  for p in "${pids[@]}"; do wait "$p"; done
  kill "$coord_pid"; wait "$coord_pid" 2>/dev/null || true
  field() { sed "s/.*\"$1\": \([0-9.]*\).*/\1/" <<<"$out"; }
  seconds=$(field seconds)
  [ -n "$base" ] || base=$seconds
  printf '  %7d %5s %10s %12s %10s %9.2fx %6s\n' "$donors" "$WCCL_SYNC_COMPRESS" "$seconds" "$(field wire_bytes)" \
    "$(field GBps)" "$(awk -v a="$base" -v b="$seconds" 'BEGIN { print a / b }')" "$(field wrong_tensors)"
done
