/* checkpoint.c — see checkpoint.h. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* directory p (its parent's entry made durable when it is new: a new
 * trainer's directory must survive a power loss as its checkpoints do) */
static int mkdir_durable(char *p, char *err, size_t errlen) {
  if (mkdir(p, 0750)) return errno == EEXIST ? 0 : fail(err, errlen, "mkdir %s: %s", p, strerror(errno));
  char *slash = strrchr(p, '/');
  int rc;
  if (!slash) rc = fsync_dir(".");
  else if (slash == p) rc = fsync_dir("/");
  else {
    *slash = 0;
    rc = fsync_dir(p);
    *slash = '/';
  }
  return rc ? fail(err, errlen, "fsync the directory holding %s: %s", p, strerror(errno)) : 0;
}

int ckpt_mkdirs(const char *dir, char *err, size_t errlen) {
  char p[1200];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir_durable(p, err, errlen)) return -1;
    *s = '/';
  }
  return mkdir_durable(p, err, errlen);
}

int ckpt_lock_state_dir(const char *dir, char *err, size_t errlen) {
  char path[1300];
  snprintf(path, sizeof path, "%.1200s/dqnd.lock", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return fail(err, errlen, "%s: cannot open %s: %s", dir, path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB)) {
    const int e = errno;
    char pid[32] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    if (n > 0) pid[n] = 0, pid[strcspn(pid, "\n")] = 0;
    if (e == EWOULDBLOCK)
      return fail(err, errlen, "%s is in use by another dqnd (pid %s): one daemon per state directory; stop it, or "
                  "give this one another --state-dir", dir, pid[0] ? pid : "unknown");
    return fail(err, errlen, "%s: cannot lock %s: %s", dir, path, strerror(e));
  }
  char pid[32];
  int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) || pwrite(fd, pid, (size_t)len, 0) != len) {
    const int e = errno;
    close(fd);
    return fail(err, errlen, "%s: cannot write %s: %s", dir, path, strerror(e));
  }
  return 0; /* fd stays open: the lock lasts as long as the process */
}

static int parse_name(const char *name, ckpt_info_t *c) {
  unsigned long long seq, step;
  unsigned crc;
  int end = 0;
  if (sscanf(name, "ckpt-%8llu-%12llu-%8x.dqnd%n", &seq, &step, &crc, &end) != 3 || name[end] != 0 ||
      strlen(name) != 5 + 8 + 1 + 12 + 1 + 8 + 5)
    return -1;
  c->seq = seq;
  c->step = step;
  c->crc32 = crc;
  snprintf(c->id, sizeof c->id, "%s", name);
  return 0;
}

/* All checkpoints in dir, sorted by sequence (oldest first). */
int ckpt_list(const char *dir, ckpt_info_t **out, int *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -1;
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    ckpt_info_t c;
    memset(&c, 0, sizeof c);
    if (parse_name(e->d_name, &c)) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      ckpt_info_t *q = realloc(*out, sizeof **out * (size_t)cap);
      if (!q) break;
      *out = q;
    }
    snprintf(c.path, sizeof c.path, "%s/%s", dir, c.id);
    struct stat st;
    if (stat(c.path, &st) == 0) {
      c.bytes = (uint64_t)st.st_size;
      c.mtime = (int64_t)st.st_mtime;
    }
    (*out)[(*n)++] = c;
  }
  closedir(d);
  char pinned[96];
  if (ckpt_read_meta(dir, "pinned", pinned, sizeof pinned) == 0)
    for (int i = 0; i < *n; i++) (*out)[i].pinned = !strcmp((*out)[i].id, pinned);
  for (int i = 1; i < *n; i++) /* insertion sort: few files */
    for (int j = i; j > 0 && (*out)[j - 1].seq > (*out)[j].seq; j--) {
      ckpt_info_t t = (*out)[j];
      (*out)[j] = (*out)[j - 1];
      (*out)[j - 1] = t;
    }
  return 0;
}

void ckpt_clean_tmp(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, ".ckpt-", 6) && strstr(e->d_name, ".tmp")) {
      char p[1200];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
}

typedef struct {
  FILE *f;
  uint32_t crc;
  uint64_t bytes;
  int err; /* the errno of a failed write (ENOSPC: the message says so) */
} wctx_t;

static int file_write(void *ctx, const void *buf, size_t n) {
  wctx_t *w = ctx;
  if (fwrite(buf, 1, n, w->f) != n) {
    w->err = errno ? errno : EIO;
    return -1;
  }
  w->crc = learner_crc32(w->crc, buf, n);
  w->bytes += n;
  return 0;
}

int ckpt_write(const char *dir, learner_pop_t *p, int with_replay, int keep, int pin, ckpt_info_t *out, char *err,
               size_t errlen) {
  if (ckpt_mkdirs(dir, err, errlen)) return -1;
  ckpt_info_t *all;
  int n;
  if (ckpt_list(dir, &all, &n)) return fail(err, errlen, "cannot read %s: %s", dir, strerror(errno));
  uint64_t seq = n ? all[n - 1].seq + 1 : 1;
  free(all);
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s/.ckpt-XXXXXX.tmp", dir);
  int fd = mkstemps(tmp, 4);
  if (fd < 0) return fail(err, errlen, "create %s: %s", tmp, strerror(errno));
  errno = 0;
  wctx_t w = {fdopen(fd, "wb"), 0, 0, 0};
  if (!w.f) {
    close(fd);
    unlink(tmp);
    return fail(err, errlen, "fdopen: %s", strerror(errno));
  }
  char lerr[256];
  int rc = learner_pop_save(p, with_replay, file_write, &w, lerr, sizeof lerr);
  if (rc && w.err) fail(err, errlen, "writing checkpoint %s: %s", tmp, strerror(w.err));
  else if (rc) fail(err, errlen, "writing checkpoint: %s", lerr);
  if (!rc && (fflush(w.f) || fsync(fd))) rc = fail(err, errlen, "flush %s: %s", tmp, strerror(errno));
  if (fclose(w.f) && !rc) rc = fail(err, errlen, "close %s: %s", tmp, strerror(errno));
  if (rc) {
    unlink(tmp);
    return rc == LEARNER_EDIVERGED ? CKPT_ENONFINITE : -1;
  }
  learner_stats_t st;
  learner_get_stats(learner_pop_member(p, 0), &st); /* the name's step: member 0's */
  ckpt_info_t c;
  memset(&c, 0, sizeof c);
  snprintf(c.id, sizeof c.id, "ckpt-%08" PRIu64 "-%012" PRIu64 "-%08x.dqnd", (uint64_t)(seq % 100000000ULL),
           (uint64_t)(st.step % 1000000000000ULL), w.crc);
  snprintf(c.path, sizeof c.path, "%s/%s", dir, c.id);
  c.bytes = w.bytes;
  c.crc32 = w.crc;
  c.seq = seq;
  c.step = st.step;
  if (rename(tmp, c.path)) {
    unlink(tmp);
    return fail(err, errlen, "rename to %s: %s", c.path, strerror(errno));
  }
  if (fsync_dir(dir)) return fail(err, errlen, "fsync %s: %s", dir, strerror(errno));
  if (pin && ckpt_write_meta(dir, "pinned", c.id, err, errlen)) return -1; /* written, not pinned: an error */
  c.pinned = pin;
  /* keep the newest `keep`, and the pinned one besides */
  if (ckpt_list(dir, &all, &n) == 0) {
    int unpinned = 0;
    for (int i = 0; i < n; i++) unpinned += !all[i].pinned;
    for (int i = 0; i < n && unpinned > keep; i++)
      if (!all[i].pinned) unlink(all[i].path), unpinned--;
    free(all);
  }
  if (out) *out = c;
  return 0;
}

int ckpt_find(const char *dir, const char *id, ckpt_info_t *out, char *err, size_t errlen) {
  ckpt_info_t *all;
  int n;
  if (ckpt_list(dir, &all, &n)) return fail(err, errlen, "cannot read %s", dir);
  int found = -1;
  char *end;
  unsigned long long seq = strtoull(id, &end, 10);
  int numeric = id[0] >= '0' && id[0] <= '9' && !*end;
  for (int i = 0; i < n; i++)
    if (!id[0] || !strcmp(all[i].id, id) || (numeric && all[i].seq == seq)) found = i;
  if (found >= 0) *out = all[found];
  free(all);
  if (found < 0)
    return fail(err, errlen,
                id[0] ? "checkpoint: '%s' not found (dqnctl checkpoints lists them)" : "checkpoint: none written yet%s",
                id);
  return 0;
}

int ckpt_read_chunk(const ckpt_info_t *c, uint64_t off, void *buf, size_t n, size_t *got) {
  *got = 0;
  int fd = open(c->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW); /* as the loaders: never through a link */
  if (fd < 0) return -1;
  while (*got < n) {
    ssize_t k = pread(fd, (char *)buf + *got, n - *got, (off_t)(off + *got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    *got += (size_t)k;
  }
  close(fd);
  return 0;
}

int ckpt_reader(void *ctx, void *buf, size_t n) {
  ckpt_reader_t *r = ctx;
  size_t got = 0;
  if (r->pos + n > r->end || ckpt_read_chunk(r->info, r->pos, buf, n, &got) || got != n) return -1;
  r->pos += n;
  return 0;
}

static int file_read(void *ctx, void *buf, size_t n) { return fread(buf, 1, n, ctx) == n ? 0 : -1; }

/* 1 when the resolved path p lies in the resolved directory of root */
static int inside(const char *p, const char *root, size_t rootlen) {
  char dir[PATH_MAX], r[PATH_MAX];
  snprintf(dir, sizeof dir, "%.*s", (int)rootlen, root);
  if (!realpath(dir, r)) return 0;
  size_t k = strlen(r);
  if (k == 1) return 1; /* "/" */
  return !strncmp(p, r, k) && p[k] == '/';
}

int ckpt_path_confine(const char *path, const char *state_dir, const char *allowed, char *out, size_t n, char *err,
                      size_t errlen) {
  char full[PATH_MAX + 8], res[PATH_MAX];
  if (path[0] == '/') snprintf(full, sizeof full, "%s", path);
  else if (snprintf(full, sizeof full, "%s/%s", state_dir, path) >= (int)sizeof full)
    return fail(err, errlen, "path: longer than %d bytes", PATH_MAX), CKPT_EACCES;
  int missing = 0;
  if (!realpath(full, res)) {
    /* a file that does not exist: judge by its directory, so a missing file
     * inside is NOT_FOUND and one outside is refused like any other */
    char *slash = strrchr(full, '/');
    if (errno != ENOENT || !slash) goto denied;
    *slash = 0;
    char dir[PATH_MAX];
    if (!realpath(full[0] ? full : "/", dir)) goto denied;
    *slash = '/';
    if (snprintf(res, sizeof res, "%s%s", strcmp(dir, "/") ? dir : "", slash) >= (int)sizeof res) goto denied;
    missing = 1;
  }
  int ok = inside(res, state_dir, strlen(state_dir));
  for (const char *d = allowed; !ok && d && *d;) {
    size_t k = strcspn(d, ":");
    if (k) ok = inside(res, d, k);
    d += k + (d[k] == ':');
  }
  if (!ok) goto denied;
  if (missing) return fail(err, errlen, "path: %s does not exist", path), CKPT_ENOENT;
  snprintf(out, n, "%s", res);
  return 0;
denied:
  return fail(err, errlen,
              "path: %s is not inside the state directory or a directory of checkpoint-dirs (the daemon reads "
              "checkpoints only there; upload a local file instead)",
              path),
         CKPT_EACCES;
}

int ckpt_load_code(int learner_rc) {
  switch (learner_rc) {
  case LEARNER_OK: return 0;
  case LEARNER_ENOMEM: return CKPT_ENOMEM;
  case LEARNER_EUNSUPPORTED: return CKPT_EUNSUPPORTED;
  case LEARNER_EDEVICE: return CKPT_EDEVICE;
  default: return CKPT_ERR;
  }
}

int ckpt_fits(const learner_config_t *c, int n, learner_backend_t be, char *err, size_t errlen) {
  return learner_pop_memory_fits(c, n, be, err, errlen) ? CKPT_ENOMEM : 0;
}

int ckpt_load_file(const char *path, learner_backend_t be, learner_pop_t **out, char *err, size_t errlen) {
  /* O_NONBLOCK: a FIFO (or a device) must not block the admin worker in
   * open(); only a regular file is read */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    int e = errno;
    fail(err, errlen, "path: cannot open %s: %s", path, strerror(e));
    return e == ENOENT || e == ENOTDIR ? CKPT_ENOENT : (e == EACCES || e == EPERM ? CKPT_EACCES : CKPT_ERR);
  }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    fail(err, errlen, "path: %s is not a regular file", path);
    return CKPT_ENOTREG;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return fail(err, errlen, "path: cannot read %s: %s", path, strerror(errno));
  }
  learner_config_t cfg;
  int npop, wr, rc = learner_pop_peek(file_read, f, &cfg, &npop, &wr, err, errlen);
  if (!rc && ckpt_fits(&cfg, npop, be, err, errlen)) {
    fclose(f);
    return CKPT_ENOMEM;
  }
  if (!rc && fseek(f, 0, SEEK_SET)) rc = fail(err, errlen, "path: cannot rewind %s: %s", path, strerror(errno));
  if (!rc) rc = ckpt_load_code(learner_pop_load(file_read, f, be, out, err, errlen));
  else rc = CKPT_ERR;
  if (!rc && fgetc(f) != EOF) { /* bytes after the end section: not a file this daemon wrote */
    learner_pop_destroy(*out);
    *out = NULL;
    fail(err, errlen, "path: %s has bytes after its end section", path);
    rc = CKPT_ERR;
  }
  fclose(f);
  return rc;
}

typedef struct {
  const unsigned char *p;
  size_t n, pos;
} mctx_t;

static int mem_read(void *ctx, void *buf, size_t n) {
  mctx_t *m = ctx;
  if (m->pos + n > m->n) return -1;
  memcpy(buf, m->p + m->pos, n);
  m->pos += n;
  return 0;
}

int ckpt_load_mem(const void *data, size_t n, learner_backend_t be, learner_pop_t **out, char *err, size_t errlen) {
  mctx_t m = {data, n, 0};
  learner_config_t cfg;
  int npop, wr, rc = learner_pop_peek(mem_read, &m, &cfg, &npop, &wr, err, errlen);
  if (rc) return -1;
  if (ckpt_fits(&cfg, npop, be, err, errlen)) return CKPT_ENOMEM;
  m.pos = 0;
  rc = ckpt_load_code(learner_pop_load(mem_read, &m, be, out, err, errlen));
  if (!rc && m.pos != n) {
    learner_pop_destroy(*out);
    *out = NULL;
    return fail(err, errlen, "data: %zu trailing bytes after the checkpoint", n - m.pos);
  }
  return rc;
}

int ckpt_retire(const char *state_dir, const char *name, const char *why, char *newdir, size_t n, char *err,
                size_t errlen) {
  if (newdir && n) newdir[0] = 0;
  char from[1200], base[1200], to[1300];
  snprintf(from, sizeof from, "%s/%s", state_dir, name);
  struct stat st;
  if (lstat(from, &st)) return errno == ENOENT ? 0 : fail(err, errlen, "stat %s: %s", from, strerror(errno));
  snprintf(base, sizeof base, "%s/.retired", state_dir);
  if (ckpt_mkdirs(base, err, errlen)) return -1;
  time_t now = time(NULL);
  struct tm tm;
  char stamp[32] = "0";
  if (gmtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  for (int k = 1; k < 1000; k++) {
    if (k == 1) snprintf(to, sizeof to, "%s/%s-%s-%s", base, name, stamp, why);
    else snprintf(to, sizeof to, "%s/%s-%s-%s-%d", base, name, stamp, why, k);
    if (lstat(to, &st) == 0) continue;
    if (rename(from, to)) return fail(err, errlen, "rename %s to %s: %s", from, to, strerror(errno));
    if (fsync_dir(base) || fsync_dir(state_dir)) return fail(err, errlen, "fsync %s: %s", state_dir, strerror(errno));
    if (newdir && n) snprintf(newdir, n, "%s", to);
    return 0;
  }
  return fail(err, errlen, "%s: too many retired directories named %s-%s", base, name, stamp);
}

int ckpt_find_retired(const char *state_dir, const char *name, char *why, size_t wn, char *out, size_t n) {
  char base[1200];
  snprintf(base, sizeof base, "%s/.retired", state_dir);
  DIR *d = opendir(base);
  if (!d) return -1;
  const size_t nl = strlen(name);
  char best[300] = "";
  struct dirent *e;
  while ((e = readdir(d))) {
    /* <name>-<YYYYMMDDTHHMMSSZ>-<why>[-k], exactly: "a-b-..." is trainer a-b's, not a's */
    const char *s = e->d_name;
    if (strncmp(s, name, nl) || s[nl] != '-') continue;
    const char *st = s + nl + 1;
    int ok = strlen(st) > 17 && st[8] == 'T' && st[15] == 'Z' && st[16] == '-';
    for (int i = 0; ok && i < 15; i++) ok = i == 8 || (st[i] >= '0' && st[i] <= '9');
    if (ok && (!best[0] || strcmp(st, best + nl + 1) > 0)) snprintf(best, sizeof best, "%s", s); /* stamps sort */
  }
  closedir(d);
  if (!best[0]) return -1;
  snprintf(out, n, "%s/%s", base, best);
  const char *w = best + nl + 1 + 17;
  snprintf(why, wn, "%.*s", (int)strcspn(w, "-"), w);
  return 0;
}

int ckpt_write_meta(const char *dir, const char *key, const char *value, char *err, size_t errlen) {
  if (ckpt_mkdirs(dir, err, errlen)) return -1;
  char tmp[1200], path[1200];
  snprintf(tmp, sizeof tmp, "%.1100s/.%s.tmp", dir, key);
  snprintf(path, sizeof path, "%.1100s/%s", dir, key);
  FILE *f = fopen(tmp, "w");
  if (!f) return fail(err, errlen, "create %s: %s", tmp, strerror(errno));
  int bad = fprintf(f, "%s\n", value) < 0;
  bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path)) {
    unlink(tmp);
    return fail(err, errlen, "write %s: %s", path, strerror(errno));
  }
  return fsync_dir(dir) ? fail(err, errlen, "fsync %s: %s", dir, strerror(errno)) : 0;
}

int ckpt_remove_meta(const char *dir, const char *key, char *err, size_t errlen) {
  char path[1200];
  snprintf(path, sizeof path, "%.1100s/%s", dir, key);
  if (unlink(path) && errno != ENOENT) return fail(err, errlen, "remove %s: %s", path, strerror(errno));
  return fsync_dir(dir) && errno != ENOENT ? fail(err, errlen, "fsync %s: %s", dir, strerror(errno)) : 0;
}

int ckpt_read_meta(const char *dir, const char *key, char *value, size_t n) {
  char path[1200];
  snprintf(path, sizeof path, "%.1100s/%s", dir, key);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[64] = "";
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  line[strcspn(line, "\n")] = 0;
  if (!ok || !line[0]) return -1;
  snprintf(value, n, "%s", line);
  return 0;
}
