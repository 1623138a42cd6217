"""Everything at once through the daemon (issue 31 item 1; docs/testing.md):
one CPU trainer with attention, K = 3 ensemble heads with priors, HER
(future, ratio 0.3), 3-step returns, prioritised replay, NoisyNet and a
Decision Transformer (its first layer handed to the DQN's trunk), on the
goal-conditioned bit-flipping environment (client/bitflip_env.h, 8 bits),
driven as a user would drive it: a dataset of episodes (a random policy's
and a noisy demonstrator's), DT pre-training on it, then DQN training
episode by episode. Asserted: every stat finite; the pre-training
loss falling, then the DQN loss; the agent reaching the goal far more often
than chance (a uniformly random policy, measured here on the same
episodes); and a checkpoint saved mid-run (with its replay) that, loaded as
a new trainer and fed the same, continues bit for bit.

EVERYTHING_EPISODES (default 400) sets the DQN episodes: the learning bar is
for the default."""
import math
import os
import unittest

import numpy as np

import dqnd
from dqnd.envs import BitFlip
from test_client import DaemonTest

N = 8
EPISODES = int(os.environ.get("EVERYTHING_EPISODES", "400"))
DATASET_EPISODES = 200  # the DT pre-trains on them; half are random: the chance baseline
CHECKPOINT_AT = EPISODES // 2
TWIN_EPISODES = 10  # the checkpoint's twin runs beside the original this long
if EPISODES < 2 * TWIN_EPISODES:
    raise SystemExit(f"EVERYTHING_EPISODES={EPISODES}: at least {2 * TWIN_EPISODES} (the twin runs {TWIN_EPISODES})")


def config():
    c = BitFlip.learner_config(N)
    c.update(attn_tokens=4, attn_heads=2, ensemble_k=3, ensemble_prior_scale=1,
             her_strategy="future", her_ratio=0.3, n_step=3, prioritized=1, noisy=1, batch=64,
             dt_layers=1, dt_context=4, dt_embed=c["trunk_h1"], dt_heads=2, dt_max_ep_len=N + 1, dt_batch=16,
             dt_lr=0.003, dt_warmup=10, dt_rtg_scale=N, dt_handover="trunk1", seed=7)
    return c


def finite(test, stats, what):
    for k, v in stats.items():
        if isinstance(v, float):
            test.assertTrue(math.isfinite(v), f"{what}: {k} = {v}")


class Episode:
    """one episode's transitions, submitted whole (HER and the DT read its bounds)"""

    def __init__(self, env, episode):
        self.s, _ = env.reset(episode=episode)
        self.id = episode
        self.rows = []

    def add(self, a, s2, r, term, trunc):
        """the transition of action a; True when the episode has ended"""
        self.rows.append((self.s, a, r, s2, term, trunc))
        self.s = s2
        return term or trunc

    def submit(self, c, name):
        s, a, r, s2, d, e = zip(*self.rows)
        n = len(self.rows)
        return c.submit(name, np.array(s), np.array(a), np.array(r, dtype=np.float32), np.array(s2),
                        np.array(d, dtype=np.uint8), episode_ids=np.full(n, self.id),
                        episode_ends=np.array(e, dtype=np.uint8))


class EverythingTest(DaemonTest):
    def episode(self, c, names, env, e, eps, rng):
        """one DQN episode: the first trainer acts (noisy, epsilon-greedy with a
        coin from rng), every trainer in names gets the same episode and as
        many steps as it has transitions; the others must act the same.
        Returns (success, each trainer's step stats)"""
        ep = Episode(env, e)
        while True:
            acts = [int(c.act(n, ep.s[None, :], noisy=True, episode=e)[0]) for n in names]
            for n, a in zip(names[1:], acts[1:]):
                self.assertEqual(a, acts[0], f"episode {e}: trainer {n} acts otherwise")
            a = acts[0]
            if rng.random() < eps:
                a = int(rng.integers(N))
            if ep.add(a, *env.step(a)[:4]):
                break
        out = []
        for n in names:
            ep.submit(c, n)
            st = c.step(n, len(ep.rows))
            finite(self, st, f"episode {e}, {n}")
            out.append(st)
        return bool(ep.rows[-1][4]), out

    def test_everything(self):
        env = BitFlip(N, seed=3)
        rng = np.random.default_rng(11)
        with dqnd.Client(self.d.url, timeout=600) as c:
            info = c.create_trainer("all", config())
            self.assertEqual(info["config"]["dt_handover"], "trunk1")
            # the DT's dataset: episodes of a uniformly random policy (their
            # success share is chance's) and, alternating with them, of a
            # demonstrator that flips the lowest wrong bit, a random one 30% of
            # the time
            wins = 0
            for e in range(DATASET_EPISODES):
                ep = Episode(env, e)
                while True:
                    wrong = np.flatnonzero(ep.s[:N] != ep.s[N:])
                    a = int(rng.integers(N)) if e % 2 == 0 or rng.random() < 0.3 or not len(wrong) else int(wrong[0])
                    if ep.add(a, *env.step(a)[:4]):
                        break
                ep.submit(c, "all")
                wins += bool(ep.rows[-1][4]) if e % 2 == 0 else 0
            chance = wins / (DATASET_EPISODES // 2)
            # pre-training: four calls of 100 steps, the loss falling
            dt = []
            for i in range(4):
                s = c.pretrain_dt("all", 100)
                finite(self, s, f"pretrain_dt call {i}")
                self.assertEqual(s["steps_run"], 100)
                self.assertEqual(s["handed_over"], True)
                dt.append(s["loss_mean"])
                if i:
                    self.assertLess(dt[i], dt[i - 1], f"the DT's loss rose in call {i}")
            print(f"DT pre-training loss by call: {', '.join(f'{x:.4f}' for x in dt)}; random success {chance:.3f}")
            self.assertLess(dt[-1], 0.95 * dt[0], "the DT's loss did not fall")
            # DQN training, episode by episode; the checkpoint's twin beside it for a while
            losses, wins = [], []
            decay = int(0.4 * EPISODES)
            for k in range(EPISODES):
                e = DATASET_EPISODES + k
                eps = max(0.0, 1.0 - k / decay) * 0.5
                names = ["all", "twin"] if CHECKPOINT_AT <= k < CHECKPOINT_AT + TWIN_EPISODES else ["all"]
                if k == CHECKPOINT_AT:
                    ck = c.save_checkpoint("all", with_replay=True)
                    c.load_checkpoint("twin", path=ck["path"], create=True)
                    self.assertEqual(c.stats("twin")["step"], c.stats("all")["step"])
                ok, st = self.episode(c, names, env, e, eps, rng)
                if len(names) == 2:
                    for key in ("step", "loss_mean", "loss_last", "grad_norm_last", "q_mean", "per_beta"):
                        self.assertEqual(st[0][key], st[1][key], f"episode {e}: the twin's {key}")
                if k == CHECKPOINT_AT + TWIN_EPISODES - 1:  # and their Q values on new states, bit for bit
                    probe = np.stack([env.reset(episode=10_000 + i)[0] for i in range(16)])
                    qa, qb = c.act("all", probe, q=True)[1], c.act("twin", probe, q=True)[1]
                    self.assertTrue(all(np.array_equal(x, y) for x, y in zip(qa, qb)), "the twin's Q values differ")
                    c.destroy_trainer("twin")
                losses.append(st[0]["loss_mean"])
                wins.append(ok)
                if k % 50 == 49:
                    print(f"  episodes {k + 1}: success {np.mean(wins[-50:]):.2f}, loss {np.mean(losses[-50:]):.4f}")
            first, final = np.mean(losses[:50]), np.mean(losses[-50:])
            success = np.mean(wins[-100:])
            print(f"DQN loss {first:.4f} -> {final:.4f}; success over the last 100 episodes {success:.2f} "
                  f"(random {chance:.3f})")
            self.assertLess(final, 0.8 * first, "the DQN loss did not fall")
            finite(self, c.stats("all"), "stats")
            self.assertGreaterEqual(success, max(0.3, 5 * chance), "the agent did not learn bit flipping")


if __name__ == "__main__":
    unittest.main(verbosity=2)
