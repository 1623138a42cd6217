#!/usr/bin/env python3
"""A hyperparameter search over dqnd daemons with Optuna (ask and tell).

Each trial creates a trainer on one daemon, streams meanrev transitions to it
(the loop of `dqnctl demo`: parallel episodes, per-branch epsilon-greedy
decayed over the rounds, a Step after each round), evaluates the greedy
policy every few rounds and reports the fraction of the optimal return it
reaches over fixed evaluation episodes; MedianPruner stops poor trials early.
--per-daemon K worker threads per daemon (default 1), each with its own
Client, keep K trials (or K populations) running on each daemon at once: a
daemon's capacity; a trial runs on one daemon, as trainer STUDY-NUMBER.

After each evaluation a trial saves a checkpoint of its trainer (with the
replay) and keeps its own side (the environments, the random state) in
memory: its resume point. A daemon that stops answering (connection refused,
unavailable, a timeout) is tried again with back-off, 0.5 s doubling to 5 s,
for --daemon-retry seconds. When it answers again (systemd restarts a crashed
dqnd 2 s later, and it restores its trainers from their newest checkpoints)
the trial loads its resume point's checkpoint into the trainer and goes on
from the round after it, so it neither FAILs nor reports a round twice. A
daemon that does not come back in time fails its running trial and is
dropped; the others go on.

    dqnd --listen ipc:///tmp/a.sock --state-dir /tmp/a --backend cpu &
    dqnd --listen ipc:///tmp/b.sock --state-dir /tmp/b --backend cpu &
    PYTHONPATH=build/client/python python3 client/python/examples/optuna_search.py \\
        --daemons ipc:///tmp/a.sock,ipc:///tmp/b.sock --storage sqlite:///search.db --plot curves.png

With --population N each daemon trains N trials at a time as the members of
one population trainer (a member whose trial ends takes the next one of its
shape), and
--pbt R adds population-based training (optuna_population.py says how).

(--plot needs matplotlib: apt-get install python3-matplotlib; without it
--plot is a usage error, exit 2, before anything runs.) Rerun with the same
--storage and --study to resume (--trials counts what the study holds).
Drivers on several machines share a study through PostgreSQL.
"""
import argparse
import collections
import copy
import functools
import re
import signal
import sys
import threading
import time
import warnings

import numpy as np

import optuna_population  # --population and --pbt (beside this file)
import search_bitflip  # --env bitflip (beside this file)

try:  # --help works without them; main() says what is missing
    import optuna
    TrialState = optuna.trial.TrialState
except ImportError:
    optuna = None
try:
    import dqnd
except ImportError:
    dqnd = None

UNREACHABLE = (4, 14)  # DEADLINE_EXCEEDED, UNAVAILABLE: the daemon is gone (or stuck, or restarting)
NOT_FOUND, ALREADY_EXISTS = 5, 6
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0  # the back-off between attempts to reach a daemon
MAX_RESUMES = 3  # a trial resumed this often from the same point without getting past it FAILs
EVAL_EPISODE0 = 1 << 40  # evaluation episodes never meet training ones (as in demo_evaluate)
DT_EPISODE0 = 1 << 39  # --dt's random episodes: nor these
VALUE_LABEL = "greedy return / optimal return"  # what a trial reports (--plot's axis)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Optuna search of dqnd learner hyperparameters on a built-in environment. Objective "
        "(maximised), meanrev: the greedy policy's return over fixed evaluation episodes as a fraction of the "
        "optimal return over the same episodes; bitflip: its success rate over fixed evaluation episodes.",
        epilog="Rerunning with the same --storage and --study resumes the study. Exit status: 0 done, "
        "1 every daemon was dropped before --trials were done, 2 usage, 130/143 stopped by SIGINT/SIGTERM "
        "(the running trials FAIL).")
    p.add_argument("--daemons", metavar="URL,URL,...",
                   help="daemons to spread the trials over, --per-daemon worker threads each (default: dqnd's "
                   "default socket)")
    p.add_argument("--per-daemon", type=int, default=1, metavar="K",
                   help="trials (or populations) each daemon runs at once: its capacity, one worker thread and "
                   "Client each (default: %(default)s)")
    p.add_argument("--storage", default="sqlite:///dqnd_search.db", metavar="URL",
                   help="sqlite:///FILE.db, journal:FILE (an Optuna journal file) or "
                   "postgresql://USER@HOST/DB (default: %(default)s)")
    p.add_argument("--study", metavar="NAME", help="study name (default: dqnd-ENV)")
    p.add_argument("--env", choices=("meanrev", "bitflip"), default="meanrev",
                   help="meanrev (the trading toy; lr, gamma, batch, target_period, prioritized searched) or "
                   "bitflip (goal-conditioned, HER: every feature searched, search_bitflip.py; a round plays "
                   "one episode in each of --envs environments, --collect unused) (default: %(default)s)")
    p.add_argument("--bits", type=int, default=8, metavar="N", help="bitflip: the number of bits (default: "
                   "%(default)s)")
    p.add_argument("--trials", type=int, default=6, metavar="N",
                   help="ask no more trials once the study holds N finished ones (any state, earlier runs' "
                   "included) plus this driver's running ones; drivers sharing a study may end a few over N "
                   "(default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="sampler, trainer and environment seed; give each driver "
                   "sharing a study its own (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=60, help="collect+train rounds per trial (default: %(default)s)")
    p.add_argument("--envs", type=int, default=32, help="parallel training episodes (default: %(default)s)")
    p.add_argument("--collect", type=int, default=4, metavar="K", help="env steps per episode per round, "
                   "so K x --envs transitions a round (default: %(default)s)")
    p.add_argument("--train-steps", type=int, default=16, metavar="N",
                   help="learner steps (one Step call) after each round (default: %(default)s)")
    p.add_argument("--samples-per-insert", type=float, default=0.0, metavar="X",
                   help="continuous training instead of Step: the daemon trains X samples per inserted "
                   "transition as data arrives (default: 0, off)")
    p.add_argument("--eval-every", type=int, default=10, metavar="R",
                   help="rounds between evaluations, each reported to the pruner (default: %(default)s)")
    p.add_argument("--eval-episodes", type=int, default=16, help="episodes per evaluation (default: %(default)s)")
    p.add_argument("--eps-start", type=float, default=0.5, help="exploration in the first round (default: %(default)s)")
    p.add_argument("--eps-end", type=float, default=0.02, help="exploration in the last round (default: %(default)s)")
    p.add_argument("--backend", default="", help="learner backend, cpu or cuda (default: the daemon's)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="seconds to wait for a reply before the daemon counts as gone (default: %(default)s)")
    p.add_argument("--daemon-retry", type=float, default=60.0, metavar="S",
                   help="how long a daemon that stops answering (refused, unavailable, timed out; also at the "
                   "start) is tried again, with back-off from 0.5 s doubling to 5 s; back in time, its trial "
                   "resumes from its last evaluation, else it FAILs and the daemon is dropped; 0 = at once "
                   "(default: %(default)s)")
    p.add_argument("--population", type=int, default=1, metavar="N",
                   help="train N trials at a time as the members of one population trainer on a daemon (the "
                   "same launches on a CUDA daemon); each is pruned or finished on its own, and its member then "
                   "starts over with the study's next trial where that draws the same shape fields (not with a DT); "
                   "a daemon lost and "
                   "back within --daemon-retry resumes the population from its last evaluation "
                   "(default: %(default)s, a trainer per trial)")
    p.add_argument("--no-refill", dest="refill", action="store_false",
                   help="with --population: a member whose trial ended stays idle until its population ends "
                   "(the default refills it with the study's next trial of the population's shape)")
    p.add_argument("--pbt", type=int, default=0, metavar="R",
                   help="with --population: every R rounds (a multiple of --eval-every) of their own the worst "
                   "quarter of the members of one age copy the best quarter's (exploit) with lr x 0.8 or 1.25 "
                   "(explore) "
                   "(default: 0, off)")
    p.add_argument("--dt", action="store_true",
                   help="the search space gains a Decision Transformer (docs/learner.md §16): dt_layers 0, 1 or 2; "
                   "when on, the pre-training steps (200 or 600; --env bitflip 200 or 400) and dt_handover "
                   "(none or trunk1): the trial first plays --dt-episodes random episodes, pre-trains on them, "
                   "then trains as usual "
                   "(bitflip: dt_layers 0 or 1, the episodes alternately random and a noisy demonstrator's)")
    p.add_argument("--dt-episodes", type=int, default=128, metavar="N",
                   help="--dt: random episodes a trial collects before pre-training (default: %(default)s)")
    p.add_argument("--top", type=int, default=5, help="best trials listed at the end (default: %(default)s)")
    p.add_argument("--plot", metavar="FILE.png", help="write the learning curves (value against round) here")
    a = p.parse_args(argv)
    a.study = a.study or f"dqnd-{a.env}"
    if not 2 <= a.bits <= 64:
        p.error("--bits must be in [2, 64]")
    for k in ("trials", "rounds", "envs", "collect", "train_steps", "eval_every", "eval_episodes"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be at least 1")
    if a.per_daemon < 1 or a.per_daemon > 64:
        p.error("--per-daemon must be in [1, 64]")
    if a.population < 1 or a.population > 1024:
        p.error("--population must be in [1, 1024]")
    if a.pbt < 0 or (a.pbt and (a.population < 2 or a.pbt % a.eval_every)):
        p.error("--pbt needs --population 2 or more and a multiple of --eval-every")
    if a.timeout <= 0 or a.samples_per_insert < 0 or a.daemon_retry < 0:
        p.error("--timeout must be positive, --samples-per-insert and --daemon-retry at least 0")
    if a.plot:  # now, not after an hour of search
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error("--plot needs matplotlib, which is not installed: apt-get install python3-matplotlib "
                    "(or leave --plot out)")
    if optuna is None or dqnd is None:
        p.exit(2, "optuna_search.py: needs " + " and ".join(
            ["optuna (Debian: python3-optuna)"] * (optuna is None) +
            ["the dqnd package (PYTHONPATH=build/client/python, or meson install)"] * (dqnd is None)) + "\n")
    a.daemons = [u for u in (a.daemons or dqnd.default_url()).split(",") if u]
    if not a.daemons or len(set(a.daemons)) != len(a.daemons):
        p.error("--daemons: give each URL once")
    return a


def open_study(args):
    """journal:PATH is Optuna's journal file (several processes may share it);
    sqlite:// and postgresql:// go through SQLAlchemy. Drivers starting at once
    on a new database race to create its tables: the loser tries again."""
    for attempt in range(8):
        try:
            if args.storage.startswith("journal:"):
                storage = optuna.storages.JournalStorage(
                    optuna.storages.JournalFileStorage(args.storage[len("journal:"):]))
            else:
                storage = optuna.storages.RDBStorage(args.storage, engine_kwargs={"pool_pre_ping": True})
            study = optuna.create_study(
                study_name=args.study, storage=storage, direction="maximize", load_if_exists=True,
                pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=args.rounds // 3))
            # a resumed study draws on from where it is, not the first run's draws again
            study.sampler = optuna.samplers.TPESampler(seed=args.seed * 100003 + len(study.trials))
            return study
        except Exception as e:  # noqa: BLE001 (SQLAlchemy's errors, ValueError for a bad URL, ...)
            if attempt == 7 or type(e).__name__ not in ("IntegrityError", "ProgrammingError", "InternalError"):
                sys.exit(f"optuna_search.py: cannot open study '{args.study}' in {args.storage}: {e}")
            time.sleep(0.2 + 0.3 * np.random.default_rng().random())


def sample_config(trial, dt=False):
    """The demo's learner config (dqnd.envs.MeanRev.learner_config()) with the
    searched fields drawn for this trial; `dqnctl fields` lists them all.
    dt (--dt): a Decision Transformer too, whose pre-training steps are the
    trial's parameter dt_pretrain_steps (not a config field)."""
    cfg = dict(dqnd.envs.MeanRev.learner_config())
    cfg["lr"] = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
    cfg["gamma"] = trial.suggest_float("gamma", 0.0, 0.9)
    cfg["batch"] = trial.suggest_categorical("batch", [32, 64, 128])
    cfg["target_period"] = trial.suggest_categorical("target_period", [10, 50, 200])
    cfg["prioritized"] = trial.suggest_categorical("prioritized", [0, 1])
    if dt and trial.suggest_categorical("dt_layers", [0, 1, 2]):
        cfg.update(dt_layers=trial.params["dt_layers"], dt_context=4, dt_embed=cfg["trunk_h1"], dt_heads=2,
                   dt_max_ep_len=dqnd.envs.make("meanrev").horizon, dt_rtg_scale=10, dt_batch=32, dt_lr=3e-3,
                   dt_warmup=100)
        trial.suggest_categorical("dt_pretrain_steps", [200, 600])
        cfg["dt_handover"] = trial.suggest_categorical("dt_handover", ["none", "trunk1"])
    return cfg


def dt_dataset(seed, n, rng):
    """n whole meanrev episodes of the uniform random policy, episode after
    episode (the replay's episodes are runs of consecutive insertions), each
    ending truncated at the horizon: the arrays client.submit takes"""
    env = dqnd.envs.make("meanrev", seed=seed)
    rows = []
    for e in range(n):
        o, _ = env.reset(episode=DT_EPISODE0 + e)
        for t in range(env.horizon):
            a = int(rng.integers(0, env.n_actions))
            o2, r, term, trunc, _ = env.step(a)
            rows.append((o, a, r, o2, term, term or trunc or t == env.horizon - 1))
            o = o2
    s, a, r, s2, d, end = zip(*rows)
    return dict(states=np.stack(s), actions=np.array(a), rewards=np.array(r, dtype=np.float32),
                next_states=np.stack(s2), dones=np.array(d, dtype=np.uint8), episode_ends=np.array(end, dtype=np.uint8))


def dt_warmup(search, client, name, trial, cfg, seed, member=0, pretrain=True):
    """--dt, a trial whose config has a Decision Transformer: its random
    episodes into the trainer's (member's) replay, then, with pretrain,
    PretrainDT of the trial's steps (every member of a population at once);
    the stats go into the trial's user attributes"""
    if not int(cfg.get("dt_layers", 0)):
        return None
    rng = np.random.default_rng([seed, 17])
    client.submit(name, **search.dt_dataset(seed, search.a.dt_episodes, rng), member=member)
    if not pretrain:
        return None
    st = pretrain_dt(search, client, name, trial.params["dt_pretrain_steps"])
    search.log(f"trial {trial.number}: pre-trained its DT, {st['dt_step']} steps, loss {st['loss_mean']:.4f}"
               f"{', handed over to trunk1' if st['handed_over'] else ''}")
    return st


PRETRAIN_CHUNK = 50


def pretrain_dt(search, client, name, steps):
    """PretrainDT of `steps` on every member, in calls of PRETRAIN_CHUNK
    steps (each far inside the client's timeout, so a slow machine does not
    stop one at its deadline). Returns the last call's stats, each member's
    loss_mean (and a lone trainer's) the mean over all its steps and
    handed_over whether any call handed its DT over to trunk1. A call
    that stopped early anyway is said in the log, and the next calls run
    until the member that ran fewest (of those that ran in a whole call)
    has `steps`. Three stopped calls in a row with no progress, or a
    cancelled one, end it with RuntimeError (the trial FAILs; its daemon is
    not taken for gone); a stop for the daemon's shutdown raises
    UNAVAILABLE, as the daemon's going away does."""
    done, sums, last, idle, stuck = 0, {}, None, 0, set()
    while done < steps:
        k = min(PRETRAIN_CHUNK, steps - done)
        last = client.pretrain_dt(name, k)
        members = last.get("members", [last])
        for i, m in enumerate(members):
            s = sums.setdefault(i, [0.0, 0, False])
            s[0] += m["loss_mean"] * m["steps_run"]
            s[1] += m["steps_run"]
            s[2] = s[2] or bool(m.get("handed_over"))
        if not last["stopped"]:  # every member ran k, but one that stopped alone
            short = [i for i, m in enumerate(members) if m["steps_run"] < k]
            if short:
                stuck.update(short)
                search.log(f"{name}: members {short} stopped alone (no Decision Transformer window, or their "
                           "step diverged: see the daemon's log)")
            done, idle = done + k, 0
            continue
        live = [m["steps_run"] for i, m in enumerate(members) if i not in stuck] or [0]
        ran = min(live)
        search.log(f"{name}: PretrainDT stopped early ({last['stop_reason']}): member steps "
                   f"{[m['steps_run'] for m in members]}; going on until each has {steps}")
        if last["stop_reason"] == "shutdown":
            raise dqnd.DqndError(14, f"PretrainDT of {name} stopped: the daemon is shutting down")
        idle = idle + 1 if ran == 0 else 0
        if last["stop_reason"] == "cancelled" or idle == 3:
            raise RuntimeError(f"PretrainDT of {name} stopped ({last['stop_reason']}) without progress")
        done += ran
    for i, m in enumerate(last.get("members", [last])):
        m["loss_mean"] = sums[i][0] / sums[i][1] if sums[i][1] else float("nan")
        m["handed_over"] = sums[i][2]
    if "members" in last:
        last["loss_mean"], last["handed_over"] = last["members"][0]["loss_mean"], last["members"][0]["handed_over"]
    return last


class Collector:
    """Parallel training episodes; one round = `k` env steps of each, acting
    epsilon-greedily per branch around the trainer's greedy actions."""

    def __init__(self, seed, n):
        self.envs = [dqnd.envs.make("meanrev", seed=seed) for _ in range(n)]
        self.branches = self.envs[0].branches
        self.next_episode = 0
        self.obs = np.stack([self._reset(e) for e in self.envs])
        self.episode = np.arange(n)

    def _reset(self, env):
        self.next_episode += 1
        return env.reset(episode=self.next_episode - 1)[0]

    def round(self, client, name, k, eps, rng, member=0):
        rows = []
        for _ in range(k):
            sub = np.stack(np.unravel_index(client.act(name, self.obs, member=member), self.branches), axis=1)
            explore = rng.random(sub.shape) < eps  # each branch explores on its own
            sub = np.where(explore, rng.integers(0, self.branches, size=sub.shape), sub)
            act = np.ravel_multi_index(tuple(sub.T), self.branches)
            for i, env in enumerate(self.envs):
                s2, r, term, trunc, _ = env.step(int(act[i]))
                # a time limit is no terminal state: bootstrap through truncation
                rows.append((self.obs[i].copy(), act[i], r, s2, term, self.episode[i]))
                if term or trunc:
                    self.episode[i] = self.next_episode
                    s2 = self._reset(env)
                self.obs[i] = s2
        s, a, r, s2, d, ep = zip(*rows)
        return np.stack(s), np.array(a), np.array(r), np.stack(s2), np.array(d, dtype=np.uint8), np.array(ep)


def eval_envs(seed, n):
    return [dqnd.envs.make("meanrev", seed=seed) for _ in range(n)]


def evaluate(client, name, envs, member=0):
    """Greedy return / optimal return over the fixed episodes `envs`, all in
    lockstep (one Act per time step). meanrev's state does not depend on the
    action, so the optimal return is taken along the same path."""
    obs, best = [], []
    for i, env in enumerate(envs):
        o, info = env.reset(episode=EVAL_EPISODE0 + i)
        obs.append(o)
        best.append(info["optimal_action"])
    obs, ret, opt = np.stack(obs), 0.0, 0.0
    for _ in range(envs[0].horizon):
        acts = client.act(name, obs, member=member)
        for i, env in enumerate(envs):
            opt += env.reward(best[i])
            obs[i], r, _, _, info = env.step(int(acts[i]))
            best[i] = info["optimal_action"]
            ret += r
    return ret / opt


class Interrupted(Exception):
    pass


class Link:
    """A worker's connection to its daemon: the Client is replaced when the
    daemon went away and came back; name: the trainer it drives now (None
    between trials), for cancel_running."""

    def __init__(self, url, client):
        self.url, self.client, self.name = url, client, None


class TrialRun:
    """A running trial: its trainer, and its resume point (snap: the round,
    the checkpoint saved then, copies of the collector and the random
    generator; None: the start)."""

    def __init__(self, trial, name, cfg):
        self.trial, self.name, self.cfg = trial, name, cfg
        self.snap = None
        self.reported = set()  # rounds reported to Optuna
        self.resumes_at = {}  # resume round -> how often

    def resume_round(self):
        return self.snap["round"] if self.snap else 0


class Search:
    def __init__(self, args):
        self.a = args
        self.lock = threading.Lock()  # around every storage call and the counts
        self.stop = threading.Event()
        self.running = 0
        self.held = []  # population mode: asked trials waiting for a population (optuna_population.py)
        self.links = []  # the workers' Links (cancel_running)
        self.lost = {}  # url -> why
        self.t0 = time.monotonic()
        self.study = open_study(args)
        self.trainer_prefix = re.sub(r"[^A-Za-z0-9_.-]", "_", args.study)[:48]
        # the task: meanrev here, bitflip from search_bitflip.py
        task = sys.modules[__name__]
        if args.env == "bitflip":
            task = search_bitflip
            task.BITS = args.bits
        self.sample_config = functools.partial(task.sample_config, dt=args.dt)
        self.Collector, self.evaluate, self.dt_dataset = task.Collector, task.evaluate, task.dt_dataset
        self.eval_envs = functools.partial(task.eval_envs, args.seed, args.eval_episodes)
        self.value_label = task.VALUE_LABEL
        self.dt_warmup = functools.partial(dt_warmup, self)
        self.pretrain_dt = functools.partial(pretrain_dt, self)

    def log(self, msg):
        print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def finished(self):
        return len(self.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)))

    def connect(self, url, err=None):
        """A Client of url that answers Health. A daemon that does not
        (refused, unavailable, timed out) is tried again, RETRY_FIRST_S
        doubling to RETRY_MAX_S apart, for --daemon-retry seconds, then its
        last error is raised; any other error (a bad URL, a wrong token) at
        once. Interrupted when the search is stopped meanwhile."""
        deadline = time.monotonic() + self.a.daemon_retry
        delay, said = RETRY_FIRST_S, False
        again = err is not None  # a reconnect: the daemon was lost (or restarted) before
        while True:
            if self.stop.is_set():
                raise Interrupted()
            try:
                client = dqnd.Client(url, timeout=self.a.timeout)
                try:
                    if not client.health()["serving"]:
                        raise dqnd.DqndError(14, f"{url}: not serving")
                except BaseException:
                    client.close()
                    raise
                if said or again:
                    self.log(f"daemon {url} answers again")
                return client
            except dqnd.DqndError as e:
                if e.code not in UNREACHABLE:
                    raise
                err = e
            left = deadline - time.monotonic()
            if left <= 0:
                raise err
            if not said:
                self.log(f"daemon {url} does not answer ({err}); trying again for up to {self.a.daemon_retry:g} s")
                said = True
            if self.stop.wait(min(delay, left)):
                raise Interrupted()
            delay = min(delay * 2, RETRY_MAX_S)

    def worker(self, url):
        try:
            link = Link(url, self.connect(url))
        except Interrupted:
            return
        except dqnd.DqndError as e:
            return self.drop(url, e)
        with self.lock:
            self.links.append(link)
        try:
            if self.a.population > 1:  # optuna_population.py
                optuna_population.population_trials(self, link, self.sample_config, self.Collector, self.evaluate,
                                                    TrialState, dqnd, Interrupted, UNREACHABLE, refill=self.a.refill)
            else:
                self.trials(link)
        finally:
            with self.lock:
                self.links.remove(link)
            link.client.close()

    def cancel_running(self):
        """On SIGINT / SIGTERM, every second until the workers end: the
        command each worker has running on its daemon (a Step of
        --train-steps, a PretrainDT) cancelled there, on a connection of its
        own: it stops between steps and answers, and its trial FAILs, so the
        search ends in seconds whatever the steps."""
        with self.lock:
            busy = [(k.url, k.name, k.client.pending_request_id) for k in self.links if k.name]
        for url, name, rid in busy:
            try:
                with dqnd.Client(url, timeout=2) as c:
                    found = c.cancel(name, rid)
                if found != "none":
                    self.log(f"{name} on {url}: its {found} command cancelled")
            except dqnd.DqndError as e:
                self.log(f"{name} on {url}: the cancel failed ({e}); it stops after its command")

    def trials(self, link):
        url = link.url
        while not self.stop.is_set():
            with self.lock:
                if self.finished() + self.running >= self.a.trials or url in self.lost:
                    return  # done, or another worker of this daemon dropped it
                trial = self.study.ask()
                cfg = self.sample_config(trial)
                name = f"{self.trainer_prefix}-{trial.number}"
                trial.set_user_attr("daemon", url)
                trial.set_user_attr("trainer", name)
                self.running += 1
                link.name = name
            params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in trial.params.items())
            self.log(f"trial {trial.number} started on {url} as {name}: {params}")
            t, value, err = time.monotonic(), None, None
            try:
                state, value = self.run_trial(link, trial, name, cfg)
            except dqnd.DqndError as e:
                state, err = TrialState.FAIL, e
            except Interrupted:
                state, err = TrialState.FAIL, "interrupted"
            except Exception as e:  # noqa: BLE001 (a failed trial must not end the search)
                state, err = TrialState.FAIL, repr(e)
            gone = isinstance(err, dqnd.DqndError) and err.code in UNREACHABLE
            if not gone:
                try:
                    self.resilient(link, lambda c: c.destroy_trainer(name))
                except dqnd.DqndError as e:
                    gone = e.code in UNREACHABLE
                    if gone:
                        err = e
                except Interrupted:
                    pass
            with self.lock:
                if state == TrialState.COMPLETE:
                    self.study.tell(trial, value)
                else:
                    self.study.tell(trial, state=state)
                self.running -= 1
                link.name = None
            how = f"{value:.4f}" if value is not None else err
            self.log(f"trial {trial.number} {state.name}: {how} ({time.monotonic() - t:.1f} s)")
            if gone:
                return self.drop(url, err)

    def reconnect(self, link, err):
        """After an error that says the daemon is gone: a new Client once it
        answers again (connect()); raises its last error when it does not."""
        link.client.close()
        link.client = self.connect(link.url, err)

    def resilient(self, link, fn):
        """fn(client), once more after the daemon came back when it was gone."""
        try:
            return fn(link.client)
        except dqnd.DqndError as e:
            if e.code not in UNREACHABLE:
                raise
            self.reconnect(link, e)
            return fn(link.client)

    def drop(self, url, err):
        with self.lock:
            again = url in self.lost  # another of its workers dropped it already
            self.lost[url] = err
            left = len(self.a.daemons) - len(self.lost)
        if not again:
            self.log(f"daemon {url} dropped ({err}); {left} left")

    def run_trial(self, link, trial, name, cfg):
        """The trial's rounds; when its daemon goes away meanwhile and comes
        back within --daemon-retry, again from its resume point (the last
        evaluation's checkpoint and client state; the start before the first)."""
        a = self.a
        cfg["seed"] = a.seed * 1000 + trial.number
        if a.samples_per_insert > 0:
            cfg["samples_per_insert"], cfg["min_replay"] = a.samples_per_insert, cfg["batch"]
        run = TrialRun(trial, name, cfg)
        while True:
            try:
                return self.run_rounds(link.client, run)
            except dqnd.DqndError as e:
                if e.code not in UNREACHABLE:
                    raise
                at = run.resume_round()
                run.resumes_at[at] = run.resumes_at.get(at, 0) + 1
                if run.resumes_at[at] > MAX_RESUMES:  # the trial FAILs; its daemon, up again, stays in the search
                    raise RuntimeError(f"resumed {MAX_RESUMES} times from round {at} without getting past it; "
                                       f"the last time: {e}") from e
                self.log(f"trial {trial.number}: daemon {link.url} lost ({e})")
                self.reconnect(link, e)  # its error when the daemon does not come back: the trial FAILs
                with self.lock:
                    trial.set_user_attr("resumes", sum(run.resumes_at.values()))
                self.log(f"trial {trial.number} resumes on {link.url} from round {at}"
                         + (f" (learner step {run.snap['step']})" if run.snap else " (the start)"))

    def fresh_trainer(self, client, run):
        """Trainer `run.name` with `run.cfg`, new: a leftover of this very
        trial (a daemon restarted before its first resume point) replaced."""
        try:
            created = client.create_trainer(run.name, run.cfg, self.a.backend)["created"]
        except dqnd.DqndError as e:
            if e.code != ALREADY_EXISTS:  # there with another config
                raise
            created = False
        if not created:
            client.destroy_trainer(run.name)
            client.create_trainer(run.name, run.cfg, self.a.backend)

    def restore(self, client, run):
        """The trainer as it was at the resume point: its checkpoint loaded
        into it (the daemon restored the newest one on restart, but the
        trainer may have gone on, or not come back). False when that
        checkpoint cannot be loaded: the trial then starts over."""
        try:
            client.trainer_info(run.name)
            exists = True
        except dqnd.DqndError as e:
            if e.code != NOT_FOUND:
                raise
            exists = False
        try:
            client.load_checkpoint(run.name, path=run.snap["path"], create=not exists, backend=self.a.backend)
            return True
        except dqnd.DqndError as e:
            if e.code in UNREACHABLE:
                raise
            self.log(f"trial {run.trial.number}: cannot load its checkpoint {run.snap['path']} ({e}); "
                     "starting over")
            return False

    def run_rounds(self, client, run):
        a, trial, name = self.a, run.trial, run.name
        if run.snap is not None and not self.restore(client, run):
            run.snap = None
        if run.snap is None:
            self.fresh_trainer(client, run)
            st = self.dt_warmup(client, name, trial, run.cfg, a.seed * 1000 + trial.number)
            if st:
                with self.lock:
                    trial.set_user_attr("dt_loss", st["loss_mean"])
                    trial.set_user_attr("dt_handed_over", st["handed_over"])
            collector = self.Collector(a.seed * 1000 + trial.number, a.envs)
            rng = np.random.default_rng([a.seed, trial.number])
            first = 1
        else:  # copies: a second resume from the same point starts from it again
            collector, rng = copy.deepcopy(run.snap["collector"]), copy.deepcopy(run.snap["rng"])
            first = run.snap["round"] + 1
        eval_envs = self.eval_envs()
        value = None
        for rnd in range(first, a.rounds + 1):
            if self.stop.is_set():
                raise Interrupted()
            eps = a.eps_start + (a.eps_end - a.eps_start) * (rnd - 1) / max(1, a.rounds - 1)
            size = client.submit(name, *collector.round(client, name, a.collect, eps, rng))
            if a.samples_per_insert == 0 and size >= int(run.cfg["batch"]):  # (bitflip's first rounds may hold less)
                train(client, name, a.train_steps)
            if rnd % a.eval_every and rnd != a.rounds:
                continue
            value = self.evaluate(client, name, eval_envs)
            with self.lock:
                if rnd not in run.reported:  # a round reported before its daemon went away is not reported again
                    trial.report(value, rnd)
                    run.reported.add(rnd)
                prune = rnd < a.rounds and trial.should_prune()
            st = client.stats(name)
            if not prune and rnd < a.rounds:  # the resume point: the trainer's checkpoint, this side's state
                ck = client.save_checkpoint(name, with_replay=True, pin=True)  # not pruned by later saves
                run.snap = {"round": rnd, "path": ck["path"], "step": ck["step"],
                            "collector": copy.deepcopy(collector), "rng": copy.deepcopy(rng)}
            self.log(f"trial {trial.number} round {rnd}/{a.rounds}: value {value:.4f} "
                     f"(learner step {st['step']}, loss {st['loss_mean']:.4f}){' -> pruned' if prune else ''}")
            if prune:
                return TrialState.PRUNED, value
        return TrialState.COMPLETE, value

    def run(self):
        start = self.finished()
        self.log(f"study '{self.a.study}' holds {start} finished trials; running up to {self.a.trials - start} "
                 f"more on {len(self.a.daemons)} daemon(s)")
        stopped = []

        def on_signal(signum, _frame):  # stop between rounds: the running trials FAIL, their trainers go
            if not stopped:
                self.log(f"{signal.Signals(signum).name}: failing the running trials")
            stopped.append(signum)
            self.stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        threads = [threading.Thread(target=self.worker, args=(u,), daemon=True)
                   for _ in range(self.a.per_daemon) for u in self.a.daemons]
        for t in threads:
            t.start()
        next_cancel = 0.0
        for t in threads:
            while t.is_alive():
                t.join(0.2)
                if stopped and time.monotonic() >= next_cancel:  # the running Steps too, not only the next round
                    next_cancel = time.monotonic() + 1.0
                    self.cancel_running()
        optuna_population.fail_held(self, TrialState)
        if stopped:
            return 128 + stopped[0]
        if len(self.lost) == len(self.a.daemons) and self.finished() < self.a.trials:
            print(f"optuna_search.py: no daemon left ({', '.join(self.lost)} dropped) with "
                  f"{self.finished()} of {self.a.trials} trials finished; rerun to resume", file=sys.stderr)
            return 1
        return 0

    def report(self):
        trials = self.study.get_trials(deepcopy=False)
        done = sorted((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: -t.value)[:self.a.top]
        keys = sorted({k for t in done for k in t.params})
        print(f"\nbest {len(done)} of study '{self.a.study}':")
        print(f"{'trial':>5} {'value':>8}  " + "  ".join(f"{k:>13}" for k in keys) + "  daemon")
        for t in done:
            eff = t.user_attrs.get("effective") or {}  # (None: its exploits were undone by a resume)
            p = dict(t.params, **eff)  # after PBT exploits: what it trained with
            cells = [f"{p[k]:13.4g}" if isinstance(p.get(k), float) else f"{p.get(k, '-')!s:>13}" for k in keys]
            mark = "*" if eff else " "
            print(f"{t.number:5d}{mark}{t.value:8.4f}  " + "  ".join(cells) + f"  {t.user_attrs.get('daemon', '-')}")
        if any(t.user_attrs.get("effective") for t in done):
            print("* exploited another member (--pbt): its hyperparameters at the end, user attribute 'effective' "
                  "(its params hold its first draw)")
        counts = collections.Counter(t.state.name for t in trials)
        print("trials by state: " + ", ".join(f"{s.name} {counts.get(s.name, 0)}" for s in TrialState)
              + f" (total {len(trials)})")
        if self.lost:
            print("daemons dropped: " + ", ".join(f"{u} ({e})" for u, e in self.lost.items()))
        if self.a.plot:
            plot(trials, self.a.plot, self.a.study, self.value_label)


def train(client, name, n):
    """n steps of trainer `name`, all of them: a Step that stopped early (its
    deadline: the client's timeout, shorter than n steps take) is followed by
    one for the rest. A stop for the daemon's shutdown raises UNAVAILABLE (the
    daemon is going); a cancelled one, or one that made no progress, raises
    RuntimeError (the trial FAILs): rounds of fewer steps would be compared
    with full ones."""
    left = n
    while left > 0:
        r = client.step(name, left)
        left -= r["steps_run"]
        if left > 0 and r["stop_reason"] == "shutdown":
            raise dqnd.DqndError(14, f"Step of {name} stopped: the daemon is shutting down")
        if left > 0 and (r["stop_reason"] == "cancelled" or r["steps_run"] == 0):
            raise RuntimeError(f"Step of {name} stopped ({r['stop_reason']}) with {left} of {n} steps left")


def plot(trials, path, title, ylabel):
    try:  # parse_args checked that matplotlib is there
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"--plot: {e}; {path} not written (apt-get install python3-matplotlib)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for t in trials:
        if t.intermediate_values:
            x = sorted(t.intermediate_values)
            ax.plot(x, [t.intermediate_values[i] for i in x], marker="o", label=f"#{t.number} {t.state.name}")
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(f"study {title}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    print(f"learning curves written to {path}")


def main(argv=None):
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # JournalStorage in 3.1
    search = Search(args)
    rc = search.run()
    search.report()
    return rc


if __name__ == "__main__":
    sys.exit(main())
