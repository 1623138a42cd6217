/* dqnd_ckpt.c — libdqnd's checkpoint calls (save, fetch, load); see dqnd.h. */
#include "dqnd.h"
#include "dqnd_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static int save_checkpoint(dqnd_client_t *c, const char *name, int with_replay, int pin, dqnd_checkpoint_t *out) {
  Dqnd__V1__SaveCheckpoint m = DQND__V1__SAVE_CHECKPOINT__INIT;
  m.name = (char *)name;
  m.with_replay = with_replay;
  m.pin = pin;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_SAVE_CHECKPOINT;
  req.save_checkpoint = &m;
  Dqnd__V1__Reply *rep;
  if (out) memset(out, 0, sizeof *out);
  int rc = dqnd_call(c, &req, &rep);
  if (!rc && rep->result_case != DQND__V1__REPLY__RESULT_CHECKPOINT)
    rc = seterr(c, DQND_EPROTO, "SaveCheckpoint reply without the checkpoint");
  else if (!rc && out)
    ckpt_from_pb(rep->checkpoint, out);
  dqnd_reply_free(rep);
  return rc;
}

int dqnd_save_checkpoint(dqnd_client_t *c, const char *name, int with_replay, dqnd_checkpoint_t *out) {
  return save_checkpoint(c, name, with_replay, 0, out);
}

int dqnd_save_checkpoint_pinned(dqnd_client_t *c, const char *name, int with_replay, dqnd_checkpoint_t *out) {
  return save_checkpoint(c, name, with_replay, 1, out);
}

/* fetch into an existing non-regular file (a pipe, a terminal): no temporary
 * file or rename can apply; the CRC is still checked at the end */
static int fetch_into(dqnd_client_t *c, const char *name, const char *id, FILE *f, const char *what,
                      uint32_t chunk_bytes, dqnd_checkpoint_t *out);

static int fetch_stream(dqnd_client_t *c, const char *name, const char *id, const char *local_path,
                        uint32_t chunk_bytes, dqnd_checkpoint_t *out) {
  FILE *f = fopen(local_path, "wb");
  if (!f) return seterr(c, DQND_EIO, "cannot open %s: %s", local_path, strerror(errno));
  int rc = fetch_into(c, name, id, f, local_path, chunk_bytes, out);
  if (fclose(f) && !rc) rc = seterr(c, DQND_EIO, "close %s: %s", local_path, strerror(errno));
  return rc;
}

static int fetch_into(dqnd_client_t *c, const char *name, const char *id, FILE *f, const char *what,
                      uint32_t chunk_bytes, dqnd_checkpoint_t *out) {
  uint64_t off = 0, total = 0, step = 0, seq = 0;
  uint32_t crc = 0, want_crc = 0;
  char ckid[96] = "";
  snprintf(ckid, sizeof ckid, "%s", id ? id : "");
  int rc = 0;
  do {
    Dqnd__V1__FetchCheckpoint m = DQND__V1__FETCH_CHECKPOINT__INIT;
    m.name = (char *)name;
    m.checkpoint = ckid; /* pin the id after the first chunk: a new save must not switch files */
    m.offset = off;
    m.max_bytes = chunk_bytes;
    m.member_only = client_member(c, &m.member);
    Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
    req.command_case = DQND__V1__REQUEST__COMMAND_FETCH_CHECKPOINT;
    req.fetch_checkpoint = &m;
    Dqnd__V1__Reply *rep;
    rc = dqnd_call(c, &req, &rep);
    if (!rc && (rep->result_case != DQND__V1__REPLY__RESULT_CHUNK || rep->chunk->offset != off))
      rc = seterr(c, DQND_EPROTO, "FetchCheckpoint reply out of order");
    if (!rc) {
      Dqnd__V1__CheckpointChunk *ch = rep->chunk;
      /* the first chunk fixes the file (its id, size and CRC); every later
       * one must agree and stay within it, so a daemon that is not dqnd (or
       * a buggy one) cannot make the fetch write without end */
      if (off == 0) {
        snprintf(ckid, sizeof ckid, "%s", ch->checkpoint);
        total = ch->total, want_crc = ch->crc32;
      } else if (strcmp(ckid, ch->checkpoint) || total != ch->total || want_crc != ch->crc32)
        rc = seterr(c, DQND_EPROTO, "FetchCheckpoint chunk at %llu is of another file", (unsigned long long)off);
      if (!rc && (ch->data.len > total - off || (chunk_bytes && ch->data.len > chunk_bytes)))
        rc = seterr(c, DQND_EPROTO, "FetchCheckpoint chunk of %zu bytes at %llu of %llu", ch->data.len,
                    (unsigned long long)off, (unsigned long long)total);
      if (!rc && ch->data.len == 0 && off < total) rc = seterr(c, DQND_EPROTO, "empty chunk before the end");
      if (!rc && ch->data.len && fwrite(ch->data.data, 1, ch->data.len, f) != ch->data.len)
        rc = seterr(c, DQND_EIO, "write %s: %s", what, strerror(errno));
      if (!rc) {
        crc = learner_crc32(crc, ch->data.data, ch->data.len);
        off += ch->data.len;
      }
    }
    dqnd_reply_free(rep);
  } while (!rc && off < total);
  if (!rc && crc != want_crc) rc = seterr(c, DQND_EPROTO, "checkpoint %s: CRC-32 %08x, expected %08x", ckid, crc, want_crc);
  if (!rc && out) {
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", ckid);
    snprintf(out->path, sizeof out->path, "%s", what);
    out->bytes = total;
    out->crc32 = crc;
    /* ckpt-<seq>-<step>-<crc>.dqnd */
    unsigned long long a, b;
    if (sscanf(ckid, "ckpt-%8llu-%12llu-", &a, &b) == 2) seq = a, step = b;
    out->seq = seq;
    out->step = step;
  }
  return rc;
}

int dqnd_fetch_checkpoint(dqnd_client_t *c, const char *name, const char *id, const char *local_path,
                          uint32_t chunk_bytes, dqnd_checkpoint_t *out) {
  /* A temporary file beside the target (same file system, so the rename is
   * atomic), renamed over it only once every byte is in and checked. A
   * symlink is followed (the file it names is replaced, not the link); a
   * target that exists and is not a regular file (a pipe, /dev/stdout) is
   * written directly. A new file gets 0666 less the umask, as fopen's; one
   * that replaces a file keeps that file's mode. */
  char real[4096];
  const char *target = local_path;
  struct stat st;
  if (stat(local_path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) return fetch_stream(c, name, id, local_path, chunk_bytes, out);
    if (realpath(local_path, real)) target = real;
  } else if (lstat(local_path, &st) == 0 && S_ISLNK(st.st_mode)) {
    /* a link to a file not there yet: the file it names is created */
    snprintf(real, sizeof real, "%s", local_path);
    for (int hops = 0; hops < 40 && lstat(real, &st) == 0 && S_ISLNK(st.st_mode); hops++) {
      char to[4096];
      ssize_t k = readlink(real, to, sizeof to - 1);
      if (k <= 0) break;
      to[k] = 0;
      if (to[0] == '/') snprintf(real, sizeof real, "%s", to);
      else {
        char *slash = strrchr(real, '/');
        char dir[4096] = ".";
        if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - real), real);
        char next[8200];
        snprintf(next, sizeof next, "%s/%s", dir, to);
        snprintf(real, sizeof real, "%.4095s", next);
      }
    }
    target = real;
  }
  /* the temporary file: a file that replaces another keeps that one's mode;
   * a new one gets 0666 less the umask, applied by open() itself (reading
   * the umask would mean setting it, process-wide: another thread's files
   * could be created meanwhile with none) */
  struct stat old;
  const int replaces = stat(target, &old) == 0 && S_ISREG(old.st_mode);
  size_t pl = strlen(target);
  char *tmp = malloc(pl + 32);
  if (!tmp) return seterr(c, DQND_ENOMEM, "out of memory");
  int fd = -1, e = EEXIST;
  for (int tries = 0; fd < 0 && e == EEXIST && tries < 100; tries++) {
    uint64_t r = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL + (uint64_t)tries; /* (getrandom failing: still unique a try) */
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r ^= (uint64_t)time(NULL) << 20;
    snprintf(tmp, pl + 32, "%s.part-%016llx", target, (unsigned long long)r);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, replaces ? 0600 : 0666);
    e = fd < 0 ? errno : 0;
  }
  if (fd < 0) {
    free(tmp);
    return seterr(c, DQND_EIO, "cannot create a temporary file beside %s: %s", local_path, strerror(e));
  }
  if (replaces && fchmod(fd, old.st_mode & 07777)) { /* best effort: the file stays 0600 */
  }
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    unlink(tmp);
    free(tmp);
    return seterr(c, DQND_EIO, "fdopen: %s", strerror(errno));
  }
  int rc = fetch_into(c, name, id, f, tmp, chunk_bytes, out);
  if (!rc && (fflush(f) || fsync(fileno(f)))) rc = seterr(c, DQND_EIO, "flush %s: %s", tmp, strerror(errno));
  if (fclose(f) && !rc) rc = seterr(c, DQND_EIO, "close %s: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, target)) rc = seterr(c, DQND_EIO, "rename to %s: %s", target, strerror(errno));
  if (rc) unlink(tmp); /* never local_path: whatever was there stays */
  free(tmp);
  if (!rc && out) snprintf(out->path, sizeof out->path, "%s", local_path);
  return rc;
}

int dqnd_load_checkpoint_path(dqnd_client_t *c, const char *name, const char *daemon_path, int create,
                              const char *backend) {
  Dqnd__V1__LoadCheckpoint m = DQND__V1__LOAD_CHECKPOINT__INIT;
  m.name = (char *)name;
  m.create = create;
  m.path = (char *)daemon_path;
  m.backend = (char *)(backend ? backend : "");
  m.member_only = client_member(c, &m.member);
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT;
  req.load_checkpoint = &m;
  return call_simple(c, &req);
}

/* The upload's chunk when the caller gives none: 4 MiB, or less where the
 * daemon's max_message_bytes (ServerInfo) would refuse a request that big
 * (a chunk and the request around it: 4 KB for the rest); 4 MiB when the
 * daemon does not say. */
static size_t upload_chunk(dqnd_client_t *c, int *rc) {
  size_t chunk = 4u << 20;
  Dqnd__V1__ServerInfo m = DQND__V1__SERVER_INFO__INIT;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_SERVER_INFO;
  req.server_info = &m;
  Dqnd__V1__Reply *rep = NULL;
  *rc = dqnd_call(c, &req, &rep);
  if (!*rc && rep && rep->result_case == DQND__V1__REPLY__RESULT_SERVER_INFO) {
    const uint64_t mm = rep->server_info->max_message_bytes;
    const uint64_t cap = mm > 8192 ? mm - 4096 : mm / 2;
    if (mm && cap < chunk) chunk = (size_t)(cap ? cap : 1);
  }
  dqnd_reply_free(rep);
  /* UNAVAILABLE (the daemon restarted: decode's notice, said once; or it is
   * going away) is the caller's to hear; any other failure (a daemon without
   * ServerInfo) leaves the default */
  if (*rc != DQND__V1__CODE__UNAVAILABLE) *rc = 0;
  return chunk;
}

int dqnd_load_checkpoint_file(dqnd_client_t *c, const char *name, const char *local_path, int create,
                              const char *backend, uint32_t chunk_bytes) {
  FILE *f = fopen(local_path, "rb");
  if (!f) return seterr(c, DQND_EIO, "cannot open %s", local_path);
  if (fseek(f, 0, SEEK_END)) {
    fclose(f);
    return seterr(c, DQND_EIO, "cannot seek %s", local_path);
  }
  long size = ftell(f);
  rewind(f);
  int prc = 0;
  size_t chunk = chunk_bytes ? chunk_bytes : upload_chunk(c, &prc);
  if (prc) {
    fclose(f);
    return prc;
  }
  uint8_t *buf = malloc(chunk);
  if (!buf || size <= 0) {
    fclose(f);
    free(buf);
    return seterr(c, size <= 0 ? DQND_EIO : DQND_ENOMEM, "%s: empty or unreadable", local_path);
  }
  /* the whole file's CRC first, sent with the last chunk */
  uint32_t crc = 0;
  size_t k;
  while ((k = fread(buf, 1, chunk, f)) > 0) crc = learner_crc32(crc, buf, k);
  rewind(f);
  int rc = 0;
  uint64_t off = 0;
  while (!rc && off < (uint64_t)size) {
    k = fread(buf, 1, chunk, f);
    if (k == 0) {
      rc = seterr(c, DQND_EIO, "read %s failed", local_path);
      break;
    }
    Dqnd__V1__LoadCheckpoint m = DQND__V1__LOAD_CHECKPOINT__INIT;
    m.name = (char *)name;
    m.create = create;
    m.backend = (char *)(backend ? backend : "");
    m.data = (ProtobufCBinaryData){k, buf};
    m.offset = off;
    m.total = (uint64_t)size;
    m.last = off + k == (uint64_t)size;
    m.crc32 = crc;
    m.member_only = client_member(c, &m.member);
    Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
    req.command_case = DQND__V1__REQUEST__COMMAND_LOAD_CHECKPOINT;
    req.load_checkpoint = &m;
    rc = call_simple(c, &req);
    off += k;
  }
  fclose(f);
  free(buf);
  return rc;
}
