/* The public header compiles as strict C99 with every warning as an error, and works from C. */
#include <stdio.h>
#include <string.h>

#include "wccl/wccl.h"

int main(void) {
  wccl_config_t *cfg = NULL;
  char value[32];
  size_t needed = 0;
  if (wccl_config_create(&cfg) != WCCL_OK) return 1;
  if (wccl_config_set(cfg, "streams", "8") != WCCL_OK) return 2;
  if (wccl_config_get(cfg, "streams", value, sizeof(value), &needed) != WCCL_OK) return 3;
  if (strcmp(value, "8") != 0 || needed != 2) return 4;
  if (wccl_config_set(cfg, "streams", "0") != WCCL_ERR_INVALID_ARGUMENT) return 5;
  if (strstr(wccl_last_error(), "streams") == NULL) return 6;
  if (strcmp(wccl_version(), WCCL_VERSION_STRING) != 0) return 7;
  if (strcmp(wccl_result_name(WCCL_ERR_TIMEOUT), "WCCL_ERR_TIMEOUT") != 0) return 8;
  if (strcmp(wccl_result_name((wccl_result_t)9999), "WCCL_ERR_UNKNOWN") != 0) return 9;
  if (strcmp(wccl_strerror((wccl_result_t)-1), "unknown result code") != 0) return 10;
  wccl_config_destroy(cfg);
  printf("c99 ok: wccl %s\n", wccl_version());
  return 0;
}
