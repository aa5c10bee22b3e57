/* A group member in its own process, for tests that kill or freeze one, written against the public
 * C API (configured by WCCL_* variables). It joins, prints "joined rank R size S epoch E", then
 * runs the commands it reads on stdin, one per line, answering each with one line:
 *   allreduce COUNT        F32 SUM all-reduce of COUNT elements; element i of rank r holds
 *                          (r + 1) * (i % 251 + 1). Answers "allreduce RESULT WRONG" where WRONG
 *                          counts elements that differ from the exact sum (0 unless RESULT is OK).
 *   batch C1 C2 ...        the same all-reduces started together (non-blocking), then waited for
 *                          in order; answers "batch RESULT1 RESULT2 ...".
 *   update                 answers "update RESULT rank R size S epoch E".
 * At the end of its input it leaves abruptly (wccl_comm_destroy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wccl/wccl.h"

#define MAX_BATCH 8

static float *filled(size_t count, int rank) {
  float *v = malloc(count * sizeof(float) + 1);
  for (size_t i = 0; v != NULL && i < count; ++i) v[i] = (float)((rank + 1) * (int)(i % 251 + 1));
  return v;
}

static size_t wrong(const float *v, size_t count, int size) {
  size_t bad = 0;
  const int ranks = size * (size + 1) / 2;
  for (size_t i = 0; i < count; ++i) bad += v[i] != (float)(ranks * (int)(i % 251 + 1));
  return bad;
}

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
  char line[256];
  while (fgets(line, sizeof(line), stdin) != NULL) {
    unsigned long long counts[MAX_BATCH];
    int n = 0;
    if (sscanf(line, "allreduce %llu", &counts[0]) == 1) {
      const int size = wccl_comm_size(comm);
      float *v = filled((size_t)counts[0], wccl_comm_rank(comm));
      const wccl_result_t r =
          wccl_allreduce(v, v, (size_t)counts[0], WCCL_F32, WCCL_SUM, comm, NULL);
      printf("allreduce %s %zu\n", wccl_result_name(r),
             r == WCCL_OK ? wrong(v, (size_t)counts[0], size) : 0);
      free(v);
    } else if (strncmp(line, "batch", 5) == 0) {
      char *p = line + 5;
      while (n < MAX_BATCH && sscanf(p, " %llu", &counts[n]) == 1) {
        ++n;
        while (*p == ' ') ++p;
        while (*p != ' ' && *p != '\n' && *p != '\0') ++p;
      }
      wccl_request_t *req[MAX_BATCH] = {NULL};
      float *v[MAX_BATCH] = {NULL};
      wccl_result_t r[MAX_BATCH];
      for (int k = 0; k < n; ++k) {
        v[k] = filled((size_t)counts[k], wccl_comm_rank(comm));
        r[k] =
            wccl_iallreduce(&req[k], v[k], v[k], (size_t)counts[k], WCCL_F32, WCCL_SUM, comm, NULL);
      }
      printf("batch");
      for (int k = 0; k < n; ++k) {
        if (req[k] != NULL) r[k] = wccl_wait(req[k], NULL);
        printf(" %s", wccl_result_name(r[k]));
        wccl_request_free(req[k]);
        free(v[k]);
      }
      printf("\n");
    } else if (strncmp(line, "update", 6) == 0) {
      const wccl_result_t r = wccl_comm_update(comm);
      printf("update %s rank %d size %d epoch %llu\n", wccl_result_name(r), wccl_comm_rank(comm),
             wccl_comm_size(comm), (unsigned long long)wccl_comm_epoch(comm));
    } else {
      printf("unknown command\n");
    }
    fflush(stdout);
  }
  wccl_comm_destroy(comm);
  return 0;
}
