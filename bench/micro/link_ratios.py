#!/usr/bin/env python3
"""Runs bench_link (Google Benchmark) and prints link throughput as ratios to the raw socket copy
measured in the same run, and TLS as a ratio to plaintext. Usage: link_ratios.py PATH/bench_link
[--repetitions N]."""
import json
import subprocess
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    reps = sys.argv[sys.argv.index('--repetitions') + 1] if '--repetitions' in sys.argv else '3'
    out = subprocess.run([sys.argv[1], '--benchmark_format=json', f'--benchmark_repetitions={reps}',
                          '--benchmark_report_aggregates_only=true'],
                         check=True, capture_output=True, text=True).stdout
    rates = {}
    for b in json.loads(out)['benchmarks']:
        if b.get('aggregate_name') == 'median':
            rates[b['run_name'].replace('/min_time:2.000', '')] = b['bytes_per_second'] / 1e9
    raw = rates['BM_RawTcp/real_time']
    print(f"{'case':32} {'GB/s':>7} {'vs raw':>7} {'vs plain':>9}")
    print(f"{'raw TCP copy, 1 connection':32} {raw:7.2f} {1.0:7.2f} {'':>9}")
    for streams in (1, 4):
        plain = rates[f'BM_Link/tls:0/streams:{streams}/real_time']
        tls = rates[f'BM_Link/tls:1/streams:{streams}/real_time']
        print(f"{f'link plaintext, {streams} stream(s)':32} {plain:7.2f} {plain / raw:7.2f} {'':>9}")
        print(f"{f'link TLS 1.3, {streams} stream(s)':32} {tls:7.2f} {tls / raw:7.2f} {tls / plain:9.2f}")
    print(f"(medians of {reps} repetitions; GB = 1e9 bytes)")
    return 0


if __name__ == '__main__':
    sys.exit(main())
