"""optuna_search.py's goal-conditioned task (--env bitflip): bit flipping
(dqnd.envs.BitFlip, the HER paper's environment) with every feature of the
learner in the search space (issue 31; docs/population.md):

    attention on or off, dt_layers 0 or 1 (a Decision Transformer pre-trained
    on a dataset of episodes, its first layer handed to the DQN's trunk or
    not), ensemble_k 1 or 3 (with priors), NoisyNet, prioritised replay,
    her_ratio, her_strategy, n_step, lr and gamma.

A round plays --envs episodes side by side to their ends (one Act a time
step for the unfinished ones, epsilon-greedy), each submitted whole with its
episode id and end (HER and the DT read the episodes' bounds); the value a
trial reports is the greedy policy's success rate over fixed evaluation
episodes. The same interface as optuna_search.py's meanrev parts:
sample_config(trial, dt), dt_dataset(seed, n, rng), Collector(seed, n),
evaluate(client, name, envs), eval_envs(seed, n).
"""
import numpy as np

import dqnd

EVAL_EPISODE0 = 1 << 40  # evaluation episodes never meet training ones
DT_EPISODE0 = 1 << 39  # the DT's dataset: nor these
VALUE_LABEL = "greedy success rate"  # what a trial reports (--plot's axis)
BITS = 8  # set from --bits by optuna_search.py before anything runs


def sample_config(trial, dt=False):
    """BitFlip.learner_config(BITS) (HER on the whole state) with every
    searched field drawn; dt (--dt) adds dt_layers 0 or 1 to the space"""
    cfg = dict(dqnd.envs.BitFlip.learner_config(BITS))
    cfg["batch"] = 64
    cfg["lr"] = trial.suggest_float("lr", 3e-4, 3e-3, log=True)
    cfg["gamma"] = trial.suggest_float("gamma", 0.9, 0.99)
    cfg["her_ratio"] = trial.suggest_float("her_ratio", 0.3, 0.9)
    cfg["her_strategy"] = trial.suggest_categorical("her_strategy", ["future", "final", "episode"])
    cfg["n_step"] = trial.suggest_categorical("n_step", [1, 3])
    cfg["prioritized"] = trial.suggest_categorical("prioritized", [0, 1])
    cfg["noisy"] = trial.suggest_categorical("noisy", [0, 1])
    if trial.suggest_categorical("attention", [0, 1]):
        cfg.update(attn_tokens=4, attn_heads=2)
    cfg["ensemble_k"] = trial.suggest_categorical("ensemble_k", [1, 3])
    if cfg["ensemble_k"] > 1:
        cfg["ensemble_prior_scale"] = 1
    if dt and trial.suggest_categorical("dt_layers", [0, 1]):
        cfg.update(dt_layers=1, dt_context=4, dt_embed=cfg["trunk_h1"], dt_heads=2, dt_max_ep_len=BITS + 1,
                   dt_rtg_scale=BITS, dt_batch=16, dt_lr=3e-3, dt_warmup=10)
        trial.suggest_categorical("dt_pretrain_steps", [200, 400])
        cfg["dt_handover"] = trial.suggest_categorical("dt_handover", ["none", "trunk1"])
    return cfg


def _episode(env, e, policy):
    o, _ = env.reset(episode=e)
    rows = []
    while True:
        a = policy(o)
        o2, r, term, trunc, _ = env.step(a)
        rows.append((o, a, r, o2, term, trunc, e))
        o = o2
        if term or trunc:
            return rows


def _arrays(rows):
    s, a, r, s2, d, end, ep = zip(*rows)
    return dict(states=np.stack(s), actions=np.array(a), rewards=np.array(r, dtype=np.float32),
                next_states=np.stack(s2), dones=np.array(d, dtype=np.uint8), episode_ids=np.array(ep),
                episode_ends=np.array(end, dtype=np.uint8))


def dt_dataset(seed, n, rng):
    """n whole episodes, alternately of the uniform random policy and of a
    demonstrator that flips the lowest wrong bit (a random one 30% of the
    time): the arrays client.submit takes"""
    env = dqnd.envs.BitFlip(BITS, seed=seed)

    def demo(o):
        wrong = np.flatnonzero(o[:BITS] != o[BITS:])
        return int(rng.integers(BITS)) if rng.random() < 0.3 or not len(wrong) else int(wrong[0])

    rows = []
    for e in range(n):
        rows += _episode(env, DT_EPISODE0 + e, (lambda o: int(rng.integers(BITS))) if e % 2 == 0 else demo)
    return _arrays(rows)


class Collector:
    """n environments; a round plays one episode in each to its end, acting
    epsilon-greedily around the trainer's greedy actions, and returns the
    episodes one after another (each whole: the replay's episodes are runs
    of consecutive rows). round()'s k is not used (an episode is at most
    BITS steps)."""

    def __init__(self, seed, n):
        self.envs = [dqnd.envs.BitFlip(BITS, seed=seed) for _ in range(n)]
        self.next_episode = 0

    def round(self, client, name, k, eps, rng, member=0):
        n = len(self.envs)
        ids = np.arange(self.next_episode, self.next_episode + n)
        self.next_episode += n
        obs = np.stack([env.reset(episode=int(e))[0] for env, e in zip(self.envs, ids)])
        rows, live = [[] for _ in range(n)], list(range(n))
        while live:
            acts = client.act(name, obs[live], member=member)
            for j, i in enumerate(live):
                a = int(rng.integers(BITS)) if rng.random() < eps else int(acts[j])
                o2, r, term, trunc, _ = self.envs[i].step(a)
                rows[i].append((obs[i].copy(), a, r, o2, term, trunc, ids[i]))
                obs[i] = o2
            live = [i for i in live if not (rows[i][-1][4] or rows[i][-1][5])]
        a = _arrays([row for ep in rows for row in ep])
        return (a["states"], a["actions"], a["rewards"], a["next_states"], a["dones"], a["episode_ids"],
                a["episode_ends"])


def eval_envs(seed, n):
    return [dqnd.envs.BitFlip(BITS, seed=seed) for _ in range(n)]


def evaluate(client, name, envs, member=0):
    """The greedy policy's success rate over the fixed episodes `envs` (one
    each), all in lockstep (one Act a time step for the unfinished ones)"""
    obs = np.stack([env.reset(episode=EVAL_EPISODE0 + i)[0] for i, env in enumerate(envs)])
    live, wins = list(range(len(envs))), 0
    while live:
        acts = client.act(name, obs[live], member=member)
        done = []
        for j, i in enumerate(live):
            obs[i], _, term, trunc, _ = envs[i].step(int(acts[j]))
            wins += term
            if term or trunc:
                done.append(i)
        live = [i for i in live if i not in done]
    return wins / len(envs)
