/*
 * test-split-rule.c — the layer GEMM's split-K rule (kernels/cuda/split_rule.h,
 * docs/gpu.md) on the CPU: the plans worked by hand in
 * kernels/dev/DEVICE_NOTES.md item 181 for the H200's 132 SMs at the default
 * occupancy 2, and the rule's bounds over every depth up to 8,192.
 */
#include <check.h>

#include "gemm_tiles.cuh"
#include "split_rule.h"
#include "testutil.h"

static int parts(int K, long long work, int occ) {
  const int kper = gemm_split_kper(K, work, occ, 132);
  return (K + kper - 1) / kper;
}

/* the ensemble's B2 (one problem, K = 5,120 = 5 head sets x 4 heads x 256
 * hidden): 4 / 8 / 16 / 32 tiles at batch 32 / 64 / 128 / 256. Work alone
 * would ask 66 / 33 / 17 / 8 parts; the square-root cap (17) bounds the first
 * three, 17 parts round to 320-k parts (16), and at 256 512 k a part at most
 * needs 10. */
START_TEST(test_deep_alone) {
  const int tiles[] = {4, 8, 16, 32}, want[] = {16, 16, 16, 10};
  for (int i = 0; i < 4; i++) ck_assert_int_eq(parts(5120, (long long)tiles[i] * 5120, 2), want[i]);
  /* the plain step's B2 (K = 512) at batch 64: 8 tiles; work asks 33, the cap 5, 103 k round to 128 */
  ck_assert_int_eq(parts(512, 8 * 512, 2), 4);
}
END_TEST

/* the ensemble's B1: 20 problems (5 sets x the value's 51 and the heads' 459,
 * 153, 153), the same tiles each; the deep ones get more parts than the
 * shallow ones of the same launch */
START_TEST(test_mixed_depths) {
  const int K[4] = {51, 459, 153, 153};
  const int rows_tiles[2] = {8, 16}; /* batch 64, 128: 2 or 4 row tiles x 4 column tiles */
  const int want[2][4] = {{1, 4, 1, 1}, {1, 2, 1, 1}}; /* 459 x 264 / 32,640 = 3.7; 153: 1.2 */
  for (int r = 0; r < 2; r++) {
    long long work = 0;
    for (int s = 0; s < 5; s++)
      for (int h = 0; h < 4; h++) work += (long long)rows_tiles[r] * K[h];
    for (int h = 0; h < 4; h++)
      ck_assert_msg(parts(K[h], work, 2) == want[r][h], "%d tiles a problem, K %d: %d parts, want %d", rows_tiles[r],
                    K[h], parts(K[h], work, 2), want[r][h]);
  }
  /* F3 in fp32 at batch 32: 240 tiles of K = 256 in the launch; 1.6 parts' worth rounds to 1 (a count of
   * blocks rounded up, 264 / 240, gave 2) */
  ck_assert_int_eq(parts(256, 240LL * 256, 2), 1);
}
END_TEST

/* for every depth, work and occupancy: whole chunks, 512 k a part at most
 * (beyond 512), two chunks a part at least when split, at most
 * max(sqrt(K / 16), K / 512) parts; more work never gives more parts, more
 * occupancy never fewer */
START_TEST(test_bounds) {
  const long long works[] = {1, 64, 4096, 65536, 1 << 20, 1LL << 26};
  for (int K = 1; K <= 8192; K++) {
    int cap = 1;
    while ((cap + 1) * (cap + 1) * 16 <= K) cap++;
    const int most = cap > (K + SPLIT_MAX_K - 1) / SPLIT_MAX_K ? cap : (K + SPLIT_MAX_K - 1) / SPLIT_MAX_K;
    for (int w = 0; w < 6; w++)
      for (int occ = 1; occ <= 4; occ++) {
        const int kper = gemm_split_kper(K, works[w], occ, 132), p = (K + kper - 1) / kper;
        ck_assert_msg(kper % GBK == 0 && kper >= GBK, "K %d: kper %d", K, kper);
        ck_assert_msg(K <= SPLIT_MAX_K || kper <= SPLIT_MAX_K, "K %d: kper %d", K, kper);
        ck_assert_msg(p == 1 || kper >= SPLIT_MIN_CHUNKS * GBK, "K %d: %d parts of %d", K, p, kper);
        ck_assert_msg(p >= 1 && p <= most, "K %d work %lld occ %d: %d parts, at most %d", K, works[w], occ, p, most);
        if (w > 0) ck_assert_int_le(p, parts(K, works[w - 1], occ));
        if (occ > 1) ck_assert_int_ge(p, parts(K, works[w], occ - 1));
      }
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("split-rule");
  TCase *tc = tcase_create("rule");
  tcase_add_test(tc, test_deep_alone);
  tcase_add_test(tc, test_mixed_depths);
  tcase_add_test(tc, test_bounds);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
