/* demo_driver.c — see demo_driver.h (the driver over a learner in this
 * process is demo_learner.c's: it links the learner). */
#include "demo_driver.h"

#include <stdio.h>
#include <string.h>

int demo_config_set_fields(learner_config_t *c, const char *const *fields, int n, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    char k[128];
    size_t kl = strcspn(fields[i], "=");
    if (fields[i][kl] != '=') return snprintf(err, errlen, "%s: not name=value", fields[i]), LEARNER_EINVAL;
    snprintf(k, sizeof k, "%.*s", (int)kl, fields[i]);
    int rc = learner_config_set(c, k, fields[i] + kl + 1, err, errlen);
    if (rc) return rc;
  }
  return learner_config_validate(c, err, errlen);
}
