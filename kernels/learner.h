/*
 * learner.h — the learner API that every backend implements: what the
 * daemon, the tests and the benchmarks drive a learner with. Its vocabulary
 * (config, stats, transitions, limits, the state format's walk) is
 * learner_types.h, which clients include alone.
 *
 * A learner is one branching dueling C51 Double-DQN (docs/learner.md §2-4) with its
 * online and target networks, AdamW state, replay buffer and RNG keys. The
 * daemon and the tests see only this header; kernels/learner.c picks the
 * backend (CPU reference or CUDA) behind it, so nothing outside kernels/
 * includes a backend's headers.
 *
 * Conventions
 * - Every function that can fail returns 0 or a negative LEARNER_E* code and,
 *   where it takes `err`, writes a one-line message naming the offending field
 *   into it (always NUL-terminated, truncated to errlen).
 * - Arrays are row-major float32 / int32, little-endian, owned by the caller.
 * - A learner is not thread-safe: one thread (the trainer's worker) drives it.
 *
 * Shapes: B = batch, S = state_dim, Z = atoms, D = number of branches,
 * n_d = size of branch d, A = prod_d n_d (joint actions, flat index with the
 * first branch most significant: for 9,3,3 a = 9*a0 + 3*a1 + a2).
 */
#ifndef DQN_LEARNER_H
#define DQN_LEARNER_H

#include <stddef.h>
#include <stdint.h>

#include "learner_types.h"
#include "stop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What AUTO resolves to here: CUDA when built and a device is usable, else CPU. */
learner_backend_t learner_backend_default(void);

typedef struct learner learner_t;

int learner_create(const learner_config_t *c, learner_backend_t backend, learner_t **out,
                   char *err, size_t errlen);
void learner_destroy(learner_t *l);
const learner_config_t *learner_config(const learner_t *l);
learner_backend_t learner_backend(const learner_t *l);
/* Bytes of host (CPU) or device (CUDA) memory a learner of this config holds
 * on that backend: the state's tensors from the section registry, plus the
 * backend's workspace. learner_memory_fits compares it with what the backend
 * has free (MemAvailable; the device's free memory): 0, or LEARNER_ENOMEM
 * with err naming replay_capacity. learner_create checks it first. */
int64_t learner_memory_estimate(const learner_config_t *c, learner_backend_t be);
int learner_memory_fits(const learner_config_t *c, learner_backend_t be, char *err, size_t errlen);
/* What learner_memory_fits compares with: bytes the backend may still
 * allocate, -1 when unknown. */
int64_t learner_memory_available(learner_backend_t be);
/* The part of learner_memory_estimate that a population's members share
 * (counted once for all of them: learner_pop_memory_estimate). */
int64_t learner_memory_population_shared(learner_backend_t be);

/* Copies transitions into the replay ring (oldest overwritten when full). New
 * items get the current maximum priority. Validates first; on error nothing
 * is stored. */
int learner_submit(learner_t *l, const learner_transitions_t *t, char *err, size_t errlen);
/* learner_submit for transitions that already passed learner_transitions_validate
 * against this learner's config (the daemon checks on its network thread, so
 * each request is validated once). */
int learner_submit_checked(learner_t *l, const learner_transitions_t *t, char *err, size_t errlen);
/* Runs n training steps. Needs replay_size >= batch (else LEARNER_EEMPTY).
 * Divergence guard, both backends: a step whose global gradient norm (or,
 * on the CPU, batch loss) is not finite changes nothing — no update, no
 * priorities, no target sync, no step count — and the call returns
 * LEARNER_EDIVERGED with st covering the steps that were applied (steps_run)
 * and err naming the step. Parameters change only through applied updates,
 * so a NaN or Inf reaches them only through an update of finite gradients
 * that overflows, which makes the next forward non-finite: the guard stops
 * there (the daemon then checks the kept parameters, trainer.c). */
int learner_step(learner_t *l, int n, learner_stats_t *st, char *err, size_t errlen);

/* Stopping a long step early (the daemon's Cancel, request deadlines and
 * shutdown). Between steps, learner_step_until looks at the learner's stop
 * flag (learner_stop_flag: any thread may set it to nonzero at any time; the
 * caller clears it before a step it wants to run) and at the deadline; once
 * either fires it runs no further step and returns LEARNER_ESTOPPED, st
 * covering the steps that ran (steps_run < n) and stop->why saying which.
 * The state is always that of a whole number of steps: on the CPU the check
 * comes before each step; on CUDA before each group of 16 graph replays is
 * launched and while it waits for one (at most two groups are in flight);
 * once it fires, the replays still queued read a halt word in the
 * gradient-norm stage and, halted, change nothing (as a diverged step changes
 * nothing). learner_step is learner_step_until with no
 * deadline: it too stops on the flag. */
int learner_step_until(learner_t *l, int n, learner_stop_t *stop, learner_stats_t *st, char *err, size_t errlen);
volatile int *learner_stop_flag(learner_t *l);
/* Actions for n states. noisy = 0: greedy with the mean weights; noisy = 1:
 * fresh NoisyNet noise (one draw per call). q (optional) receives [n, sum n_d]
 * per-branch Q values, branch after branch. */
int learner_act(learner_t *l, const float *states, int n, int noisy, int32_t *actions, float *q,
                char *err, size_t errlen);
/* learner_act with the ensemble's outputs (below), states checked finite. */
int learner_act_episode(learner_t *l, const float *states, int n, int noisy, int64_t episode, int32_t *actions,
                        float *q, float *q_var, char *err, size_t errlen);
/* learner_act_episode for 1..2^20 states already checked finite, with the
 * ensemble's outputs: q receives the mean over the K heads, q_var
 * (optional, [n, sum n_d]) the variance over heads (divided by K; 0 when K is
 * 1), and the actions follow act_select. Thompson acts greedily with head
 * philox(seed, ACT_HEAD stream, episode) mod K: one head per episode, chosen
 * again for every request naming that episode. learner_act is episode 0. */
int learner_act_checked(learner_t *l, const float *states, int n, int noisy, int64_t episode, int32_t *actions,
                        float *q, float *q_var, char *err, size_t errlen);
/* tau <= 0: hard copy; else target = tau*online + (1-tau)*target. */
int learner_sync_target(learner_t *l, float tau);
void learner_get_hparams(const learner_t *l, learner_hparams_t *hp);
int learner_set_hparams(learner_t *l, const learner_hparams_t *hp, char *err, size_t errlen);
int learner_get_stats(const learner_t *l, learner_stats_t *st);

/* Parameters in the flat layout of net_layout.h (nn.Linear order:
 * weight [out,in] then bias [out]; NoisyNet layers add sigma_w, sigma_b). */
int learner_get_params(const learner_t *l, int which /*0 online, 1 target*/, float *dst, int64_t n);
int learner_set_params(learner_t *l, int which, const float *src, int64_t n);
/* 1 when every online and target parameter is finite, 0 when one is not, or
 * a LEARNER_E* code (the daemon's divergence check). */
int learner_params_finite(learner_t *l);
/* learner_params_finite plus both Adam moments (the second non-negative),
 * the DT's too: what a state must be to be saved (the daemon's save checks
 * its members with it; a load checks the same sections as it reads them) */
int learner_state_finite(learner_t *l);

/* Copies replay items [first, first+n) (ring positions, 0 <= first, first+n
 * <= replay size) into the given arrays (any may be NULL). */
int learner_read_replay(learner_t *l, int64_t first, int64_t n, float *states, int32_t *actions, float *rewards,
                        float *next_states, uint8_t *dones, int64_t *episode_ids);

/* Complete state, streamed through a callback so a 1M-transition replay never
 * needs a second copy in memory. Format (all little-endian):
 *   "DQNDLRN\0" u32 version u32 flags u64 config_hash
 *   sections: u32 tag, u32 0, u64 len, payload, u32 crc32c(payload)
 *   last section: tag END, len 0.
 * learner_load builds a new learner and fills it; on any error it destroys it
 * and returns the error: nothing else is touched. */
/* learner_save returns LEARNER_EDIVERGED, with nothing after the bad chunk
 * written, for a state learner_load would refuse: a parameter or an Adam
 * moment that is not finite, or a negative second moment. */
int learner_save(learner_t *l, int with_replay, learner_write_fn w, void *ctx, char *err, size_t errlen);
int learner_load(learner_read_fn r, void *ctx, learner_backend_t backend, learner_t **out,
                 char *err, size_t errlen);
/* Reads only the header and config section (to validate before loading). */
int learner_peek_config(learner_read_fn r, void *ctx, learner_config_t *c, int *with_replay,
                        char *err, size_t errlen);

/* ---- the Decision Transformer (docs/learner.md §16; a config with dt_layers > 0): its
 * stats and Act's window are learner_types.h's */

/* n pre-training steps (1..LEARNER_MAX_STEPS) on windows of the replay's
 * whole ended episodes. Stops as learner_step_until does (LEARNER_ESTOPPED,
 * st covering the steps that ran); LEARNER_EEMPTY when the replay holds no
 * whole ended episode (nothing changes); LEARNER_EDIVERGED when a step's
 * loss or norm is not finite (it is not applied). With dt_handover=trunk1
 * and no DQN step taken yet, the state embedding (W_s, b_s) then becomes
 * the online and target networks' first trunk layer. */
int learner_pretrain_dt(learner_t *l, int n, learner_stop_t *stop, learner_dt_stats_t *st, char *err,
                        size_t errlen);
/* The action return conditioning picks for the window's last step (per
 * branch the argmax of the DT's logits, the lowest index on a tie). Checks
 * the window first: LEARNER_EINVAL names the field and step. */
int learner_act_dt(learner_t *l, const learner_dt_window_t *w, int32_t *action, char *err, size_t errlen);

/* 1 if the CUDA backend is compiled in and a device is usable. */
int learner_cuda_available(char *name, size_t namelen);
/* The CUDA device's memory in use (total minus free: every process's, as
 * nvidia-smi shows) and in total: 0, LEARNER_EUNSUPPORTED with no CUDA in
 * this build, LEARNER_EDEVICE when the query fails. Cheap (cudaMemGetInfo:
 * it does not wait for the device's work), but in a process with no CUDA
 * context yet it creates one, which holds device memory: call it only once
 * a learner runs on CUDA (the daemon's metrics do). */
int learner_device_memory(int64_t *used, int64_t *total);

#ifdef __cplusplus
}
#endif
#endif
