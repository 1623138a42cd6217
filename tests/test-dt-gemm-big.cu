/*
 * test-dt-gemm-big.cu — the DT's 128 x 128 fp32 tile (kernels/cuda/
 * dt_gemm_big.cuh) run on the CPU: its own source, a POSIX thread for each
 * of a block's 256 CUDA threads, the block's barrier a pthread barrier and
 * its shared stages one array the threads share, every block of the grid in
 * turn. Each output must be bit for bit the sequential product (one fmaf a
 * k from 0, in k order: dt_gemm_kernel's sums, so the two tiles agree), in
 * each of the four operand layouts, with partial tiles, K short of a chunk
 * and K under one chunk. No GPU is needed (nvcc compiles it as host code).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_gemm_big.cuh"

struct host_sync {
  pthread_barrier_t *b;
  void operator()() const { pthread_barrier_wait(b); }
};
struct host_ep {
  float *C;
  int ldc, N;
  void operator()(int m, int n, const float (&v)[4]) const {
    for (int j = 0; j < 4; j++)
      if (n + j < N) C[(size_t)m * ldc + n + j] = v[j];
  }
};

struct gemm {
  int M, N, K, ta, tb, lda, ldb;
  const float *A, *B;
  float *C;
  dtb_stage_t *As, *Bs;
  pthread_barrier_t bar;
};
struct thread_arg {
  gemm *g;
  int tid;
};

template <int TA, int TB>
static void run_blocks(gemm *g, int tid) {
  host_sync sync{&g->bar};
  host_ep ep{g->C, g->N, g->N};
  for (int by = 0; by * DTB_T < g->M; by++)
    for (int bx = 0; bx * DTB_T < g->N; bx++) {
      sync(); /* the previous block's threads are past its stages */
      float s[8][8];
      dtb_mainloop<TA, TB>(tid, g->M, g->N, g->K, g->A, g->lda, g->B, g->ldb, by * DTB_T, bx * DTB_T, g->As, g->Bs,
                           sync, s);
      dtb_epilogue(tid, g->M, by * DTB_T, bx * DTB_T, s, g->As, g->Bs, sync, ep);
      sync(); /* the last band read from the stages before the next tile's mainloop stores into them */
    }
}

static void *thread_main(void *p) {
  thread_arg *a = (thread_arg *)p;
  switch (2 * a->g->ta + a->g->tb) {
    case 0: run_blocks<0, 0>(a->g, a->tid); break;
    case 1: run_blocks<0, 1>(a->g, a->tid); break;
    case 2: run_blocks<1, 0>(a->g, a->tid); break;
    default: run_blocks<1, 1>(a->g, a->tid); break;
  }
  return NULL;
}

static float frand(uint64_t *x) {
  *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*x >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* 0 where the tile's C is the sequential product, bit for bit */
static int gemm_case(int M, int N, int K, int ta, int tb) {
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1; /* rows padded: the leading dimensions, not the shapes */
  const int ar = ta ? K : M, br = tb ? N : K;
  float *A = (float *)malloc(sizeof(float) * ar * lda), *B = (float *)malloc(sizeof(float) * br * ldb);
  float *C = (float *)malloc(sizeof(float) * M * N);
  uint64_t seed = 1000003u * M + 1009u * N + K + 7 * ta + 13 * tb;
  for (int i = 0; i < ar * lda; i++) A[i] = frand(&seed);
  for (int i = 0; i < br * ldb; i++) B[i] = frand(&seed);
  for (int i = 0; i < M * N; i++) C[i] = NAN; /* every output must be written */
  static dtb_stage_t As[2], Bs[2];
  gemm g = {M, N, K, ta, tb, lda, ldb, A, B, C, As, Bs, {}};
  pthread_barrier_init(&g.bar, NULL, DTB_NT);
  pthread_t th[DTB_NT];
  thread_arg args[DTB_NT];
  for (int t = 0; t < DTB_NT; t++) {
    args[t] = thread_arg{&g, t};
    if (pthread_create(&th[t], NULL, thread_main, &args[t])) {
      fprintf(stderr, "pthread_create failed\n");
      exit(1);
    }
  }
  for (int t = 0; t < DTB_NT; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&g.bar);
  int bad = 0;
  for (int m = 0; m < M && !bad; m++)
    for (int n = 0; n < N; n++) {
      float s = 0.0f;
      for (int k = 0; k < K; k++)
        s = fmaf(ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k], tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n],
                 s);
      if (memcmp(&s, &C[(size_t)m * N + n], sizeof s)) {
        fprintf(stderr, "%d x %d x %d (ta %d, tb %d): C[%d][%d] %.9g, the sequential product %.9g\n", M, N, K, ta, tb,
                m, n, C[(size_t)m * N + n], s);
        bad = 1;
        break;
      }
    }
  if (!bad) printf("%d x %d x %d (ta %d, tb %d): bit for bit the sequential product\n", M, N, K, ta, tb);
  free(A), free(B), free(C);
  return bad;
}

int main(void) {
  /* partial tiles along m and n, K a whole number of chunks, short of one, under one */
  const int shapes[][3] = {{200, 136, 132}, {130, 260, 37}, {128, 128, 8}, {70, 20, 5}, {257, 129, 64}};
  int bad = 0;
  for (int s = 0; s < 5; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) bad |= gemm_case(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb);
  return bad;
}
