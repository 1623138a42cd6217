/*
 * learner_dt.c — the Decision Transformer's part of the learner API
 * (learner.h; docs/learner.md §16): pre-training, Act by return
 * conditioning, and the hand-over of the state embedding to the DQN's first
 * trunk layer. The arguments are checked here; the backend's dt ops run the
 * math. The hand-over moves bytes through the state's sections, so it is the
 * same on every backend.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "her.h"
#include "learner.h"
#include "learner_impl.h"
#include "model.h"
#include "seterr.h"

static int dt_on(const learner_t *l, const char *what, char *err, size_t errlen) {
  if (l->cfg.dt_layers > 0 && l->ops->dt_step) return LEARNER_OK;
  seterr(err, errlen, "%s: this trainer has no Decision Transformer (created with dt_layers=0)", what);
  return LEARNER_EINVAL;
}

/* dt_handover=trunk1: W_s [E, S] and b_s [E] of the DT vector become trunk1's
 * weight [H1, S] and bias [H1] (E = H1, checked by the config) in the online
 * and the target network */
static int handover_trunk1(learner_t *l, char *err, size_t errlen) {
  static _Thread_local model_t m; /* ~45 KB: not on the caller's stack */
  model_desc_t d;
  model_desc_from_config(&d, &l->cfg);
  int rc = model_build(&m, &d, err, errlen);
  if (rc) return rc;
  const model_param_t *ws = model_find(&m, "dt.embed_state.weight"), *bs = model_find(&m, "dt.embed_state.bias");
  const model_param_t *wt = model_find(&m, "trunk1.weight"), *bt = model_find(&m, "trunk1.bias");
  if (!ws || !bs || !wt || !bt || model_param_count(ws) != model_param_count(wt) ||
      model_param_count(bs) != model_param_count(bt)) {
    seterr(err, errlen, "dt_handover: the DT's state embedding and trunk1 differ in shape");
    return LEARNER_EINVAL;
  }
  const int64_t nw = model_param_count(ws), nb = model_param_count(bs);
  float *buf = malloc(sizeof(float) * (size_t)(nw + nb));
  if (!buf) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  rc = learner_section_read(l, SEC_DT_PARAMS, ws->offset * 4, nw * 4, buf);
  if (!rc) rc = learner_section_read(l, SEC_DT_PARAMS, bs->offset * 4, nb * 4, buf + nw);
  for (int w = 0; !rc && w < 2; w++) {
    const uint32_t sec = w ? SEC_TARGET : SEC_ONLINE;
    rc = learner_section_write(l, sec, wt->offset * 4, nw * 4, buf);
    if (!rc) rc = learner_section_write(l, sec, bt->offset * 4, nb * 4, buf + nw);
  }
  free(buf);
  if (rc) seterr(err, errlen, "dt_handover: copying the state embedding failed (%s)", learner_strerror(rc));
  return rc;
}

int learner_pretrain_dt(learner_t *l, int n, learner_stop_t *stop, learner_dt_stats_t *st, char *err,
                        size_t errlen) {
  if (n < 1 && l->cfg.dt_layers) {
    if (st) memset(st, 0, sizeof *st);
    seterr(err, errlen, "n: %d is outside [1, %d]", n, LEARNER_MAX_STEPS);
    return LEARNER_EINVAL;
  }
  learner_stop_ctl_t ctl = {&l->stop, stop ? stop->deadline : 0, LEARNER_STOP_NONE};
  int rc = learner_pretrain_dt_ctl(l, n, &ctl, st, err, errlen);
  if (stop) stop->why = ctl.why;
  return rc;
}

int learner_pretrain_dt_ctl(learner_t *l, int n, learner_stop_ctl_t *ctl, learner_dt_stats_t *st, char *err,
                            size_t errlen) {
  learner_dt_stats_t tmp;
  if (!st) st = &tmp;
  memset(st, 0, sizeof *st);
  int rc = dt_on(l, "PretrainDT", err, errlen);
  if (rc) return rc;
  if (n < 0 || n > LEARNER_MAX_STEPS) {
    seterr(err, errlen, "n: %d is outside [1, %d]", n, LEARNER_MAX_STEPS);
    return LEARNER_EINVAL;
  }
  rc = l->ops->dt_step(l->impl, n, ctl, st, err, errlen);
  return learner_dt_after(l, rc, st, err, errlen);
}

/* After a pre-training step that was not finite: whether a return-to-go the
 * windows can take is not finite over dt_rtg_scale. The episodes and the
 * rule are the windows' own: her_rebuild_episodes' bounds, her_eligible's
 * ended and whole episodes, each return-to-go summed in float from its
 * episode's end back as dt_rtg_from sums it. If one is not, err says so,
 * naming the field, after its message: the step did not diverge, its input
 * could not be formed. Reads the replay's rewards and end markers from the
 * backend (the device on CUDA): only on this path. */
static void dt_rtg_diagnose(learner_t *l, char *err, size_t errlen) {
  learner_counters_t k;
  if (l->ops->get_counters(l->impl, &k) || k.replay_size < 1) return;
  const int64_t n = k.replay_size, cap = l->cfg.replay_capacity, head = k.replay_head, total = k.replay_total;
  float *r = malloc((size_t)n * sizeof *r);
  uint8_t *done = malloc((size_t)n), *epend = malloc((size_t)n);
  int64_t *first = malloc((size_t)n * sizeof *first), *last = malloc((size_t)n * sizeof *last);
  if (r && done && epend && first && last && !learner_section_read(l, SEC_R_R, 0, n * 4, r) &&
      !learner_section_read(l, SEC_R_DONE, 0, n, done) && !learner_section_read(l, SEC_R_EPEND, 0, n, epend)) {
    her_rebuild_episodes(done, epend, head, total, n, cap, first, last);
    float g = 0;
    for (int64_t c = total - 1; c >= total - n; c--) {
      const int64_t slot = her_slot(c, head, total, cap);
      if (!her_eligible(first[slot], last[slot], total, n)) continue;
      g = (c == last[slot] ? 0 : g) + r[slot]; /* (0 + r: the bits of dt_rtg_from's r + 0) */
      if (!isfinite(g / l->cfg.dt_rtg_scale)) {
        const size_t at = strlen(err);
        if (!isfinite(g))
          snprintf(err + at, errlen - at, "; the rewards of a stored episode sum past float's range from "
                   "insertion count %lld: its return-to-go cannot be formed", (long long)c);
        else
          snprintf(err + at, errlen - at, "; a stored episode's return-to-go %g (from insertion count %lld) over "
                   "dt_rtg_scale %g overflows float: raise dt_rtg_scale", (double)g, (long long)c,
                   (double)l->cfg.dt_rtg_scale);
        break;
      }
    }
  }
  free(r), free(done), free(epend), free(first), free(last);
}

int learner_dt_after(learner_t *l, int rc, learner_dt_stats_t *st, char *err, size_t errlen) {
  if (rc == LEARNER_EDIVERGED && err && errlen) dt_rtg_diagnose(l, err, errlen);
  if (st->steps_run > 0 && l->cfg.dt_handover == LEARNER_DT_HANDOVER_TRUNK1) {
    learner_counters_t c;
    int r2 = l->ops->get_counters(l->impl, &c);
    if (!r2 && c.step == 0) { /* before the first DQN step only: training is not overwritten */
      char why[256];
      if ((r2 = handover_trunk1(l, why, sizeof why))) {
        seterr(err, errlen, "%s", why);
        return r2;
      }
      st->handed_over = 1;
    }
  }
  return rc;
}

int learner_act_dt(learner_t *l, const learner_dt_window_t *w, int32_t *action, char *err, size_t errlen) {
  int rc = dt_on(l, "policy", err, errlen);
  if (rc) return rc;
  const learner_config_t *c = &l->cfg;
  const int K = c->dt_context, S = c->state_dim, n = w->n;
  if (n < 1 || n > K) {
    seterr(err, errlen, "steps: %d is outside [1, dt_context = %d]", n, K);
    return LEARNER_EINVAL;
  }
  const int32_t A = learner_config_joint_actions(c);
  for (int t = 0; t < n; t++) {
    if (!isfinite(w->rtg[t])) return seterr(err, errlen, "rtg[%d]: not finite", t), LEARNER_EINVAL;
    if (w->timesteps[t] < 0)
      return seterr(err, errlen, "timesteps[%d]: %d is negative", t, w->timesteps[t]), LEARNER_EINVAL;
    if (t < n - 1 && (w->actions[t] < 0 || w->actions[t] >= A))
      return seterr(err, errlen, "actions[%d]: %d is outside [0, %d)", t, w->actions[t], A), LEARNER_EINVAL;
    for (int k = 0; k < S; k++)
      if (!isfinite(w->states[(size_t)t * S + k]))
        return seterr(err, errlen, "states[%d][%d]: not finite", t, k), LEARNER_EINVAL;
  }
  /* one window of K steps, left-padded */
  float *x = calloc((size_t)K * (S + 2), sizeof(float));
  int32_t *ia = calloc((size_t)K * 2, sizeof(int32_t));
  if (!x || !ia) {
    free(x), free(ia);
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  float *states = x, *rtg = x + (size_t)K * S, *mask = rtg + K;
  int32_t *acts = ia, *ts = ia + K;
  const int p = K - n; /* padded steps */
  for (int t = 0; t < n; t++) {
    memcpy(states + (size_t)(p + t) * S, w->states + (size_t)t * S, sizeof(float) * (size_t)S);
    rtg[p + t] = w->rtg[t] / c->dt_rtg_scale;
    if (!isfinite(rtg[p + t])) { /* a finite R-hat over a small scale can overflow */
      free(x), free(ia);
      return seterr(err, errlen, "rtg[%d]: %g / dt_rtg_scale %g is not finite", t, (double)w->rtg[t],
                    (double)c->dt_rtg_scale),
             LEARNER_EINVAL;
    }
    acts[p + t] = t < n - 1 ? w->actions[t] : 0;
    ts[p + t] = w->timesteps[t];
    mask[p + t] = 1;
  }
  rc = l->ops->dt_act(l->impl, states, rtg, acts, ts, mask, action, err, errlen);
  free(x), free(ia);
  return rc;
}
