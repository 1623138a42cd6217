/* workq.c — see workq.h. */
#include "workq.h"

#include <stdlib.h>
#include <string.h>

static void *worker(void *p) {
  workq_t *q = p;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (q->n == 0 && !q->closing) pthread_cond_wait(&q->cv, &q->mu);
    if (q->n == 0 && q->closing) break;
    workq_job_t j = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    q->busy = 1;
    pthread_mutex_unlock(&q->mu);
    j.fn(q->owner, j.arg);
    pthread_mutex_lock(&q->mu);
    q->busy = 0;
  }
  q->exited = 1;
  void (*on_exit)(void *) = q->on_exit;
  void *owner = q->owner;
  pthread_mutex_unlock(&q->mu);
  if (on_exit) on_exit(owner); /* q may be gone after this */
  return NULL;
}

int workq_init(workq_t *q, int cap, void *owner, void (*on_exit)(void *owner)) {
  memset(q, 0, sizeof *q);
  /* room for the internal jobs that bypass the limit */
  q->ring = calloc((size_t)cap + 8, sizeof *q->ring);
  if (!q->ring) return -1;
  q->cap = cap + 8;
  q->owner = owner;
  q->on_exit = on_exit;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  if (pthread_create(&q->th, NULL, worker, q)) {
    free(q->ring);
    return -1;
  }
  if (on_exit) pthread_detach(q->th);
  return 0;
}

static int push(workq_t *q, workq_fn fn, void *arg, int limit) {
  pthread_mutex_lock(&q->mu);
  int rc = WORKQ_OK;
  if (q->closing)
    rc = WORKQ_CLOSED;
  else if (q->n >= limit)
    rc = WORKQ_FULL;
  else {
    q->ring[(q->head + q->n) % q->cap] = (workq_job_t){fn, arg};
    q->n++;
    pthread_cond_signal(&q->cv);
  }
  pthread_mutex_unlock(&q->mu);
  return rc;
}

int workq_push(workq_t *q, workq_fn fn, void *arg) { return push(q, fn, arg, q->cap - 8); }
int workq_push_force(workq_t *q, workq_fn fn, void *arg) { return push(q, fn, arg, q->cap); }

void workq_close(workq_t *q) {
  pthread_mutex_lock(&q->mu);
  q->closing = 1;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

void workq_join(workq_t *q) { pthread_join(q->th, NULL); }

void workq_free(workq_t *q) {
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  free(q->ring);
  q->ring = NULL;
}

int workq_pending(workq_t *q) {
  pthread_mutex_lock(&q->mu);
  int n = q->n + q->busy;
  pthread_mutex_unlock(&q->mu);
  return n;
}

int workq_drain(workq_t *q, workq_job_t *out, int max) {
  pthread_mutex_lock(&q->mu);
  int k = 0;
  while (q->n > 0 && k < max) {
    out[k++] = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
  }
  pthread_mutex_unlock(&q->mu);
  return k;
}


void *workq_take(workq_t *q, int (*match)(void *arg, void *ctx), void *ctx) {
  pthread_mutex_lock(&q->mu);
  void *found = NULL;
  for (int k = 0; k < q->n && !found; k++) {
    const int i = (q->head + k) % q->cap;
    if (!match(q->ring[i].arg, ctx)) continue;
    found = q->ring[i].arg;
    for (int m = k; m + 1 < q->n; m++) q->ring[(q->head + m) % q->cap] = q->ring[(q->head + m + 1) % q->cap];
    q->n--;
  }
  pthread_mutex_unlock(&q->mu);
  return found;
}
