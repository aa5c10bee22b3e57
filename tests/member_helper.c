/* A group member in its own process, for tests that kill or freeze one: joins through the C API
 * (configured by WCCL_* variables), prints "joined rank R size S epoch E", then waits for its
 * standard input to close and leaves abruptly. */
#include <stdio.h>

#include "wccl/wccl.h"

int main(void) {
  wccl_config_t *cfg = NULL;
  wccl_comm_t *comm = NULL;
  if (wccl_config_create(&cfg) != WCCL_OK || wccl_comm_join(&comm, cfg) != WCCL_OK) {
    fprintf(stderr, "member: %s\n", wccl_last_error());
    return 1;
  }
  wccl_config_destroy(cfg);
  printf("joined rank %d size %d epoch %llu\n", wccl_comm_rank(comm), wccl_comm_size(comm),
         (unsigned long long)wccl_comm_epoch(comm));
  fflush(stdout);
  while (getchar() != EOF) {
  }
  wccl_comm_destroy(comm);
  return 0;
}
