/*
 * generic_loss.cu — the generic loss and gradient (generic_loss.cuh): mirrors
 * dqn_loss_grad_f32 (kernels/cpu/loss_impl.h) step by step with plain
 * kernels: effective weights -> forward online [s; s'] and target s'
 * (generic_forward.cu) -> per-sample target distribution, cross-entropy and
 * dlogits, branch by branch -> backward through the heads and the trunk
 * (linear_backward, lrelu_backward) -> NoisyNet sigma gradients. The
 * training step runs it for the shapes the fused loss kernel cannot stage
 * (step_loss.cu: over 48 KB of shared memory per sample), and the tests hold it
 * to the CPU beside the phases.
 *
 * Shapes: B batch, S state, Z atoms, D branches, n_d actions; dV [B, Z],
 * dA [B, n_d Z] per branch, dh [B, H2] (accumulates over the value head and
 * every branch); every parameter gradient overwritten once.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arena.cuh"
#include "cuda_check.h"
#include "c51.cuh"
#include "generic_loss.cuh"

// kernels

/* sigma gradients from the effective-weight gradient (already in the mu slots) */
__global__ void noisy_grad_kernel(const float *__restrict__ gw, const float *__restrict__ gb,
                                  const float *__restrict__ fi, const float *__restrict__ fo, float *__restrict__ gsw,
                                  float *__restrict__ gsb, int in, int out) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < in * out) {
    int o = k / in, i = k % in;
    gsw[k] = gw[k] * (fo[o] * fi[i]);
  }
  if (k < out) gsb[k] = gb[k] * fo[k];
}

/* db[n] = sum_r dY[r, n]: row chunk z (blockIdx.y) summed in order into
 * out[z][n]; with one chunk, out is db itself */
__global__ void colsum_kernel(const float *__restrict__ Y, float *__restrict__ out, int rows, int N, int chunk) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  int r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float s = 0.0f;
  for (int r = r0; r < r1; r++) s += Y[(size_t)r * N + n];
  out[(size_t)blockIdx.y * N + n] = s;
}

__global__ void colsum_final_kernel(const float *__restrict__ part, float *__restrict__ db, int S, int N) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  float s = 0.0f;
  for (int z = 0; z < S; z++) s += part[(size_t)z * N + n];
  db[n] = s;
}

/* dh *= lrelu'(a) */
__global__ void lrelu_backward_kernel(float *__restrict__ dh, const float *__restrict__ a, size_t n, float slope) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && !(a[i] > 0.0f)) dh[i] *= slope;
}

/* One block per sample i, one branch d: Double-DQN action, projected target,
 * cross-entropy, dlogits -> dV (+=) and dA_d. The projection is a gather:
 * thread z adds the contributions of source atoms j in ascending j, which is
 * the order in which c51_project's scatter adds them, so each m[z] gets the
 * same sum; the three short reductions (CE, Q, sum m) stay serial in index
 * order. Shared: q[n] (n <= 4096) after 6 arrays of Z. */
__global__ void c51_loss_branch_kernel(const float *__restrict__ lp_on, const float *__restrict__ lp_tg,
                                       const int32_t *__restrict__ a, const float *__restrict__ r,
                                       const float *__restrict__ done, const float *__restrict__ w, int B, int d,
                                       int D, int n, int Z, int radix_after, float gamma_arg,
                                       const float *__restrict__ gamma_dev, const float *__restrict__ gdisc,
                                       float vmin, float vmax,
                                       int double_dqn, float *__restrict__ dV, float *__restrict__ dA,
                                       float *__restrict__ loss_i, float *__restrict__ qsum_i,
                                       int32_t *__restrict__ best_out) {
  extern __shared__ float sh[];
  float *m = sh, *pj = sh + Z, *bj = sh + 2 * Z, *ez = sh + 3 * Z, *g = sh + 4 * Z, *q = sh + 6 * Z;
  int *lj = (int *)(sh + 5 * Z);
  __shared__ int best_s, ad_s;
  __shared__ float c_s, msum_s;
  int i = blockIdx.x, nz = n * Z;
  float dz = (vmax - vmin) / (float)(Z - 1);
  const float *lp_s = lp_on + (size_t)i * nz;          /* online, s */
  const float *lp_s2 = lp_on + ((size_t)B + i) * nz;   /* online, s' */
  const float *lt_s2 = lp_tg + (size_t)i * nz;         /* target, s' */
  const float *sel = double_dqn ? lp_s2 : lt_s2;
  for (int k = threadIdx.x; k < n; k += blockDim.x) {
    float s = 0.0f;
    for (int z = 0; z < Z; z++) s += expf(sel[k * Z + z]) * (vmin + dz * (float)z);
    q[k] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int bst = 0;
    for (int k = 1; k < n; k++)
      if (q[k] > q[bst]) bst = k;
    best_s = bst;
    best_out[(size_t)d * B + i] = bst;
    ad_s = (a[i] / radix_after) % n; /* first branch most significant */
  }
  __syncthreads();
  int bst = best_s, ad = ad_s;
  float gamma = gdisc ? gdisc[i] : gamma_dev ? *gamma_dev : gamma_arg;
  float disc = gamma * (1.0f - done[i]);
  const float *lp = lp_s + (size_t)ad * Z;
  /* source atoms: probability and position on the support (c51_project) */
  for (int j = threadIdx.x; j < Z; j += blockDim.x) {
    pj[j] = expf(lt_s2[bst * Z + j]);
    lj[j] = c51_source(r[i], disc, vmin, vmax, dz, Z, j, &bj[j]);
    ez[j] = expf(lp[j]);
  }
  __syncthreads();
  const float c0 = (r[i] + disc * vmin - vmin) / dz; /* b_j before clamping: c0 + disc j */
  for (int z = threadIdx.x; z < Z; z += blockDim.x) m[z] = c51_gather(z, Z, lj, pj, bj, c0, disc);
  __syncthreads();
  if (threadIdx.x == 0) {
    float ce = 0.0f, qa = 0.0f, msum = 0.0f;
    for (int z = 0; z < Z; z++) {
      ce -= m[z] * lp[z];
      qa += ez[z] * (vmin + dz * (float)z);
      msum += m[z];
    }
    loss_i[i] = (d == 0 ? 0.0f : loss_i[i]) + ce / (float)D;
    qsum_i[i] = (d == 0 ? 0.0f : qsum_i[i]) + qa;
    c_s = w[i] / ((float)B * (float)D);
    msum_s = msum;
  }
  __syncthreads();
  for (int z = threadIdx.x; z < Z; z += blockDim.x) {
    float gz = c_s * (ez[z] * msum_s - m[z]);
    g[z] = gz;
    dV[(size_t)i * Z + z] = (d == 0 ? 0.0f : dV[(size_t)i * Z + z]) + gz;
  }
  __syncthreads();
  for (int k = threadIdx.x; k < nz; k += blockDim.x) {
    int act = k / Z, z = k % Z;
    dA[(size_t)i * nz + k] = (act == ad ? g[z] : 0.0f) - g[z] / (float)n;
  }
}

/* loss = sum_i w_i loss_i / B and q_taken = sum_i qsum_i / (B D), in index order */
__global__ void batch_loss_kernel(const float *__restrict__ loss_i, const float *__restrict__ qsum_i,
                                  const float *__restrict__ w, int B, int D, float *__restrict__ loss,
                                  float *__restrict__ q_taken) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float l = 0.0f, q = 0.0f;
  for (int i = 0; i < B; i++) {
    l += w[i] * loss_i[i];
    q += qsum_i[i];
  }
  *loss = l / (float)B;
  *q_taken = q / ((float)B * (float)D);
}

// launchers

/* the generic step's split-K scratch: 16 parts of the widest layer */
static size_t splitk_floats(const net_layout_t *L) {
  size_t widest = 0;
  for (int li = 0; li < L->n_layers; li++) {
    size_t w = (size_t)L->layer[li].in * L->layer[li].out;
    widest = w > widest ? w : widest;
  }
  return 16 * widest;
}

/* ws->mem's floats (the rows' activations are cuda_acts_floats') */
static size_t ws_mem_floats(const net_layout_t *L, int B) {
  int nmax = 0;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  size_t b = (size_t)B, N = (size_t)(L->n_noise ? L->n_noise : 1);
  return 2 * b * L->S + 2 * (size_t)L->n_params + 2 * N + b * L->Z + b * (size_t)nmax * L->Z +
         b * ((size_t)L->VH + L->H2 + L->H1 + L->AH) + 3 * b /* r, done, w */ + 2 * b /* loss_i, qsum */ + 2 +
         b /* a */ + (size_t)L->D * b /* best */ + splitk_floats(L);
}

extern "C" size_t cuda_dqn_ws_floats(const net_layout_t *L, int B) {
  return cuda_acts_floats(L, 2 * B) + cuda_acts_floats(L, B) + ws_mem_floats(L, B) + cuda_fused_floats(L, B);
}

extern "C" int cuda_dqn_ws_alloc(cuda_dqn_ws_t *ws, const net_layout_t *L, int B, int tensor_cores,
                                 int gemm_occupancy) {
  memset(ws, 0, sizeof *ws);
  ws->B = B;
  int rc;
  if ((rc = cuda_acts_alloc(&ws->on, L, 2 * B)) || (rc = cuda_acts_alloc(&ws->tg, L, B))) return rc;
  int nmax = 0;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  size_t b = (size_t)B, N = (size_t)(L->n_noise ? L->n_noise : 1);
  ws->splitk_floats = splitk_floats(L);
  cudaError_t e = dev_alloc_t(&ws->mem, ws_mem_floats(L, B) * sizeof(float));
  if (e != cudaSuccess) return (int)e;
  float *p = ws->mem;
  ws->x = p, p += 2 * b * L->S;
  ws->weff_on = p, p += L->n_params;
  ws->weff_tg = p, p += L->n_params;
  ws->fn_on = p, p += N;
  ws->fn_tg = p, p += N;
  ws->dV = p, p += b * L->Z;
  ws->dA = p, p += b * (size_t)nmax * L->Z;
  ws->dhv = p, p += b * L->VH;
  ws->dh = p, p += b * L->H2;
  ws->dh1 = p, p += b * L->H1;
  ws->dhb = p, p += b * L->AH;
  ws->r = p, p += b;
  ws->done = p, p += b;
  ws->w = p, p += b;
  ws->loss_i = p, p += 2 * b; /* loss_i then qsum_i */
  ws->loss = p, p += 1;
  ws->q_taken = p, p += 1;
  ws->a = (int32_t *)p, p += b;
  ws->best = (int32_t *)p, p += (size_t)L->D * b;
  ws->splitk = p;
  return cuda_fused_alloc(&ws->fused, L, B, tensor_cores, gemm_occupancy, ws->x);
}

extern "C" void cuda_dqn_ws_free(cuda_dqn_ws_t *ws) {
  cuda_acts_free(&ws->on);
  cuda_acts_free(&ws->tg);
  dev_free(ws->mem);
  cuda_fused_free(&ws->fused);
  memset(ws, 0, sizeof *ws);
}

/* dW[out,in] = dY^T X (K = rows: split), db = colsum dY (split rows),
 * dX (+)= dY W (dX may be NULL). scratch: >= 16 * max(out * in, out) floats. */
static int linear_backward(const float *dY, const float *X, const float *W, float *dX, int dx_acc, float *dW,
                           float *db, int rows, int in, int out, float *scratch, size_t scratch_floats,
                           cudaStream_t st) {
  CUDA_RET(cuda_gemm_split(out, in, rows, dY, 1, out, X, in, 1, dW, 0, NULL, NULL, 0.0f, scratch, scratch_floats, st));
  int S = rows >= 512 ? (rows / 256 < 16 ? rows / 256 : 16) : 1, chunk = (rows + S - 1) / S;
  dim3 cg((unsigned)((out + 127) / 128), (unsigned)S);
  colsum_kernel<<<cg, 128, 0, st>>>(dY, S > 1 ? scratch : db, rows, out, chunk);
  CUDA_RET(cudaGetLastError());
  if (S > 1) {
    colsum_final_kernel<<<(out + 127) / 128, 128, 0, st>>>(scratch, db, S, out);
    CUDA_RET(cudaGetLastError());
  }
  if (dX) CUDA_RET(cuda_gemm(rows, in, out, dY, out, 1, W, in, 1, dX, dx_acc, NULL, NULL, 0.0f, st));
  return 0;
}

static int lrelu_back(float *dh, const float *a, size_t n, float slope, cudaStream_t st) {
  lrelu_backward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(dh, a, n, slope);
  return (int)cudaGetLastError();
}

extern "C" int cuda_dqn_loss_grad_generic(const net_layout_t *L, const cuda_dqn_hp_t *hp, const float *online,
                                          const float *target, int noisy, cuda_dqn_ws_t *ws, float *grad,
                                          cudaStream_t st) {
  const int B = ws->B, Z = L->Z, D = L->D;
  const float *won = online, *wtg = target;
  if (noisy) {
    CUDA_RET(cuda_effective_weights(L, online, ws->fn_on, ws->weff_on, st));
    CUDA_RET(cuda_effective_weights(L, target, ws->fn_tg, ws->weff_tg, st));
    won = ws->weff_on;
    wtg = ws->weff_tg;
  }
  CUDA_RET(cuda_net_forward(L, won, ws->x, 2 * B, hp->slope, hp->v_min, hp->v_max, &ws->on, st));
  CUDA_RET(cuda_net_forward(L, wtg, ws->x + (size_t)B * L->S, B, hp->slope, hp->v_min, hp->v_max, &ws->tg, st));

  /* loss per branch; the dA of one branch is consumed by its backward before the next */
  float *qsum = ws->loss_i + B;
  int radix_after = 1;
  for (int d = D - 1; d > 0; d--) radix_after *= L->n[d];
  for (int d = 0; d < D; d++) {
    int n = L->n[d], nz = n * Z;
    size_t shm = sizeof(float) * (size_t)(6 * Z + n);
    c51_loss_branch_kernel<<<B, 128, shm, st>>>(ws->on.logp[d], ws->tg.logp[d], ws->a, ws->r, ws->done, ws->w, B, d,
                                                D, n, Z, radix_after, hp->gamma, hp->gamma_dev, hp->gdisc, hp->v_min, hp->v_max,
                                                hp->double_dqn,
                                                ws->dV, ws->dA, ws->loss_i, qsum, ws->best);
    CUDA_RET(cudaGetLastError());
    if (d + 1 < D) radix_after /= L->n[d + 1];
    if (!grad) continue;
    const net_layer_t *l1 = &L->layer[NET_BRANCH(d, 1)], *l2 = &L->layer[NET_BRANCH(d, 2)];
    CUDA_RET(linear_backward(ws->dA, ws->on.hb[d], won + l2->off_w, ws->dhb, 0, grad + l2->off_w, grad + l2->off_b, B,
                        L->AH, nz, ws->splitk, ws->splitk_floats, st));
    CUDA_RET(lrelu_back(ws->dhb, ws->on.ab[d], (size_t)B * L->AH, hp->slope, st));
    CUDA_RET(linear_backward(ws->dhb, ws->on.h, won + l1->off_w, ws->dh, d > 0, grad + l1->off_w, grad + l1->off_b, B,
                        L->H2, L->AH, ws->splitk, ws->splitk_floats, st));
  }
  batch_loss_kernel<<<1, 32, 0, st>>>(ws->loss_i, qsum, ws->w, B, D, ws->loss, ws->q_taken);
  CUDA_RET(cudaGetLastError());
  if (!grad) return 0;
  const net_layer_t *v1 = &L->layer[NET_VALUE1], *v2 = &L->layer[NET_VALUE2];
  CUDA_RET(linear_backward(ws->dV, ws->on.hv, won + v2->off_w, ws->dhv, 0, grad + v2->off_w, grad + v2->off_b, B, L->VH, Z, ws->splitk, ws->splitk_floats, st));
  CUDA_RET(lrelu_back(ws->dhv, ws->on.av, (size_t)B * L->VH, hp->slope, st));
  CUDA_RET(linear_backward(ws->dhv, ws->on.h, won + v1->off_w, ws->dh, 1, grad + v1->off_w, grad + v1->off_b, B, L->H2,
                      L->VH, ws->splitk, ws->splitk_floats, st));
  const net_layer_t *t1 = &L->layer[NET_TRUNK1], *t2 = &L->layer[NET_TRUNK2];
  CUDA_RET(lrelu_back(ws->dh, ws->on.a2, (size_t)B * L->H2, hp->slope, st));
  CUDA_RET(linear_backward(ws->dh, ws->on.h1, won + t2->off_w, ws->dh1, 0, grad + t2->off_w, grad + t2->off_b, B, L->H1,
                      L->H2, ws->splitk, ws->splitk_floats, st));
  CUDA_RET(lrelu_back(ws->dh1, ws->on.a1, (size_t)B * L->H1, hp->slope, st));
  CUDA_RET(linear_backward(ws->dh1, ws->x, won + t1->off_w, NULL, 0, grad + t1->off_w, grad + t1->off_b, B, L->S, L->H1, ws->splitk, ws->splitk_floats, st));
  if (noisy)
    for (int li = 0; li < L->n_layers; li++) {
      const net_layer_t *l = &L->layer[li];
      if (!l->noisy) continue;
      int n = l->in * l->out;
      noisy_grad_kernel<<<(n + 255) / 256, 256, 0, st>>>(grad + l->off_w, grad + l->off_b, ws->fn_on + l->noise_off,
                                                         ws->fn_on + l->noise_off + l->in, grad + l->off_sw,
                                                         grad + l->off_sb, l->in, l->out);
      CUDA_RET(cudaGetLastError());
    }
  return 0;
}
