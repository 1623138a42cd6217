/*
 * suggest.h — "did you mean ...?" for unknown names (config fields, options,
 * commands): optimal-string-alignment distance (Levenshtein plus adjacent
 * transpositions), and the rule for when a candidate is close enough to
 * offer. Header-only: learner.c, dqnd's options and dqnctl share it.
 */
#ifndef DQN_SUGGEST_H
#define DQN_SUGGEST_H

#include <string.h>

#define SUGGEST_MAXLEN 64

static inline int suggest_distance(const char *a, const char *b) {
  int n = (int)strlen(a), m = (int)strlen(b);
  if (n > SUGGEST_MAXLEN || m > SUGGEST_MAXLEN) return 1 << 20;
  int d[SUGGEST_MAXLEN + 1][SUGGEST_MAXLEN + 1];
  for (int i = 0; i <= n; i++) d[i][0] = i;
  for (int j = 0; j <= m; j++) d[0][j] = j;
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= m; j++) {
      int cost = a[i - 1] != b[j - 1];
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[n][m];
}

/* Tracks the nearest candidate: call suggest_try for each, then read best
 * (NULL when none is close: at most 2 edits, or a third of the word). */
typedef struct suggest {
  const char *word, *best;
  int dist;
} suggest_t;

static inline void suggest_init(suggest_t *s, const char *word) {
  s->word = word;
  s->best = NULL;
  s->dist = 1 << 20;
}
static inline void suggest_try(suggest_t *s, const char *cand) {
  int d = suggest_distance(s->word, cand);
  int lim = (int)strlen(s->word) / 3;
  if (lim < 2) lim = 2;
  if (d <= lim && d < s->dist) {
    s->dist = d;
    s->best = cand;
  }
}

#endif
