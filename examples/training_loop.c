/* The shape of a DiLoCo-style outer loop on wccl (../shared/DESIGN.md §1), as a runnable program:
 * join the group, then each outer step average a "pseudo-gradient" with every member, retrying
 * after wccl_comm_update whenever a peer is lost, and leave at the end.
 *
 *   WCCL_COORDINATOR=host:48148 WCCL_TLS_CERT=node.pem WCCL_TLS_KEY=node.key WCCL_TLS_CA=ca.pem \
 *     wccl-training-loop [STEPS] [COUNT]
 */
#include <stdio.h>
#include <stdlib.h>

#include "wccl/wccl.h"

static int fail(const char *what, wccl_result_t r) {
  fprintf(stderr, "%s: %s (%s)\n", what, wccl_result_name(r), wccl_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 10;
  const size_t count = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : (size_t)1 << 20;
  wccl_config_t *cfg = NULL;
  wccl_comm_t *comm = NULL;
  wccl_result_t r = wccl_config_create(&cfg);
  if (r != WCCL_OK) return fail("config", r);
  r = wccl_comm_join(&comm, cfg); /* blocks until the coordinator admits this peer */
  wccl_config_destroy(cfg);
  if (r != WCCL_OK) return fail("join", r);
  float *delta = malloc(count * sizeof(float));
  if (delta == NULL) return 1;
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < count; ++i)
      delta[i] = (float)(wccl_comm_rank(comm) + step); /* inner steps' result */
    if (wccl_comm_pending(comm) > 0 && (r = wccl_comm_update(comm)) != WCCL_OK)
      return fail("update", r);
    /* On PEER_LOST the buffer is as it was: form the next epoch without the lost peer and retry. */
    while ((r = wccl_allreduce(delta, delta, count, WCCL_F32, WCCL_AVG, comm, NULL)) ==
           WCCL_ERR_PEER_LOST) {
      if ((r = wccl_comm_update(comm)) != WCCL_OK) return fail("update", r);
    }
    if (r != WCCL_OK) return fail("allreduce", r);
    printf("step %d: epoch %llu, %d peers, delta[0] = %g\n", step,
           (unsigned long long)wccl_comm_epoch(comm), wccl_comm_size(comm), (double)delta[0]);
  }
  free(delta);
  r = wccl_comm_leave(comm); /* graceful: the others' next update completes without us */
  wccl_comm_destroy(comm);
  return r == WCCL_OK ? 0 : fail("leave", r);
}
