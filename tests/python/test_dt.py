"""The Decision Transformer through the daemon and the Python client (issue 30;
docs/learner.md §16): PretrainDT and Act with policy dt, their errors, a
checkpoint that continues bit-identically, the trunk1 hand-over, and a
population whose members pre-train their own DTs. The math itself is pinned
in C (tests/test-dt.c against the golden case, tests/test-dt-learner.c
against the spec); here the oracle for each answer is a second trainer fed
the same way, or the config's own rule."""
import math
import unittest

import numpy as np

import dqnd
from test_client import SMALL, DaemonTest, batch

DT = dict(SMALL, dt_layers=1, dt_context=4, dt_embed=16, dt_heads=2, dt_max_ep_len=20, dt_batch=8, dt_rtg_scale=5,
          dt_lr=0.003, dt_warmup=5)


def window(tag, k=3, S=6):
    rng = np.random.default_rng(tag)
    return dict(states=rng.uniform(-1, 1, (k, S)).astype(np.float32), rtg=np.linspace(4, 2, k),
                timesteps=np.arange(k), actions=(np.arange(k) * 5 + tag) % 12)


class DTTest(DaemonTest):
    def client(self):
        return dqnd.Client(self.d.url, timeout=60)

    def code(self, code, fn, *a, needle=None, **kw):
        with self.assertRaises(dqnd.DqndError) as cm:
            fn(*a, **kw)
        self.assertEqual(cm.exception.code, code, str(cm.exception))
        if needle:
            self.assertIn(needle, cm.exception.message)

    def test_pretrain_act_errors(self):
        with self.client() as c:
            t = c.create_trainer("dt", DT)
            cfg = t["config"]
            self.assertEqual((cfg["dt_layers"], cfg["dt_context"], cfg["dt_clip"]), ("1", "4", "0.25"))
            self.code(9, c.pretrain_dt, "dt", 3, needle="no whole episode that has ended")
            c.submit("dt", **batch(60, 1))  # an episode ends every 5th transition
            s = c.pretrain_dt("dt", 20)
            self.assertEqual((s["dt_step"], s["steps_run"], s["stopped"]), (20, 20, False))
            self.assertTrue(math.isfinite(s["loss_mean"]) and s["loss_mean"] > 0)
            self.assertGreater(s["tokens_per_s"], 0)
            self.assertAlmostEqual(s["lr"], 0.003, places=6)  # the warm-up of 5 steps is over
            self.assertFalse(s["handed_over"])
            a = c.act_dt("dt", **window(2))
            self.assertTrue(0 <= a < 12)
            w = window(2)
            w["actions"][-1] = 11 - w["actions"][-1]  # the action being chosen is not read
            self.assertEqual(c.act_dt("dt", **w), a)
            self.code(3, c.act_dt, "dt", **window(3, k=5), needle="count: 5 steps is outside [1, dt_context = 4]")
            w = window(4)
            w["rtg"] = np.array([1.0, math.nan, 0.0])
            self.code(3, c.act_dt, "dt", **w, needle="rtg[1]: not finite")
            w = window(4)
            w["actions"][0] = 12
            self.code(3, c.act_dt, "dt", **w, needle="actions[0]: 12 is outside [0, 12)")
            self.code(3, c.pretrain_dt, "dt", 0, needle="n: 0 is outside")
            c.create_trainer("nodt", SMALL)
            self.code(9, c.pretrain_dt, "nodt", 1, needle="has no Decision Transformer")
            self.code(9, c.act_dt, "nodt", **window(1), needle="policy: trainer 'nodt' has no Decision Transformer")
            self.code(3, c.create_trainer, "dtbad", dict(DT, dt_heads=3), needle="dt_heads: 3 does not divide")

    def test_later_step_without_window(self):
        """a trainer of one whose first step draws a window and whose second
        draws none (one ended episode among 4,000 slots; the oracle is the
        window rule's Philox draws) answers with the step that ran: stopped,
        stop reason "no window"; the next call, whose first step draws none,
        is refused. A return-to-go whose quotient by dt_rtg_scale overflows
        is refused naming rtg, and states too large for the forward get no
        action (its logits are not finite) rather than action 0"""
        n, rows = 4000, DT["dt_batch"]

        def hits(seed, step):
            return sum(philox_below(philox_v0(seed, 11, step, i * 16 + k), n) == 0 for i in range(rows)
                       for k in range(16))
        seed = next(s for s in range(1, 100000) if hits(s, 0) > 0 and hits(s, 1) == 0)
        with self.client() as c:
            c.create_trainer("dtlate", dict(DT, seed=seed, replay_capacity=n))
            sparse = batch(n, 9)
            sparse["dones"] = np.arange(n) == 0  # slot 0 ends an episode; the rest is one open episode
            c.submit("dtlate", **sparse)
            s = c.pretrain_dt("dtlate", 3)
            self.assertEqual((s["steps_run"], s["dt_step"], s["stopped"], s["stop_reason"]), (1, 1, True, "no window"))
            self.assertTrue(math.isfinite(s["loss_last"]) and s["loss_last"] > 0)
            self.code(9, c.pretrain_dt, "dtlate", 2, needle="pre-training step 2 drew no window")
            self.assertEqual(c.trainer_info("dtlate")["state"], "ready")
            c.create_trainer("dtscale", dict(DT, dt_rtg_scale=1e-6))
            w = window(5)
            w["rtg"] = np.array([1e33, 1.0, 0.0])
            self.code(3, c.act_dt, "dtscale", **w, needle="rtg[0]: 1e+33 / dt_rtg_scale 1e-06 is not finite")
            w = window(5)
            w["states"][-1] = 3e38
            self.code(9, c.act_dt, "dtscale", **w, needle="logits are not finite")

    def test_checkpoint_continues(self):
        """a saved DT trainer (with its replay) loaded as a new trainer
        pre-trains on exactly as the one it came from"""
        with self.client() as c:
            c.create_trainer("dtc", DT)
            c.submit("dtc", **batch(80, 5))
            c.pretrain_dt("dtc", 7)
            ck = c.save_checkpoint("dtc", with_replay=True)
            c.load_checkpoint("dtc2", path=ck["path"], create=True)
            a, b = c.pretrain_dt("dtc", 5), c.pretrain_dt("dtc2", 5)
            self.assertEqual(a["dt_step"], 12)
            for k in ("dt_step", "loss_mean", "loss_last", "grad_norm_last"):
                self.assertEqual(a[k], b[k], k)
            self.assertEqual(c.act_dt("dtc", **window(9)), c.act_dt("dtc2", **window(9)))

    def test_handover(self):
        """dt_handover=trunk1 (dt_embed = trunk_h1 = 16): applied by each
        PretrainDT until the first DQN step, never after"""
        with self.client() as c:
            c.create_trainer("dth", dict(DT, dt_handover="trunk1"))
            c.submit("dth", **batch(60, 6))
            self.assertTrue(c.pretrain_dt("dth", 3)["handed_over"])
            c.step("dth", 1)
            self.assertFalse(c.pretrain_dt("dth", 3)["handed_over"])
            self.code(3, c.create_trainer, "dth2", dict(DT, dt_handover="trunk1", trunk_h1=32),
                      needle="dt_handover: trunk1 needs dt_embed (16) = trunk_h1 (32)")

    def test_population(self):
        """every member pre-trains its own DT on its own data; member 1 of the
        population answers as a lone trainer seeded as it is (seed + 1) and
        fed the same"""
        with self.client() as c:
            c.create_trainer("dtp", DT, population=2)
            c.submit("dtp", **batch(60, 7), member=0)
            c.submit("dtp", **batch(60, 8), member=1)
            s = c.pretrain_dt("dtp", 6)
            self.assertEqual(len(s["members"]), 2)
            self.assertEqual([m["dt_step"] for m in s["members"]], [6, 6])
            self.assertNotEqual(s["members"][0]["loss_last"], s["members"][1]["loss_last"])
            c.create_trainer("dtlone", dict(DT, seed=DT["seed"] + 1))
            c.submit("dtlone", **batch(60, 8))
            lone = c.pretrain_dt("dtlone", 6)
            self.assertEqual(lone["loss_last"], s["members"][1]["loss_last"])
            self.assertEqual(c.act_dt("dtp", **window(3), member=1), c.act_dt("dtlone", **window(3)))

    def test_population_member_without_window(self):
        """a member whose replay holds one ended episode among 4,000 open
        slots draws no window (every draw misses it: the oracle is the
        window rule's Philox draws, below) and stops alone: PretrainDT
        answers with the other member's steps, each member's steps_run
        saying what ran"""
        seed, n, rows = DT["seed"], 4000, DT["dt_batch"]
        hits = sum(philox_below(philox_v0(seed + 1, 11, 0, i * 16 + k), n) == 0 for i in range(rows) for k in range(16))
        self.assertEqual(hits, 0, "member 1's draws hit slot 0: pick another seed for this case")
        with self.client() as c:
            c.create_trainer("dtw", dict(DT, replay_capacity=n), population=2)
            c.submit("dtw", **batch(60, 7), member=0)
            sparse = batch(n, 9)
            sparse["dones"] = np.arange(n) == 0  # slot 0 ends an episode; the rest is one open episode
            c.submit("dtw", **sparse, member=1)
            s = c.pretrain_dt("dtw", 4)
            self.assertEqual([m["steps_run"] for m in s["members"]], [4, 0])
            self.assertEqual([m["dt_step"] for m in s["members"]], [4, 0])
            # member 1 is not stopped: it pre-trains once its replay has more ended episodes
            self.assertEqual(c.trainer_info("dtw", member=1)["state"], "ready")


def philox_v0(seed, stream, step, lane):
    """word 0 of Philox4x32-10 at (seed, stream, step, lane), as kernels/philox.h draws it"""
    m = 0xFFFFFFFF
    c = [lane & m, step & m, step >> 32, stream]
    k0, k1 = seed & m, seed >> 32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & m, (p0 >> 32) ^ c[3] ^ k1, p0 & m]
        k0, k1 = (k0 + 0x9E3779B9) & m, (k1 + 0xBB67AE85) & m
    return c[0]


def philox_below(u, n):
    return (u * n) >> 32


if __name__ == "__main__":
    unittest.main(verbosity=2)
