/* verdict.c — see verdict.h. */
#include "verdict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "log.h"

#define VERDICT_FILE "diverged"
/* *text when a rewrite at restore failed: what the file holds is not known.
 * No verdict's text equals it (each line starts with a digit or "trainer"),
 * so the worker's next sync writes or removes the file, and tries again
 * after each job until that succeeds. */
#define VERDICT_UNKNOWN "?"

/* the file's text for p's diverged members and the trainer's error (""
 * none), without its last newline (ckpt_write_meta adds it); NULL when no
 * member diverged or out of memory */
static char *verdict_text(learner_pop_t *p, const char *error) {
  const int P = learner_pop_size(p);
  if (!learner_pop_n_diverged(p)) return NULL;
  const size_t cap = (size_t)P * 32 + strlen(error) + 16;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t k = 0;
  for (int i = 0; i < P; i++) {
    if (!learner_pop_diverged(p, i)) continue;
    learner_stats_t st;
    learner_get_stats(learner_pop_member(p, i), &st);
    k += (size_t)snprintf(s + k, cap - k, "%d %llu\n", i, (unsigned long long)st.step);
  }
  if (error[0]) {
    size_t e = (size_t)snprintf(s + k, cap - k, "trainer %s\n", error);
    for (size_t j = k; j < k + e - 1; j++)
      if (s[j] == '\n' || s[j] == '\r') s[j] = ' '; /* one line */
    k += e;
  }
  s[k - 1] = 0;
  return s;
}

void verdict_sync(const char *dir, const char *name, learner_pop_t *p, const char *error, char **written) {
  char *text = verdict_text(p, error), err[512];
  if (text == *written || (text && *written && !strcmp(text, *written))) {
    free(text);
    return;
  }
  int rc = text ? ckpt_write_meta(dir, VERDICT_FILE, text, err, sizeof err)
                : ckpt_remove_meta(dir, VERDICT_FILE, err, sizeof err);
  if (rc) {
    log_warn(name, "the divergence verdict is not recorded for a restart (tried again after the next command): %s",
             err);
    free(text);
    return;
  }
  free(*written);
  *written = text;
}

int verdict_lifts(const char *written, learner_pop_t *p) {
  const int P = learner_pop_size(p);
  for (const char *l = written; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    int i = -1;
    if (sscanf(l, "%d", &i) == 1 && i >= 0 && i < P && !learner_pop_diverged(p, i)) return 1;
  }
  return 0;
}

void verdict_restore(const char *dir, const char *name, learner_pop_t *p, char *error, size_t n, char **text) {
  error[0] = 0;
  *text = NULL;
  char path[1300];
  snprintf(path, sizeof path, "%.1200s/" VERDICT_FILE, dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  const int P = learner_pop_size(p);
  char line[1024], trainer_error[600] = "";
  int dropped = 0, marked = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!strncmp(line, "trainer ", 8)) {
      snprintf(trainer_error, sizeof trainer_error, "%.500s", line + 8);
      continue;
    }
    int i = -1, used = 0;
    unsigned long long step = 0;
    if (sscanf(line, "%d %llu%n", &i, &step, &used) != 2 || line[used] || i < 0 || i >= P) {
      log_warn(name, "%s: line '%.80s' is not a member's verdict: ignored", path, line);
      dropped = 1;
      continue;
    }
    learner_stats_t st;
    learner_get_stats(learner_pop_member(p, i), &st);
    if (st.step != step) { /* the state that diverged was not saved after all (a crash): this one trains */
      log_warn(name,
               "%s %d diverged at step %llu before the restart, but the state restored is at step %llu: it trains",
               P > 1 ? "member" : "the trainer's learner", i, step, (unsigned long long)st.step);
      dropped = 1;
      continue;
    }
    learner_pop_mark_diverged(p, i);
    marked++;
  }
  fclose(f);
  const int all = learner_pop_n_diverged(p) == P;
  if (trainer_error[0] && all) snprintf(error, n, "%s", trainer_error);
  else if (trainer_error[0]) dropped = 1;
  if (marked)
    log_warn(name, "restored as diverged before the restart: %d of %d member%s (SetHyperparams resumes %s)%s%s",
             marked, P, P > 1 ? "s" : "", marked > 1 ? "them" : "it", error[0] ? ": " : "", error);
  *text = verdict_text(p, error);
  if (dropped) { /* the file says what holds now */
    char err[512];
    int rc = *text ? ckpt_write_meta(dir, VERDICT_FILE, *text, err, sizeof err)
                   : ckpt_remove_meta(dir, VERDICT_FILE, err, sizeof err);
    if (rc) {
      log_warn(name, "%s (tried again after the next command)", err);
      free(*text);
      *text = strdup(VERDICT_UNKNOWN); /* not what the file holds: the first job writes it again */
    }
  }
}
