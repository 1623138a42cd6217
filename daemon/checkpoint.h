/*
 * checkpoint.h — checkpoint files (docs/architecture.md, "Checkpoints"). The file is the learner's
 * state format (kernels/learner.h: magic, version, config hash, sections
 * with CRC32C). It is written to a temporary file in the same directory,
 * fsynced, renamed into place and the directory fsynced, so a crash at any
 * moment leaves either the previous set of checkpoints or the new one, never
 * a torn file under a checkpoint name. Names sort by sequence:
 *   ckpt-<seq:08>-<step:012>-<crc32 of the file:08x>.dqnd
 * The newest `keep` are kept, and a pinned one besides (ckpt_write). Functions here do blocking file I/O: callers
 * run them on a trainer's worker thread, never on the loop or nng threads.
 */
#ifndef DQND_CHECKPOINT_H
#define DQND_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "learner.h"
#include "population.h"

typedef struct ckpt_info {
  char id[96];     /* file name */
  char path[1200];
  uint64_t bytes;
  uint32_t crc32;
  uint64_t seq, step; /* seq is the short id */
  int64_t mtime;
  int pinned; /* the trainer's pinned checkpoint (meta key "pinned"): retention passes it over */
} ckpt_info_t;

enum {
  CKPT_ERR = -1, /* the bytes are not a checkpoint this daemon can read (DATA_LOSS) */
  CKPT_ENOENT = -2,
  CKPT_EACCES = -3,
  CKPT_ENOTREG = -4,
  CKPT_ENOMEM = -5,
  CKPT_ENONFINITE = -6,
  CKPT_EUNSUPPORTED = -7, /* a sound file this build or backend cannot hold (LEARNER_EUNSUPPORTED) */
  CKPT_EDEVICE = -8       /* a sound file the device failed to take (LEARNER_EDEVICE) */
};
/* A learner code of a load (learner_pop_load) as a CKPT code */
int ckpt_load_code(int learner_rc);

int ckpt_mkdirs(const char *dir, char *err, size_t errlen);
/* One daemon per state directory: an exclusive flock on STATE_DIR/dqnd.lock,
 * which holds the owner's pid, kept for the process's life (the descriptor is
 * never closed). 0, or -1 with err naming the directory and, when another
 * dqnd holds it, that daemon's pid. */
int ckpt_lock_state_dir(const char *dir, char *err, size_t errlen);
/* 0; CKPT_ENONFINITE when a member's state is not finite (learner_save
 * refuses it: it would not load), nothing written or pruned; else -1. A
 * population of one writes its learner's state (population.h). The newest
 * `keep` are kept, and the pinned one besides: pin makes this one the pinned
 * one (its id in the meta key "pinned"), and the one pinned before it an
 * ordinary checkpoint again. */
int ckpt_write(const char *dir, learner_pop_t *p, int with_replay, int keep, int pin, ckpt_info_t *out, char *err,
               size_t errlen);
/* id "" = newest; else the file name or the short id (the sequence number,
 * leading zeros optional). 0 or -1 (err: NOT_FOUND-style message). */
int ckpt_find(const char *dir, const char *id, ckpt_info_t *out, char *err, size_t errlen);
/* Every checkpoint in dir, oldest first (free *out), the pinned one marked.
 * 0, or -1 when dir exists but cannot be read. */
int ckpt_list(const char *dir, ckpt_info_t **out, int *n);
/* Reads up to n bytes at off; *got = bytes read. */
int ckpt_read_chunk(const ckpt_info_t *c, uint64_t off, void *buf, size_t n, size_t *got);
/* A learner_read_fn over bytes [pos, end) of a checkpoint's file (ctx: a
 * ckpt_reader_t; learner_pop_member_range walks a population's file so). */
typedef struct {
  const ckpt_info_t *info;
  uint64_t pos, end;
} ckpt_reader_t;
int ckpt_reader(void *ctx, void *buf, size_t n);
/* Builds a learner from a file / memory; nothing else is touched. A file
 * that is not there is CKPT_ENOENT, one we may not read CKPT_EACCES; a sound
 * file the memory, the build or the device cannot take CKPT_ENOMEM,
 * CKPT_EUNSUPPORTED or CKPT_EDEVICE (not the file's fault); else CKPT_ERR. */
/* LoadCheckpoint's daemon-side path, confined: a relative path is taken
 * from state_dir; the path with every symlink resolved must lie inside
 * state_dir or one of the ':'-separated allowed dirs (each resolved too).
 * 0 with the resolved path in out; CKPT_EACCES for anything outside, with
 * the same message whether or not it exists (a client learns nothing about
 * files it may not read); CKPT_ENOENT for a missing file inside. */
int ckpt_path_confine(const char *path, const char *state_dir, const char *allowed, char *out, size_t n, char *err,
                      size_t errlen);
/* 0, or CKPT_ENOMEM (err names replay_capacity) when a population of n
 * learners of config c on backend be would need more memory than that
 * backend has free: the one check (learner_pop_memory_fits) that
 * CreateTrainer, the loaders below and the restore make. */
int ckpt_fits(const learner_config_t *c, int n, learner_backend_t be, char *err, size_t errlen);
/* The loaders read the config first: a learner that would not fit
 * (ckpt_fits) is refused before anything is allocated, as CreateTrainer
 * refuses it. */
int ckpt_load_file(const char *path, learner_backend_t be, learner_pop_t **out, char *err, size_t errlen);
int ckpt_load_mem(const void *data, size_t n, learner_backend_t be, learner_pop_t **out, char *err, size_t errlen);
/* Removes leftover temporary files of an interrupted write. */
void ckpt_clean_tmp(const char *dir);
/* Moves a trainer's directory STATE/<name> out of the way, to
 * STATE/.retired/<name>-<UTC time>-<why>[-k], so that a restarted daemon does
 * not bring the trainer back and a new trainer of that name starts clean;
 * nothing is deleted. 0 with the new directory in newdir (empty when there was
 * nothing to move), or -1. */
int ckpt_retire(const char *state_dir, const char *name, const char *why, char *newdir, size_t n, char *err,
                size_t errlen);
/* The newest STATE/.retired/<name>-<UTC time>-<why>[-k] that ckpt_retire
 * made, into out, and its why ("unloaded", "destroyed", "replaced"): 0, or
 * -1 when there is none. */
int ckpt_find_retired(const char *state_dir, const char *name, char *why, size_t wn, char *out, size_t n);
/* Facts of a trainer kept beside its checkpoints, one small file per key
 * (STATE/<name>/backend, .../config_hash) written atomically: a restart
 * brings the trainer back on the backend it was created with, and keeps
 * CreateTrainer idempotent against the config it was created with (its
 * checkpoints hold the current hyperparameters, not the creation ones). */
int ckpt_write_meta(const char *dir, const char *key, const char *value, char *err, size_t errlen);
int ckpt_read_meta(const char *dir, const char *key, char *value, size_t n);
/* Removes a meta file (durably: the directory is fsynced); 0 also when there was none. */
int ckpt_remove_meta(const char *dir, const char *key, char *err, size_t errlen);

#endif
