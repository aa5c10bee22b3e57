"""The trainer's Prometheus endpoint (``train.py --metrics-port``): local rank 0 of each node serves
/metrics over HTTP with prometheus_client, updated at every committed sync from the same record the
JSONL metrics get, and the node's wccl member's own counters (``Communicator.stats()``) and links
(``Communicator.links()``). Every series has the label ``node``.

  wccl_trainer_outer_step, _train_loss, _eval_loss, _tokens_per_second, _utilisation, _nodes,
  _contributors, _epoch (gauges); wccl_trainer_tokens_total, _bytes_sent_total (counters)
  wccl_member_ops_committed_total, _ops_failed_total, _ops_peer_lost_total, _bytes_sent_total,
  _bytes_received_total, _epochs_total, _updates_total (counters)
  wccl_member_link_rtt_seconds, wccl_member_link_delivery_bytes_per_second (gauges, label peer_rank)
"""

import math
import threading

import wccl
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

GAUGES = {  # record field -> (series, help)
    "step": ("wccl_trainer_outer_step", "syncs this node has committed (outer steps, or fragments' syncs)"),
    "train_loss": ("wccl_trainer_train_loss", "mean training loss of the sync's inner steps"),
    "eval_loss": ("wccl_trainer_eval_loss", "held-out loss after the sync"),
    "tokens_per_s": ("wccl_trainer_tokens_per_second", "the job's tokens per second over the sync"),
    "utilisation": ("wccl_trainer_utilisation", "share of the sync's wall time spent in inner steps"),
    "nodes": ("wccl_trainer_nodes", "nodes in the job at the sync"),
    "contributors": ("wccl_trainer_contributors", "nodes whose pseudo-gradient the sync averaged"),
    "epoch": ("wccl_trainer_epoch", "the wccl epoch the sync committed in"),
}
MEMBER = ["ops_committed", "ops_failed", "ops_peer_lost", "bytes_sent", "bytes_received", "epochs", "updates"]


class Exporter:
    """Serves the latest snapshot; ``step(record, comm)`` replaces it (on the training thread)."""

    def __init__(self, host: str, port: int, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._record, self._bytes_sent, self._member, self._links = {}, 0, None, []
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = self.server.server_address[1]

    def step(self, record: dict, comm) -> None:
        """The committed sync's record; the member's counters and links as they are now (kept from
        the last step while the mesh has no live communicator)."""
        try:
            member, links = (comm.stats(), comm.links()) if comm is not None else (None, None)
        except wccl.WcclError:  # closed under us (a rebuild): the last snapshot stays
            member, links = None, None
        with self._lock:
            self._record = dict(record)
            self._bytes_sent += int(record.get("bytes_sent", 0))
            if member is not None:
                self._member, self._links = member, links

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def collect(self):
        with self._lock:
            record, sent, member, links = self._record, self._bytes_sent, self._member, self._links
        tokens = int(record.get("tokens", 0))
        labels = ["node"]
        for field, (name, doc) in GAUGES.items():
            value = record.get(field)
            if isinstance(value, (int, float)) and math.isfinite(value):
                g = GaugeMetricFamily(name, doc, labels=labels)
                g.add_metric([self.node], float(value))
                yield g
        for name, doc, value in [("wccl_trainer_tokens", "tokens the job has trained on", tokens),
                                 ("wccl_trainer_bytes_sent", "payload bytes this node's syncs sent", sent)]:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric([self.node], value)
            yield c
        if member is not None:
            for field in MEMBER:
                c = CounterMetricFamily(f"wccl_member_{field}", f"the wccl member's {field.replace('_', ' ')} "
                                        "(wccl_comm_stats)", labels=labels)
                c.add_metric([self.node], getattr(member, field))
                yield c
        rtt = GaugeMetricFamily("wccl_member_link_rtt_seconds", "smallest round trip of each current link",
                                labels=["node", "peer_rank"])
        rate = GaugeMetricFamily("wccl_member_link_delivery_bytes_per_second",
                                 "highest rate each current link delivered while busy", labels=["node", "peer_rank"])
        for link in links:
            if link.rtt_us:
                rtt.add_metric([self.node, str(link.rank)], link.rtt_us / 1e6)
            if link.bytes_per_s:
                rate.add_metric([self.node, str(link.rank)], float(link.bytes_per_s))
        yield rtt
        yield rate
