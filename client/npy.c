/* npy.c — see npy.h. The header is a Python dict literal; we read the three
 * keys NumPy writes ('descr', 'fortran_order', 'shape') and nothing else. */
#include "npy.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && n) vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

size_t npy_dtype_size(npy_dtype_t t) {
  switch (t) {
  case NPY_F4: case NPY_I4: return 4;
  case NPY_F8: case NPY_I8: return 8;
  case NPY_U1: case NPY_B1: return 1;
  }
  return 0;
}

static const char *dtype_descr(npy_dtype_t t) {
  switch (t) {
  case NPY_F4: return "<f4";
  case NPY_F8: return "<f8";
  case NPY_I4: return "<i4";
  case NPY_I8: return "<i8";
  case NPY_U1: return "|u1";
  case NPY_B1: return "|b1";
  }
  return "?";
}

void npy_free(npy_array_t *a) {
  free(a->data);
  memset(a, 0, sizeof *a);
}

int npy_read(const char *path, npy_array_t *a, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "%s: cannot open", path);
  unsigned char pre[10];
  char *hdr = NULL;
  int rc = -1;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
    fail(err, errlen, "%s: not a .npy file (bad magic)", path);
    goto out;
  }
  size_t hlen;
  if (pre[6] == 1) {
    hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
  } else if (pre[6] == 2 || pre[6] == 3) {
    unsigned char b[2];
    if (fread(b, 1, 2, f) != 2) goto trunc;
    hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)b[0] << 16 | (size_t)b[1] << 24;
  } else {
    fail(err, errlen, "%s: unsupported .npy version %d", path, pre[6]);
    goto out;
  }
  if (hlen > 1 << 20) {
    fail(err, errlen, "%s: header too large", path);
    goto out;
  }
  hdr = calloc(1, hlen + 1);
  if (!hdr || fread(hdr, 1, hlen, f) != hlen) goto trunc;
  char *d = strstr(hdr, "'descr'"), *fo = strstr(hdr, "'fortran_order'"), *sh = strstr(hdr, "'shape'");
  if (!d || !fo || !sh) {
    fail(err, errlen, "%s: header lacks descr/fortran_order/shape", path);
    goto out;
  }
  d = strchr(d + 7, '\'');
  if (!d) goto badhdr;
  static const struct { const char *s; npy_dtype_t t; } types[] = {
      {"'<f4'", NPY_F4}, {"'<f8'", NPY_F8}, {"'<i4'", NPY_I4}, {"'<i8'", NPY_I8},
      {"'|u1'", NPY_U1}, {"'|b1'", NPY_B1}, {"'<u1'", NPY_U1}};
  int found = 0;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (!strncmp(d, types[i].s, strlen(types[i].s))) {
      a->dtype = types[i].t;
      found = 1;
      break;
    }
  if (!found) {
    size_t dl = strcspn(d + 1, "'");
    fail(err, errlen, "%s: dtype '%.*s' is not supported (float32 '<f4', float64 '<f8', int32 '<i4', int64 '<i8', "
                      "uint8 '|u1', bool '|b1'; little-endian)",
         path, (int)(dl < 16 ? dl : 16), d + 1);
    goto out;
  }
  { /* the value right after the key (it may be the header's last: no ',' after it) */
    const char *v = fo + strlen("'fortran_order'");
    while (*v == ' ') v++;
    if (*v++ != ':') goto badhdr;
    while (*v == ' ') v++;
    if (!strncmp(v, "True", 4)) {
      fail(err, errlen, "%s: Fortran-order arrays are not supported", path);
      goto out;
    }
    if (strncmp(v, "False", 5)) goto badhdr;
  }
  char *p = strchr(sh, '(');
  if (!p) goto badhdr;
  p++;
  a->count = 1;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *e;
    long long v = strtoll(p, &e, 10);
    if (e == p || v < 0 || a->ndim == 8) goto badhdr;
    a->shape[a->ndim++] = v;
    if (v && a->count > INT64_MAX / v) goto badhdr;
    a->count *= v;
    p = e;
  }
  /* the data must be in the file: bounding the count by the bytes left keeps
   * count * es (and the conversions' count * 8) from overflowing, which a
   * header claiming 2^62 elements made a small allocation written past (a
   * review find) */
  size_t es = npy_dtype_size(a->dtype);
  long here = ftell(f);
  if (here < 0 || fseek(f, 0, SEEK_END)) goto trunc;
  long end = ftell(f);
  if (end < here || fseek(f, here, SEEK_SET)) goto trunc;
  if ((uint64_t)a->count > (uint64_t)(end - here) / es) {
    fail(err, errlen, "%s: truncated (the header's shape needs %lld elements, the file holds %lld)", path,
         (long long)a->count, (long long)((end - here) / (long)es));
    goto out;
  }
  size_t nbytes = (size_t)a->count * es;
  a->data = malloc(nbytes ? nbytes : 1);
  if (!a->data) {
    fail(err, errlen, "%s: out of memory for %lld elements", path, (long long)a->count);
    goto out;
  }
  if (fread(a->data, 1, nbytes, f) != nbytes) goto trunc;
  rc = 0;
  goto out;
badhdr:
  fail(err, errlen, "%s: malformed header", path);
  goto out;
trunc:
  fail(err, errlen, "%s: truncated", path);
out:
  if (rc) npy_free(a);
  free(hdr);
  fclose(f);
  return rc;
}

int npy_write(const char *path, npy_dtype_t dtype, int ndim, const int64_t *shape, const void *data, char *err,
              size_t errlen) {
  char dict[256];
  int w = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", dtype_descr(dtype));
  int64_t count = 1;
  for (int i = 0; i < ndim; i++) {
    w += snprintf(dict + w, sizeof dict - (size_t)w, "%lld%s", (long long)shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
    count *= shape[i];
  }
  w += snprintf(dict + w, sizeof dict - (size_t)w, "), }");
  /* pad with spaces so that magic + len + header + '\n' is a multiple of 64 */
  size_t total = 10 + (size_t)w + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)w + pad + 1;
  FILE *f = fopen(path, "wb");
  if (!f) return fail(err, errlen, "%s: cannot create", path);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)w, f) == (size_t)w;
  for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  size_t nb = (size_t)count * npy_dtype_size(dtype);
  ok = ok && fwrite(data, 1, nb, f) == nb;
  ok = (fclose(f) == 0) && ok;
  return ok ? 0 : fail(err, errlen, "%s: write failed", path);
}

static double elem(const npy_array_t *a, int64_t i) {
  switch (a->dtype) {
  case NPY_F4: return ((const float *)a->data)[i];
  case NPY_F8: return ((const double *)a->data)[i];
  case NPY_I4: return ((const int32_t *)a->data)[i];
  case NPY_I8: return (double)((const int64_t *)a->data)[i];
  case NPY_U1: case NPY_B1: return ((const uint8_t *)a->data)[i];
  }
  return 0;
}

float *npy_to_f32(const npy_array_t *a) {
  float *o = malloc(sizeof(float) * (size_t)(a->count ? a->count : 1));
  if (o)
    for (int64_t i = 0; i < a->count; i++) o[i] = (float)elem(a, i);
  return o;
}

double *npy_to_f64(const npy_array_t *a) {
  double *o = malloc(sizeof(double) * (size_t)(a->count ? a->count : 1));
  if (o)
    for (int64_t i = 0; i < a->count; i++) o[i] = elem(a, i);
  return o;
}

int npy_to_i32(const npy_array_t *a, int32_t *out) {
  for (int64_t i = 0; i < a->count; i++) {
    double v = elem(a, i);
    if (v != floor(v) || v < INT32_MIN || v > INT32_MAX) return -1;
    out[i] = (int32_t)v;
  }
  return 0;
}
