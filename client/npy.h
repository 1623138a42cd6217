/*
 * npy.h — read and write NumPy .npy files (format versions 1.0-3.0, C order,
 * little-endian): the way `dqnctl` takes transitions and the golden cases
 * travel. Bad files get an error naming what is wrong; nothing aborts.
 */
#ifndef DQND_NPY_H
#define DQND_NPY_H

#include <stddef.h>
#include <stdint.h>

typedef enum { NPY_F4, NPY_F8, NPY_I4, NPY_I8, NPY_U1, NPY_B1 } npy_dtype_t;

typedef struct npy_array {
  npy_dtype_t dtype;
  int ndim;
  int64_t shape[8];
  int64_t count;   /* product of shape */
  void *data;      /* count elements of dtype, owned */
} npy_array_t;

/* 0 on success; else -1 and a message in err. */
int npy_read(const char *path, npy_array_t *a, char *err, size_t errlen);
int npy_write(const char *path, npy_dtype_t dtype, int ndim, const int64_t *shape, const void *data, char *err,
              size_t errlen);
void npy_free(npy_array_t *a);
/* Converting copies (any numeric dtype); NULL on out of memory. */
float *npy_to_f32(const npy_array_t *a);
double *npy_to_f64(const npy_array_t *a);
/* Integer conversion; -1 if a float element is not integral or out of int32 range. */
int npy_to_i32(const npy_array_t *a, int32_t *out);
size_t npy_dtype_size(npy_dtype_t t);

#endif
