#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* A member of the churn soak (tests/churn_soak.py), written against the public C API only and
 * configured by WCCL_* variables. It drives the library as a DiLoCo training loop does: join, then
 * every step
 *   wccl_comm_update -> wccl_state_sync of one I64 "step" tensor (a joiner learns the step) ->
 *   wccl_allreduce of COUNT F32 (SUM, in place), verified;
 * PEER_LOST at any point goes back to the update, which is what a user's loop does; so does an
 * update that finds the coordinator away (COORDINATOR_UNREACHABLE), after 100 ms.
 * For each committed all-reduce it prints one line
 *   commit STEP EPOCH SIZE RANK WRONG
 * where WRONG counts the elements that differ from the exact sum (element i of the member that
 * holds step s and rank r is (r + 1) * ((i + s) % 251 + 1)). Any other failure prints
 * "error CALL RESULT: MESSAGE" and ends the process with status 1. Usage: churn-member [COUNT] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wccl/wccl.h"

static void fill(float *v, size_t count, int rank, long long step) {
  for (size_t i = 0; i < count; ++i)
    v[i] = (float)((rank + 1) * (int)((i + (size_t)step) % 251 + 1));
}

static size_t wrong(const float *v, size_t count, int size, long long step) {
  size_t bad = 0;
  const int ranks = size * (size + 1) / 2;
  for (size_t i = 0; i < count; ++i)
    bad += v[i] != (float)(ranks * (int)((i + (size_t)step) % 251 + 1));
  return bad;
}

static int error(const char *call, wccl_result_t r) {
  printf("error %s %s: %s\n", call, wccl_result_name(r), wccl_last_error());
  fflush(stdout);
  return 1;
}

int main(int argc, char **argv) {
  const size_t count = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)256 << 10;
  wccl_config_t *cfg = NULL;
  wccl_comm_t *comm = NULL;
  wccl_result_t r = wccl_config_create(&cfg);
  if (r != WCCL_OK) return error("config", r);
  r = wccl_comm_join(&comm, cfg);
  wccl_config_destroy(cfg);
  if (r != WCCL_OK) return error("join", r);
  printf("joined rank %d size %d epoch %llu\n", wccl_comm_rank(comm), wccl_comm_size(comm),
         (unsigned long long)wccl_comm_epoch(comm));
  fflush(stdout);
  float *v = malloc(count * sizeof(float) + 1);
  if (v == NULL) return error("malloc", WCCL_ERR_NO_MEMORY);
  long long step = 0;
  uint64_t revision = 0;
  int synced = 0; /* a joiner takes the group's step before it offers its own */
  for (;;) {
    r = wccl_comm_update(comm);
    if (r == WCCL_ERR_PEER_LOST) continue; /* it was declared lost: the next update re-admits it */
    if (r == WCCL_ERR_COORDINATOR_UNREACHABLE) {
      /* the coordinator restarts: the communicator reconnects by itself; try again shortly */
      nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
      continue;
    }
    if (r != WCCL_OK) return error("update", r);
    wccl_tensor_t t = {"step", &step, 1, WCCL_I64, WCCL_DEVICE_HOST};
    r = wccl_state_sync(comm, &t, 1, &revision, synced ? WCCL_SYNC_POPULAR : WCCL_SYNC_RECEIVE_ONLY,
                        NULL);
    if (r == WCCL_ERR_INVALID_USAGE && !synced) {
      /* every member is a joiner: nobody holds the group's step any more, so offer ours */
      r = wccl_state_sync(comm, &t, 1, &revision, WCCL_SYNC_POPULAR, NULL);
    }
    if (r == WCCL_ERR_PEER_LOST) continue;
    if (r != WCCL_OK) return error("state_sync", r);
    synced = 1;
    const int rank = wccl_comm_rank(comm), size = wccl_comm_size(comm);
    fill(v, count, rank, step);
    r = wccl_allreduce(v, v, count, WCCL_F32, WCCL_SUM, comm, NULL);
    if (r == WCCL_ERR_PEER_LOST) continue;
    if (r != WCCL_OK) return error("allreduce", r);
    printf("commit %lld %llu %d %d %zu\n", step, (unsigned long long)wccl_comm_epoch(comm), size,
           rank, wrong(v, count, size, step));
    fflush(stdout);
    ++step;
    revision = (uint64_t)step;
  }
}
