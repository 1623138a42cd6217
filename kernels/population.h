/*
 * population.h — a population: N learners of one network shape that differ
 * in seed and hyperparameters (the trials of one search), driven as one
 * (docs/population.md). Each member has its own replay, hyperparameters,
 * Philox streams (its seed), statistics, target network and divergence
 * state; a Step advances every member that has not diverged; a state holds
 * every member. A member trained in a population is bit-identical to the
 * same member (seed, hyperparameters, submitted data, calls) trained alone:
 * today each member is a learner of its own (learner.h) stepped in member
 * order, on the CPU and on CUDA alike.
 *
 * Like a learner, a population is driven by one thread; only its stop flag
 * (learner_pop_stop_flag) may be set from another.
 */
#ifndef DQN_POPULATION_H
#define DQN_POPULATION_H

#include <stddef.h>
#include <stdint.h>

#include "learner.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most members a population may have: LEARNER_MAX_POPULATION (learner_types.h). */

typedef struct learner_pop learner_pop_t;

/* N members of config c on one backend. seeds: N seeds, or NULL for
 * c->seed + i (member 0 is then the learner that c alone makes). Every member
 * starts with c->hp. Checks first that all N fit (learner_pop_memory_fits). */
int learner_pop_create(const learner_config_t *c, int n, const uint64_t *seeds, learner_backend_t backend,
                       learner_pop_t **out, char *err, size_t errlen);
void learner_pop_destroy(learner_pop_t *p);
int learner_pop_size(const learner_pop_t *p);
/* Member i's learner, for everything that concerns one member (submit, act,
 * hyperparameters, stats, parameters); NULL when i is outside [0, N). The
 * population owns it: never learner_destroy it, and step it only through
 * learner_pop_step_until. */
learner_t *learner_pop_member(learner_pop_t *p, int i);
/* 0, or LEARNER_EINVAL with err "member: I is outside [0, N)" */
int learner_pop_check_member(const learner_pop_t *p, int i, char *err, size_t errlen);

int64_t learner_pop_memory_estimate(const learner_config_t *c, int n, learner_backend_t be);
int learner_pop_memory_fits(const learner_config_t *c, int n, learner_backend_t be, char *err, size_t errlen);

/* Runs n steps on every member that has not diverged, in member order.
 * (Messages name the member, "member I: ...", in a population of more than
 * one.) First, if such a member holds fewer transitions than a batch, nothing runs:
 * LEARNER_EEMPTY naming it. A member whose step diverges (learner.h: its
 * last good state kept) is marked diverged and skipped from then on; the
 * others go on: the call returns LEARNER_EDIVERGED, err naming the first.
 * Once the stop flag is set or the deadline passes, the running member stops
 * between whole steps and no later member is called: LEARNER_ESTOPPED. st
 * (optional, N entries) receives each member's stats; a member not called
 * (diverged, or after a stop) shows its last stats with steps_run 0. rcs
 * (optional, N entries) receives each member's code (0 when not called). */
int learner_pop_step_until(learner_pop_t *p, int n, learner_stop_t *stop, learner_stats_t *st, int *rcs, char *err,
                           size_t errlen);
/* n Decision Transformer pre-training steps (learner_pretrain_dt) of every
 * member, one after another, with the population's stop flag. Nothing runs
 * unless every member's replay can give a window (LEARNER_EEMPTY naming the
 * member). A member whose step is not finite stops alone (LEARNER_EDIVERGED
 * for the call, the others run on), as does one whose step drew no window
 * (every draw missed its replay's few ended episodes: LEARNER_EEMPTY for the
 * call); the first such member's code and message are the call's, and each
 * member's steps_run says what ran. A stop ends the call (LEARNER_ESTOPPED).
 * st[i]: member i's. */
int learner_pop_pretrain_dt(learner_pop_t *p, int n, learner_stop_t *stop, learner_dt_stats_t *st, char *err,
                            size_t errlen);
/* Member i alone, n steps (continuous training after a submit to it), with
 * the population's stop flag and divergence rule: a diverged member is not
 * stepped (LEARNER_EDIVERGED at once, nothing run); one that diverges now is
 * marked. */
int learner_pop_step_member(learner_pop_t *p, int i, int n, learner_stop_t *stop, learner_stats_t *st, char *err,
                            size_t errlen);
/* The population's stop flag: any thread may set it nonzero; the caller
 * clears it before a step it wants to run. */
volatile int *learner_pop_stop_flag(learner_pop_t *p);
/* 1 when member i diverged (its steps are skipped), else 0; how many have. */
int learner_pop_diverged(const learner_pop_t *p, int i);
int learner_pop_n_diverged(const learner_pop_t *p);
/* Marks member i diverged, as a step that diverged would (its steps skipped
 * until SetHyperparams, CopyMember or a load names it): the daemon restoring
 * a verdict from before a restart onto the state it was given for. */
void learner_pop_mark_diverged(learner_pop_t *p, int i);
/* 1: the members step in the same launches (the CUDA backend, shapes its
 * fused kernels stage; docs/population.md); 0: one after another */
int learner_pop_grouped(const learner_pop_t *p);
/* 1: the last learner_pop_pretrain_dt ran every member's Decision
 * Transformer steps in the same launches; 0: one member after another (the
 * CPU backend, or shapes past one launch's grid) */
int learner_pop_dt_grouped(const learner_pop_t *p);
/* Member i's hyperparameters (learner_set_hparams); a diverged member trains
 * again with them (the way out of a divergence that a too large lr caused). */
int learner_pop_set_hparams(learner_pop_t *p, int i, const learner_hparams_t *hp, char *err, size_t errlen);

/* Exploit and explore (population-based training): member dst becomes a
 * copy of member src's network and optimiser (online and target parameters,
 * prior heads, Adam moments, the step and noisy-Act counters, the last
 * stats), keeping its own seed; with_replay 1 copies src's replay too, else
 * dst keeps its own. Then every float hyperparameter named in factors
 * (nf entries, e.g. "lr", "gamma") is multiplied by its factor, the result
 * checked by learner_hparams_validate: on any error nothing changes. dst no
 * longer counts as diverged. */
typedef struct learner_pop_factor {
  const char *name;
  double factor;
} learner_pop_factor_t;
int learner_pop_copy_member(learner_pop_t *p, int dst, int src, int with_replay, const learner_pop_factor_t *factors,
                            int nf, char *err, size_t errlen);

/* The state of every member. A population of one saves as that learner
 * (learner_save: the file a lone learner writes); N > 1:
 *   "DQNDPOP\0" u32 version (1) u32 flags (0) u64 N
 *   N member states, each exactly what learner_save writes for that member
 *   "DQNDPEND" u64 N
 * learner_pop_load takes either (a learner's state is a population of one);
 * on any error nothing is kept. Members must share every config field but
 * seed and the hyperparameters. */
int learner_pop_save(learner_pop_t *p, int with_replay, learner_write_fn w, void *ctx, char *err, size_t errlen);
int learner_pop_load(learner_read_fn r, void *ctx, learner_backend_t backend, learner_pop_t **out, char *err,
                     size_t errlen);
/* The header and member 0's config (to validate before loading): *n the
 * member count, *with_replay member 0's. */
int learner_pop_peek(learner_read_fn r, void *ctx, learner_config_t *c, int *n, int *with_replay, char *err,
                     size_t errlen);

/* Member i takes the state of src, a learner shaped as the members (seed and
 * hyperparameters may differ: a loaded checkpoint of a lone trainer, or of
 * one member): parameters, prior heads, Adam moments, step and noisy-Act
 * counters, last statistics and hyperparameters, and its replay when src
 * was loaded from a state saved with its replay (an empty one too: the member
 * then starts its replay over, and the population's Steps are refused until it
 * holds a batch again; from a state saved without it member i keeps its own, which is
 * what a member restored to its last good state wants); it keeps its seed, as
 * learner_pop_copy_member does. A diverged member trains again. */
int learner_pop_load_member(learner_pop_t *p, int i, learner_t *src, char *err, size_t errlen);
/* Where member i's state lies in a serialised population state (r reads it
 * from its first byte): *off and *len, its bytes, a learner's state of its
 * own (the whole state when it is a learner's), and *crc32 their CRC-32
 * (learner_crc32). It and each state before it are walked and checked
 * (learner_state_inspect). */
int learner_pop_member_range(learner_read_fn r, void *ctx, int i, uint64_t *off, uint64_t *len, uint32_t *crc32,
                             char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
