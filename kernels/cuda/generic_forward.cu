/*
 * generic_forward.cu — the network forward on the GPU, correct first: a tiled
 * fp32 GEMM with the bias and LeakyReLU fused into its epilogue, the dueling
 * combine + log-softmax, and the C51 Q values. It mirrors net_forward_f32
 * (kernels/cpu/heads_impl.h) layer by layer; tests/test-gpu-forward.c holds
 * it to that reference. Act runs it (any number of states, Q values out),
 * and so do the generic loss kernels (generic_loss.cu); the training step's own
 * forward is step_forward.cu's.
 *
 * Shapes: rows = batch rows, K = in features, N = out features; X [rows, K],
 * W [N, K] (nn.Linear layout), Y = X W^T + b [rows, N]; Z atoms, n actions.
 * Every output element is overwritten (no accumulation), so reruns are
 * bit-identical.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "generic_forward.cuh"
#include "arena.cuh"

// kernels

/* 32 x 32 tiles, 2 x 2 per thread: the matrices of this network are small
 * (rows = batch), and 64 x 64 tiles left 1-16 blocks for 132 SMs (measured:
 * kernels/dev/DEVICE_NOTES.md) */
#define TILE 32
#define KT 16
#define RT (TILE / 16) /* outputs per thread per dimension */

/* C[M, N] (=, or += when accumulate) sum_k A(m, k) B(k, n), with
 * A(m, k) = A[m*sam + k*sak] and B(k, n) = B[k*sbk + n*sbn], so one kernel
 * serves X W^T (forward), dY^T X (weight gradients) and dY W (input
 * gradients). Epilogue: + bias[n] when bias != NULL; H = LeakyReLU(C) when
 * H != NULL. Block 16 x 16 threads, each an RT x RT patch of a TILE x TILE tile;
 * each C element is summed over k in order by one thread: deterministic. */
__global__ void gemm_kernel(int M, int N, int K, const float *__restrict__ A, int sam, int sak,
                            const float *__restrict__ B, int sbk, int sbn, float *__restrict__ C, int accumulate,
                            const float *__restrict__ bias, float *__restrict__ H, float slope, int kchunk,
                            float *__restrict__ partial) {
  __shared__ float as[KT][TILE + 1], bs[KT][TILE + 1];
  int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
  /* split K: block z sums k in [kb, ke) into partial[z] (no epilogue) */
  int kb = blockIdx.z * kchunk, ke = min(K, kb + kchunk);
  float acc[RT][RT] = {{0}};
  /* Each thread moves LPT elements of each operand per K tile; the next
   * tile's loads are issued into registers before this tile's arithmetic, so
   * their latency overlaps the FMAs (the accumulation order is unchanged).
   * Consecutive threads walk the operand's unit-stride dimension, so loads
   * are coalesced whether it is k-major (X W^T) or m/n-major (dY^T X, dY W). */
  constexpr int LPT = TILE * KT / 256;
  float ra[LPT], rb[LPT];
  auto load = [&](int k0) {
#pragma unroll
    for (int l = 0; l < LPT; l++) {
      int i = tid + l * 256, mm, kk;
      if (sak == 1) mm = i / KT, kk = i % KT;
      else kk = i / TILE, mm = i % TILE;
      int gm = m0 + mm, gk = k0 + kk;
      ra[l] = (gm < M && gk < ke) ? A[(size_t)gm * sam + (size_t)gk * sak] : 0.0f;
      int nn;
      if (sbk == 1) nn = i / KT, kk = i % KT;
      else kk = i / TILE, nn = i % TILE;
      int gn = n0 + nn;
      gk = k0 + kk;
      rb[l] = (gn < N && gk < ke) ? B[(size_t)gk * sbk + (size_t)gn * sbn] : 0.0f;
    }
  };
  load(kb);
  for (int k0 = kb; k0 < ke; k0 += KT) {
#pragma unroll
    for (int l = 0; l < LPT; l++) {
      int i = tid + l * 256;
      if (sak == 1) as[i % KT][i / KT] = ra[l];
      else as[i / TILE][i % TILE] = ra[l];
      if (sbk == 1) bs[i % KT][i / KT] = rb[l];
      else bs[i / TILE][i % TILE] = rb[l];
    }
    __syncthreads();
    if (k0 + KT < ke) load(k0 + KT);
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
      float av[RT], bv[RT];
#pragma unroll
      for (int i = 0; i < RT; i++) {
        av[i] = as[kk][ty * RT + i];
        bv[i] = bs[kk][tx * RT + i];
      }
#pragma unroll
      for (int i = 0; i < RT; i++)
#pragma unroll
        for (int j = 0; j < RT; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < RT; i++) {
    int m = m0 + ty * RT + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < RT; j++) {
      int n = n0 + tx * RT + j;
      if (n >= N) continue;
      float v = acc[i][j];
      if (partial) {
        partial[((size_t)blockIdx.z * M + m) * N + n] = v;
        continue;
      }
      if (accumulate) v += C[(size_t)m * N + n];
      if (bias) v += bias[n];
      C[(size_t)m * N + n] = v;
      if (H) H[(size_t)m * N + n] = v > 0.0f ? v : slope * v;
    }
  }
}

/* C = sum over z of partial[z] in order (+ C, + bias, H = LeakyReLU) */
__global__ void splitk_reduce_kernel(const float *__restrict__ partial, int S, int M, int N, float *__restrict__ C,
                                     int accumulate, const float *__restrict__ bias, float *__restrict__ H,
                                     float slope) {
  size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x, MN = (size_t)M * N;
  if (e >= MN) return;
  float v = 0.0f;
  for (int z = 0; z < S; z++) v += partial[(size_t)z * MN + e];
  if (accumulate) v += C[e];
  if (bias) v += bias[e % N];
  C[e] = v;
  if (H) H[e] = v > 0.0f ? v : slope * v;
}

/* y += beta x (heads_impl.h: a head's outputs plus beta_p x its prior's) */
__global__ void axpy_kernel(float *__restrict__ y, const float *__restrict__ x, float beta, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += beta * x[i];
}

/* One block per row: logits[a][z] = V[z] + A[a][z] - mean_a A[a][z], then
 * log_softmax over z, one warp per action. Z <= 256 (LEARNER_MAX_ATOMS). */
__global__ void dueling_log_softmax_kernel(const float *__restrict__ V, const float *__restrict__ A,
                                           float *__restrict__ logp, int n, int Z) {
  __shared__ float base[256];
  int row = blockIdx.x;
  const float *Vr = V + (size_t)row * Z;
  const float *Ar = A + (size_t)row * n * Z;
  float *Lr = logp + (size_t)row * n * Z;
  for (int z = threadIdx.x; z < Z; z += blockDim.x) {
    float m = 0.0f;
    for (int a = 0; a < n; a++) m += Ar[a * Z + z];
    base[z] = Vr[z] - m / (float)n;
  }
  __syncthreads();
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  for (int a = warp; a < n; a += nw) {
    float mx = -INFINITY;
    for (int z = lane; z < Z; z += 32) mx = fmaxf(mx, Ar[a * Z + z] + base[z]);
    for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float s = 0.0f;
    for (int z = lane; z < Z; z += 32) s += expf(Ar[a * Z + z] + base[z] - mx);
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    float lse = mx + logf(s);
    for (int z = lane; z < Z; z += 32) Lr[a * Z + z] = Ar[a * Z + z] + base[z] - lse;
  }
}

/* Q[row, qoff + a] = sum_z exp(logp[row, a, z]) * (vmin + z dz); one warp per (row, a). */
/* a warp a (row, action), over as many warps as the grid has (rows x n may
 * pass 2^31: Act's million states of a wide branch) */
__global__ void c51_q_values_kernel(const float *__restrict__ logp, float *__restrict__ Q, int rows, int n, int Z,
                                    int qoff, int qw, float vmin, float dz) {
  const long long total = (long long)rows * n, stride = (long long)gridDim.x * blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  for (long long gw = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; gw < total; gw += stride) {
    const long long row = gw / n;
    const int a = (int)(gw % n);
    const float *lp = logp + (size_t)gw * Z;
    float s = 0.0f;
    for (int z = lane; z < Z; z += 32) s += expf(lp[z]) * (vmin + dz * (float)z);
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) Q[(size_t)row * qw + qoff + a] = s;
  }
}

/* c51_q_values_kernel's blocks of 256 for rows x n warps, at most 2^30 (the
 * kernel strides past them) */
static unsigned q_values_blocks(int rows, int n) {
  const long long b = ((long long)rows * n * 32 + 255) / 256;
  return (unsigned)(b < (1LL << 30) ? b : (1LL << 30));
}

// launchers

extern "C" int cuda_gemm_split(int M, int N, int K, const float *A, int sam, int sak, const float *B, int sbk,
                               int sbn, float *C, int accumulate, const float *bias, float *H, float slope,
                               float *scratch, size_t scratch_floats, cudaStream_t st) {
  /* a long K (the weight gradients' K is the batch) is cut into chunks of at
   * least 256, summed by separate blocks, then added in a fixed order */
  int S = 1;
  if (scratch && K >= 512) {
    S = K / 256 < 16 ? K / 256 : 16;
    while (S > 1 && (size_t)S * M * N > scratch_floats) S--;
  }
  int kchunk = S > 1 ? ((K + S - 1) / S + KT - 1) / KT * KT : K;
  if (S > 1) S = (K + kchunk - 1) / kchunk;
  dim3 block(16, 16), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE, S);
  gemm_kernel<<<grid, block, 0, st>>>(M, N, K, A, sam, sak, B, sbk, sbn, C, accumulate, bias, H, slope, kchunk,
                                      S > 1 ? scratch : NULL);
  cudaError_t e = cudaGetLastError();
  if (e || S == 1) return (int)e;
  size_t MN = (size_t)M * N;
  splitk_reduce_kernel<<<(unsigned)((MN + 255) / 256), 256, 0, st>>>(scratch, S, M, N, C, accumulate, bias, H, slope);
  return (int)cudaGetLastError();
}

extern "C" int cuda_gemm(int M, int N, int K, const float *A, int sam, int sak, const float *B, int sbk, int sbn,
                         float *C, int accumulate, const float *bias, float *H, float slope, cudaStream_t st) {
  return cuda_gemm_split(M, N, K, A, sam, sak, B, sbk, sbn, C, accumulate, bias, H, slope, NULL, 0, st);
}

/* Y[rows, N] = X[rows, K] W[N, K]^T + b, H = LeakyReLU(Y) */
static cudaError_t linear(const float *X, const float *W, const float *b, float *Y, float *H, float slope, int rows,
                          int K, int N, cudaStream_t st) {
  return (cudaError_t)cuda_gemm(rows, N, K, X, K, 1, W, 1, K, Y, 0, b, H, slope, st);
}

extern "C" size_t cuda_acts_floats(const net_layout_t *L, int rows) {
  const size_t r = (size_t)rows, K = (size_t)(L->K < 1 ? 1 : L->K), pr = L->has_prior ? 1 : 0;
  return r * (2 * L->H1 + 2 * L->H2 + 2 * L->VH + L->Z) + r * (size_t)L->D * 2 * L->AH + r * (size_t)L->a_width * 2 +
         r * (size_t)L->q_width +
         pr * (r * (2 * L->VH + L->Z) + r * (size_t)L->D * 2 * L->AH + r * (size_t)L->a_width) +
         (K > 1 || pr || L->attn.T ? K * r * L->q_width : 0) + cuda_attn_acts_floats(L, r);
}

extern "C" int cuda_acts_alloc(cuda_acts_t *A, const net_layout_t *L, int rows) {
  memset(A, 0, sizeof *A);
  A->rows = rows;
  size_t r = (size_t)rows;
  const size_t K = (size_t)(L->K < 1 ? 1 : L->K), pr = L->has_prior ? 1 : 0;
  cudaError_t e = dev_alloc_t(&A->mem, cuda_acts_floats(L, rows) * sizeof(float));
  if (e != cudaSuccess) return (int)e;
  float *p = A->mem;
  A->a1 = p, p += r * L->H1;
  A->h1 = p, p += r * L->H1;
  A->a2 = p, p += r * L->H2;
  A->h = p, p += r * L->H2;
  A->av = p, p += r * L->VH;
  A->hv = p, p += r * L->VH;
  A->V = p, p += r * L->Z;
  for (int d = 0; d < L->D; d++) {
    A->ab[d] = p, p += r * L->AH;
    A->hb[d] = p, p += r * L->AH;
  }
  for (int d = 0; d < L->D; d++) {
    A->A[d] = p, p += r * (size_t)L->n[d] * L->Z;
    A->logp[d] = p, p += r * (size_t)L->n[d] * L->Z;
  }
  A->q = p, p += r * L->q_width;
  if (pr) {
    A->pav = p, p += r * L->VH;
    A->phv = p, p += r * L->VH;
    A->pV = p, p += r * L->Z;
    for (int d = 0; d < L->D; d++) {
      A->pab[d] = p, p += r * L->AH;
      A->phb[d] = p, p += r * L->AH;
      A->pA[d] = p, p += r * (size_t)L->n[d] * L->Z;
    }
  }
  if (K > 1 || pr || L->attn.T) A->qk = p, p += K * r * L->q_width;
  cuda_attn_acts_place(L, &A->att, r, p);
  return 0;
}

extern "C" void cuda_acts_free(cuda_acts_t *A) {
  dev_free(A->mem);
  memset(A, 0, sizeof *A);
}

extern "C" int cuda_net_forward(const net_layout_t *L, const float *P, const float *X, int rows, float slope,
                                float vmin, float vmax, cuda_acts_t *A, cudaStream_t st) {
  const net_layer_t *t1 = &L->layer[NET_TRUNK1], *t2 = &L->layer[NET_TRUNK2];
  const net_layer_t *v1 = &L->layer[NET_VALUE1], *v2 = &L->layer[NET_VALUE2];
  cudaError_t e;
#define TRY(x)                                  \
  if ((e = (x)) != cudaSuccess) return (int)e;
  TRY(linear(X, P + t1->off_w, P + t1->off_b, A->a1, A->h1, slope, rows, L->S, L->H1, st));
  TRY(linear(A->h1, P + t2->off_w, P + t2->off_b, A->a2, A->h, slope, rows, L->H1, L->H2, st));
  TRY(linear(A->h, P + v1->off_w, P + v1->off_b, A->av, A->hv, slope, rows, L->H2, L->VH, st));
  TRY(linear(A->hv, P + v2->off_w, P + v2->off_b, A->V, NULL, slope, rows, L->VH, L->Z, st));
  float dz = (vmax - vmin) / (float)(L->Z - 1);
  int qoff = 0;
  for (int d = 0; d < L->D; d++) {
    const net_layer_t *b1 = &L->layer[NET_BRANCH(d, 1)], *b2 = &L->layer[NET_BRANCH(d, 2)];
    int nz = L->n[d] * L->Z;
    TRY(linear(A->h, P + b1->off_w, P + b1->off_b, A->ab[d], A->hb[d], slope, rows, L->H2, L->AH, st));
    TRY(linear(A->hb[d], P + b2->off_w, P + b2->off_b, A->A[d], NULL, slope, rows, L->AH, nz, st));
    dueling_log_softmax_kernel<<<rows, 128, 0, st>>>(A->V, A->A[d], A->logp[d], L->n[d], L->Z);
    TRY(cudaGetLastError());
    c51_q_values_kernel<<<q_values_blocks(rows, L->n[d]), 256, 0, st>>>(A->logp[d], A->q, rows, L->n[d], L->Z, qoff,
                                                                         L->q_width, vmin, dz);
    TRY(cudaGetLastError());
    qoff += L->n[d];
  }
#undef TRY
  return 0;
}

extern "C" int cuda_net_forward_heads(const net_layout_t *L, const float *P, const float *prior, float beta,
                                      const float *X, int rows, float slope, float vmin, float vmax, cuda_acts_t *A,
                                      cudaStream_t st) {
  const net_layer_t *t1 = &L->layer[NET_TRUNK1], *t2 = &L->layer[NET_TRUNK2];
  const int K = L->K < 1 ? 1 : L->K, pr = L->has_prior && prior && A->pV;
  const long long r = rows;
  cudaError_t e;
#define TRY(x)                                  \
  if ((e = (x)) != cudaSuccess) return (int)e;
#define AXPY(y, x, n)                                                                             \
  axpy_kernel<<<(unsigned)(((n) + 255) / 256), 256, 0, st>>>((y), (x), beta, (long long)(n)); \
  TRY(cudaGetLastError());
  TRY(linear(X, P + t1->off_w, P + t1->off_b, A->a1, A->h1, slope, rows, L->S, L->H1, st));
  TRY(linear(A->h1, P + t2->off_w, P + t2->off_b, A->a2, A->h, slope, rows, L->H1, L->H2, st));
  const float *hh = A->h; /* the heads' input: h, or the attention's h' */
  if (L->attn.T) {
    TRY((cudaError_t)cuda_attn_forward(L, P, P, rows, A->h, rows, rows, &A->att, cuda_pz_t{1, 0}, st));
    hh = A->att.hatt;
  }
  float dz = (vmax - vmin) / (float)(L->Z - 1);
  for (int k = 0; k < K; k++) {
    const int v1 = NET_HEAD_LAYER(L, k, 0), v2 = NET_HEAD_LAYER(L, k, 1);
    const net_layer_t *lv1 = &L->layer[v1], *lv2 = &L->layer[v2];
    TRY(linear(hh, P + lv1->off_w, P + lv1->off_b, A->av, A->hv, slope, rows, L->H2, L->VH, st));
    TRY(linear(A->hv, P + lv2->off_w, P + lv2->off_b, A->V, NULL, slope, rows, L->VH, L->Z, st));
    if (pr) {
      TRY(linear(hh, prior + L->prior_off_w[v1], prior + L->prior_off_b[v1], A->pav, A->phv, slope, rows, L->H2,
                 L->VH, st));
      TRY(linear(A->phv, prior + L->prior_off_w[v2], prior + L->prior_off_b[v2], A->pV, NULL, slope, rows, L->VH,
                 L->Z, st));
      AXPY(A->V, A->pV, r * L->Z);
    }
    float *qk = A->qk + (size_t)k * rows * L->q_width;
    int qoff = 0;
    for (int d = 0; d < L->D; d++) {
      const int b1 = NET_HEAD_LAYER(L, k, 2 + 2 * d), b2 = NET_HEAD_LAYER(L, k, 3 + 2 * d);
      const net_layer_t *l1 = &L->layer[b1], *l2 = &L->layer[b2];
      int nz = L->n[d] * L->Z;
      TRY(linear(hh, P + l1->off_w, P + l1->off_b, A->ab[d], A->hb[d], slope, rows, L->H2, L->AH, st));
      TRY(linear(A->hb[d], P + l2->off_w, P + l2->off_b, A->A[d], NULL, slope, rows, L->AH, nz, st));
      if (pr) {
        TRY(linear(hh, prior + L->prior_off_w[b1], prior + L->prior_off_b[b1], A->pab[d], A->phb[d], slope, rows,
                   L->H2, L->AH, st));
        TRY(linear(A->phb[d], prior + L->prior_off_w[b2], prior + L->prior_off_b[b2], A->pA[d], NULL, slope, rows,
                   L->AH, nz, st));
        AXPY(A->A[d], A->pA[d], r * nz);
      }
      dueling_log_softmax_kernel<<<rows, 128, 0, st>>>(A->V, A->A[d], A->logp[d], L->n[d], L->Z);
      TRY(cudaGetLastError());
      c51_q_values_kernel<<<q_values_blocks(rows, L->n[d]), 256, 0, st>>>(A->logp[d], qk, rows, L->n[d], L->Z, qoff,
                                                                           L->q_width, vmin, dz);
      TRY(cudaGetLastError());
      qoff += L->n[d];
    }
  }
#undef AXPY
#undef TRY
  return 0;
}
