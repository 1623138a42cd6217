/*
 * verdict.h — a divergence verdict that outlives a restart
 * (docs/architecture.md, "Restore at start").
 *
 * A trainer whose step diverged stops training and keeps its last good state;
 * a member of a population stops alone. The checkpoint holds that state, not
 * the verdict, so the verdict is kept beside it: STATE/<name>/diverged, one
 * line per diverged member, "<member> <step>" (the step its last good state
 * is at), and "trainer <error>" when the whole trainer stopped (every member
 * diverged: the text commands are refused with). Written atomically
 * (ckpt_write_meta) whenever the set changes, removed when none is left
 * (SetHyperparams, CopyMember or LoadCheckpoint resumed them, and a
 * checkpoint of the resumed state was written: verdict_lifts).
 *
 * At restore, a member's line is applied only when the state restored for it
 * is at that step: a crash that left only an older checkpoint brings back a
 * state that has not diverged, and it trains.
 */
#ifndef DQND_VERDICT_H
#define DQND_VERDICT_H

#include <stddef.h>

#include "population.h"

/* The trainer's worker, after every job (trainer.c): rewrites dir's verdict
 * for trainer `name` when p's diverged members, or error (the trainer's
 * error text when the whole trainer stopped, else ""), differ from what was
 * last written (*written: the trainer's cache, NULL none), or removes it
 * when none diverged. A failed write is logged and tried again after the
 * next job. */
void verdict_sync(const char *dir, const char *name, learner_pop_t *p, const char *error, char **written);

/* 1 when a member that written (the verdict's text) names diverged is no
 * longer diverged in p (SetHyperparams, CopyMember or LoadCheckpoint
 * resumed it), else 0. The worker drops such a line only with a checkpoint
 * of the resumed state (trainer_save syncs the verdict after each one):
 * else a crash in between would restore the state that diverged, with no
 * verdict to stop it. */
int verdict_lifts(const char *written, learner_pop_t *p);

/* Restore (before the trainer is registered): applies dir's verdict to p,
 * the state just loaded for trainer `name`, marking each member whose step
 * matches (learner_pop_mark_diverged). error receives the trainer's error
 * text when every member is diverged and the file names one (else ""); a
 * line that does not apply is logged and the file rewritten without it.
 * *text: what the file now holds (NULL: no file), for t->verdict; where that
 * rewrite failed, a text no verdict has, so that the worker's next
 * verdict_sync writes the file again (else a stale line, with nothing
 * diverged, would stay and stop a member that later reaches its step). */
void verdict_restore(const char *dir, const char *name, learner_pop_t *p, char *error, size_t n, char **text);

#endif
