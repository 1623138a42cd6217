#!/usr/bin/env python3
"""optuna_search.py's functions against stand-ins, no daemon: run by
test_search.py (meson test python-search) beside its daemon cases.

  - train(): a round's steps, a Step stopped early completed;
  - ask_population(): two drivers on one study keep their populations' shape
    fields; a trial enqueued with other shapes is held for its own;
  - run_population(): a population that starts over after a loss keeps its
    told trials told; a resume forgets the PBT exploits after its round;
    slots whose trials ended take the study's next trials (refill).
"""
import os
import shutil
import sys
import tempfile
import threading
import types
import unittest
import warnings

import optuna

import dqnd

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python", "examples", "optuna_search.py")
TS = optuna.trial.TrialState


class TrainTest(unittest.TestCase):
    """optuna_search.train(), the round's n steps against a stand-in
    client: a Step stopped by its deadline is followed by one for the rest
    (rounds of fewer steps would be compared with full ones); a cancelled
    one, or one that made no progress, fails the trial; the daemon's shutdown
    raises UNAVAILABLE, as the daemon going away does."""

    class Client:
        def __init__(self, runs, reason="deadline"):
            self.runs, self.reason, self.asked = list(runs), reason, []

        def step(self, name, n):
            self.asked.append(n)
            ran = min(n, self.runs.pop(0))
            return {"steps_run": ran, "stopped": ran < n, "stop_reason": self.reason if ran < n else ""}

    def setUp(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import optuna_search
        self.train = optuna_search.train
        optuna_search.dqnd = dqnd  # as main() finds it

    def test_train(self):
        c = self.Client([30, 50, 20])
        self.train(c, "t", 100)
        self.assertEqual(c.asked, [100, 70, 20])
        with self.assertRaisesRegex(RuntimeError, r"stopped \(deadline\) with 100 of 100 steps left"):
            self.train(self.Client([0]), "t", 100)
        with self.assertRaisesRegex(RuntimeError, r"stopped \(cancelled\) with 60 of 100 steps left"):
            self.train(self.Client([40], "cancelled"), "t", 100)
        with self.assertRaises(dqnd.DqndError) as cm:
            self.train(self.Client([40], "shutdown"), "t", 100)
        self.assertEqual(cm.exception.code, 14)


class DriverCase(unittest.TestCase):
    """optuna_population and optuna_search's sample_config (self.pop,
    self.sample_config), a temporary directory (self.tmp), Optuna quiet"""

    def setUp(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import optuna_population
        import optuna_search
        self.pop, self.sample_config = optuna_population, optuna_search.sample_config
        self.tmp = tempfile.mkdtemp(prefix="dqnd-search-units-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # JournalStorage and PartialFixedSampler are marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)


class AskPopulationTest(DriverCase):
    """optuna_population.ask_population against two drivers' Search objects
    (stand-ins: lock, counts, log) on one journal storage, in one process.
    Driver b asks a whole population while driver a is between the asks of
    its own members: each population's members still share their first's
    shape fields (Optuna's queue of enqueued trials is the storage's; a
    driver that enqueued its members' shapes there lost them to the other
    driver's next ask). A trial enqueued by hand with other shape fields is
    held for a population of its own, not made a member with the wrong
    batch, and one that no population takes FAILs at the end."""

    class Search:
        def __init__(self, study, population, trials):
            self.a = types.SimpleNamespace(population=population, trials=trials)
            self.study, self.lock, self.running, self.held, self.logged = study, threading.Lock(), 0, [], []

        def finished(self):
            return len(self.study.get_trials(deepcopy=False, states=(TS.COMPLETE, TS.PRUNED, TS.FAIL)))

        def log(self, msg):
            self.logged.append(msg)

    def study(self, seed):
        storage = optuna.storages.JournalStorage(
            optuna.storages.JournalFileStorage(os.path.join(self.tmp, "journal.log")))
        return optuna.create_study(study_name="s", storage=storage, direction="maximize", load_if_exists=True,
                                   sampler=optuna.samplers.RandomSampler(seed=seed))

    def shapes(self, members):
        return [{k: t.params.get(k) for k in self.pop.SHAPE} for t, _ in members]

    def test_two_drivers(self):
        for seed in range(6):  # random shapes: at least one seed's b draws other shapes than a's
            a = self.Search(self.study(seed), 3, 100)
            b = self.Search(self.study(seed + 1000), 3, 100)
            got, ask, calls = {}, a.study.ask, []

            def a_ask(*args, **kw):  # b's whole population between a's first ask and its member's
                calls.append(1)
                if len(calls) == 2:
                    got["b"] = self.pop.ask_population(b, self.sample_config)
                return ask(*args, **kw)

            a.study.ask = a_ask
            got["a"] = self.pop.ask_population(a, self.sample_config)
            for who in ("a", "b"):
                s = self.shapes(got[who])
                self.assertEqual(len(s), 3, who)
                self.assertTrue(all(x == s[0] for x in s), f"seed {seed}, driver {who}: members' shapes {s}")
                for t, cfg in got[who]:  # each trial's config is its own params'
                    self.assertEqual((cfg["batch"], cfg["prioritized"]), (t.params["batch"], t.params["prioritized"]))
            numbers = [t.number for t, _ in got["a"] + got["b"]]
            self.assertEqual(len(numbers), len(set(numbers)), "no trial in both populations")
            self.assertEqual((a.running, b.running, a.held, b.held), (3, 3, [], []))
            shutil.rmtree(self.tmp)
            os.mkdir(self.tmp)

    def test_enqueued_other_shape_held(self):
        s = self.Search(self.study(1), 3, 8)
        s.study.enqueue_trial({"lr": 1e-3, "gamma": 0.5, "batch": 32, "target_period": 10, "prioritized": 0})
        s.study.enqueue_trial({"batch": 128, "prioritized": 1})
        first = self.pop.ask_population(s, self.sample_config)
        self.assertEqual(self.shapes(first), [{k: v for k, v in self.shapes(first)[0].items()}] * 3)
        self.assertEqual(first[0][0].params["batch"], 32)
        self.assertTrue(all(t.params["batch"] == 32 and t.params["prioritized"] == 0 for t, _ in first))
        self.assertEqual([t.params["batch"] for t, _ in s.held], [128])
        self.assertEqual(s.running, 4)
        self.assertTrue(any("held for a population of its own" in m for m in s.logged), s.logged)
        second = self.pop.ask_population(s, self.sample_config)  # the held trial starts it
        self.assertEqual(second[0][0].number, 1)
        self.assertTrue(all(t.params["batch"] == 128 and t.params["prioritized"] == 1 for t, _ in second))
        self.assertEqual((len(second), s.running, s.held), (3, 6, []))
        for t, _ in first + second:
            s.study.tell(t, 1.0)
            s.running -= 1
        s.study.enqueue_trial({"batch": 64, "prioritized": 0})
        s.study.enqueue_trial({"batch": 128, "prioritized": 0})
        last = self.pop.ask_population(s, self.sample_config)  # 2 trials left: the second is held
        self.assertEqual(([t.params["batch"] for t, _ in last], len(s.held)), ([64], 1))
        self.pop.fail_held(s, TS)
        self.assertEqual((s.held, s.running), ([], 1))
        self.assertEqual([t.state for t in s.study.get_trials() if t.params.get("batch") == 128 and
                          t.number > 6], [TS.FAIL])


class PopulationResumeTest(DriverCase):
    """optuna_population.run_population against a stand-in client and
    Search (no daemon): a member that diverged in round 1 (its trial told
    FAIL) is not made live again when the daemon is lost before the first
    resume point and the population starts over (it was, and the next
    evaluation reported to a finished trial: Optuna raises, and the whole
    population FAILed); a resume forgets the exploits recorded after its
    round in the trials not yet told (pbt_forget)."""

    class Client:
        def __init__(self, lose_at_submit):
            self.submits, self.lose_at, self.steps, self.created = 0, lose_at_submit, 0, 0

        def create_trainer(self, name, cfg, backend, population=1):
            self.created += 1
            return {"created": True}

        def set_hyperparams(self, name, member=0, **kw):
            return {}

        def submit(self, name, *a, member=0):
            self.submits += 1
            if self.submits == self.lose_at:
                raise dqnd.DqndError(14, "receive: Connection reset")
            return 1000

        def step(self, name, n):
            self.steps += 1
            return {"stopped": False, "diverged": [2] if self.steps == 1 else []}

        def save_checkpoint(self, name, with_replay=False, pin=False):
            return {"path": f"ck-{self.steps}", "step": self.steps}

        def destroy_trainer(self, name):
            return {}

    class Collector:
        def __init__(self, seed, n):
            pass

        def round(self, client, name, k, eps, rng, member=0):
            return ()

    def search(self, study, client):
        s = types.SimpleNamespace(
            a=types.SimpleNamespace(seed=1, envs=2, rounds=6, eval_every=3, collect=4, eps_start=1.0, eps_end=0.1,
                                    train_steps=8, samples_per_insert=0, pbt=0, backend="cpu", population=3),
            lock=threading.Lock(), stop=threading.Event(), running=3, study=study, logged=[],
            eval_envs=lambda: None)
        s.log = s.logged.append
        s.reconnect = lambda link, err: None  # the daemon is back at once
        s.resilient = lambda link, fn: fn(link.client)
        return s

    def test_start_over_keeps_a_failed_member_told(self):
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=3))
        members = []
        for _ in range(3):
            t = study.ask()
            members.append((t, self.sample_config(t)))
        client = self.Client(lose_at_submit=5)  # round 2's second submit: no resume point yet
        search = self.search(study, client)
        link = types.SimpleNamespace(client=client, url="ipc:///stand-in")
        done = {}
        values = iter(range(100))
        self.pop.run_population(search, link, "p", members, done, self.Collector,
                                lambda c, name, envs, member=0: float(next(values)), TS, dqnd, RuntimeError,
                                (4, 14))
        states = [t.state for t in study.get_trials()]
        self.assertEqual(states, [TS.COMPLETE, TS.COMPLETE, TS.FAIL], search.logged)
        self.assertEqual(client.created, 2, "it started over once")
        self.assertIn("population p resumes on ipc:///stand-in from round 0 (the start)", search.logged)
        self.assertEqual(sorted(study.get_trials()[2].intermediate_values), [], "the failed one reported nothing")

    def test_pbt_forget(self):
        study = optuna.create_study(direction="maximize")
        members = [(study.ask(), {}) for _ in range(3)]
        for t, _ in members:
            t.set_user_attr("pbt", [{"round": 4, "hparams": {"lr": 1.0}}, {"round": 8, "hparams": {"lr": 2.0}}])
            t.set_user_attr("effective", {"lr": 2.0})
        members[1][0].set_user_attr("pbt", [{"round": 8, "hparams": {"lr": 3.0}}])
        members[1][0].set_user_attr("effective", {"lr": 3.0})
        search = self.search(study, None)
        self.pop.pbt_forget(search, members, {members[2][0].number: (TS.PRUNED, 0.0)}, 6)
        a, b, c = (t.user_attrs for t, _ in members)
        self.assertEqual((a["pbt"], a["effective"]), ([{"round": 4, "hparams": {"lr": 1.0}}], {"lr": 1.0}))
        self.assertEqual((b["pbt"], b["effective"]), ([], None))
        self.assertEqual(len(c["pbt"]), 2, "a trial already told keeps its record")


class PopulationRefillTest(DriverCase):
    """optuna_population.run_population's refilled slots against a stand-in
    client: a slot whose trial is pruned or finished takes the next trial of
    the study (its member started over from its fresh state, fetched for
    every slot when the population starts and loaded with LoadCheckpoint
    member_only, then
    the trial's hyperparameters set), and that trial's rounds count from
    its start; the population ends when no slot is live and the study wants
    no more. A daemon lost while a slot was being refilled, before any
    resume point, starts the population over with the refilling trial
    pending: it takes the first free slot from scratch, and no trial is
    asked twice."""

    class Client:
        def __init__(self, tmp, lose_at_load=0, all_diverge_at=0):
            self.all_diverge_at = all_diverge_at
            self.tmp, self.lose_at, self.loads, self.fetches, self.hp, self.created = tmp, lose_at_load, [], [], [], 0
            self.saves = 0

        def create_trainer(self, name, cfg, backend, population=1):
            self.created += 1
            # each Submit adds a third of a batch: a member holds one after its third
            self.per_submit, self.size, self.steps = cfg["batch"] // 3 + 1, [0] * population, 0
            return {"created": True}

        def set_hyperparams(self, name, member=0, **kw):
            self.hp.append((member, kw["lr"]))
            return {}

        def submit(self, name, *a, member=0):
            self.size[member] += self.per_submit
            return self.size[member]

        def step(self, name, n):
            self.steps += 1
            if self.steps == self.all_diverge_at:  # as the daemon answers when every member diverged
                raise dqnd.DqndError(9, f"trainer '{name}' diverged: member 0 of 2: loss nan; its last good state "
                                        "is saved as checkpoint ck")
            return {"stopped": False, "diverged": []}

        def save_checkpoint(self, name, with_replay=False, pin=False):
            self.saves += 1
            return {"checkpoint": f"ck{self.saves}", "path": f"ck-{self.saves}", "step": self.saves}

        def fetch_checkpoint(self, name, path, checkpoint="", member=None):
            self.fetches.append((checkpoint, member))
            with open(path, "wb") as f:
                f.write(f"{checkpoint}/{member}".encode())

        def load_checkpoint(self, name, path=None, file=None, create=False, backend=None, member=None):
            with open(file, "rb") as f:
                self.loads.append((member, f.read().decode()))
            self.size[member] = 0  # the fresh state's empty replay
            if len(self.loads) == self.lose_at:
                raise dqnd.DqndError(14, "receive: Connection reset")
            return {}

        def destroy_trainer(self, name):
            return {}

    class PruneTrial0(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            return trial.number == 0

    def run_it(self, client, queue=("same", "same"), running=0, prune=True):
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=3),
                                    pruner=self.PruneTrial0() if prune else optuna.pruners.NopPruner())
        s = types.SimpleNamespace(
            a=types.SimpleNamespace(seed=1, envs=2, rounds=6, eval_every=3, collect=4, eps_start=1.0, eps_end=0.1,
                                    train_steps=8, samples_per_insert=0, pbt=0, backend="cpu", population=2,
                                    trials=4),
            lock=threading.Lock(), stop=threading.Event(), running=0, study=study, logged=[], held=[],
            eval_envs=lambda: None)
        s.log = s.logged.append
        s.finished = lambda: len(study.get_trials(deepcopy=False, states=(TS.COMPLETE, TS.PRUNED, TS.FAIL)))
        s.reconnect = lambda link, err: None  # the daemon is back at once
        members = self.pop.ask_population(s, self.sample_config)
        self.assertEqual(len(members), 2)
        # the next trials' shape fields as the sampler's draws (Optuna's queue of enqueued trials)
        fixed = self.pop.shape(members[0][0])
        other = dict(fixed, batch=[b for b in (32, 64, 128) if b != fixed["batch"]][0])
        for q in queue:
            study.enqueue_trial(fixed if q == "same" else other)
        link = types.SimpleNamespace(client=client, url="ipc:///stand-in")
        for i, (t, _) in enumerate(members):  # (as population_trials does)
            self.pop._started(s, link.url, "p", i, t, 0)
        done = {}
        self.pop.run_population(s, link, "p", members, done, PopulationResumeTest.Collector,
                                lambda c, name, envs, member=0: 0.5, TS, dqnd, RuntimeError, (4, 14),
                                self.sample_config)
        self.assertEqual(s.running, running, s.logged)
        self.held = s.held
        return study.get_trials(), members, s.logged

    def test_refill(self):
        client = self.Client(self.tmp)
        trials, members, logged = self.run_it(client)
        self.assertEqual([t.state for t in trials], [TS.PRUNED, TS.COMPLETE, TS.COMPLETE, TS.COMPLETE], logged)
        self.assertEqual([t.number for t, _ in members], [0, 1, 2, 3])
        # trial 2 into slot 0 at round 3 (trial 0 pruned), trial 3 into slot 1 at round 6 (trial 1 done)
        self.assertEqual([(t.user_attrs["member"], t.user_attrs["start_round"]) for t in trials],
                         [(0, 0), (1, 0), (0, 3), (1, 6)])
        self.assertEqual([sorted(t.intermediate_values) for t in trials], [[3], [3, 6], [3, 6], [3, 6]])
        self.assertEqual(client.fetches, [("ck1", 0), ("ck1", 1)], "each slot's fresh state, at the start")
        self.assertEqual(client.loads, [(0, "ck1/0"), (1, "ck1/1")])
        self.assertEqual(client.hp[-2:], [(0, trials[2].params["lr"]), (1, trials[3].params["lr"])])
        self.assertIn("trial 2 started on ipc:///stand-in as p member 0 (refilled at round 3): "
                      f"lr={trials[2].params['lr']:.3g}", " ".join(logged))
        self.assertEqual(client.created, 1)
        # every round from the third on steps: a refilled slot is fed a batch in its first round
        self.assertEqual(client.steps, 10)

    def test_lost_while_refilling(self):
        client = self.Client(self.tmp, lose_at_load=1)
        trials, members, logged = self.run_it(client)
        self.assertEqual([t.state for t in trials], [TS.PRUNED, TS.COMPLETE, TS.COMPLETE, TS.COMPLETE], logged)
        self.assertEqual(client.created, 2, "it started over")
        self.assertIn("population p resumes on ipc:///stand-in from round 0 (the start)", logged)
        # trial 2 again from scratch in slot 0 at the start over (round 0); trial 3 after trials 1 and 2 end
        self.assertEqual([(t.user_attrs["member"], t.user_attrs["start_round"]) for t in trials],
                         [(0, 0), (1, 0), (0, 0), (0, 6)])
        self.assertEqual(client.fetches, [("ck1", 0), ("ck1", 1), ("ck2", 0), ("ck2", 1)],
                         "the new trainer's fresh states")

    def test_every_member_diverges(self):
        client = self.Client(self.tmp, all_diverge_at=1)  # round 3's Step, the first: before its evaluation
        trials, members, logged = self.run_it(client)
        self.assertEqual([t.state for t in trials], [TS.FAIL, TS.FAIL, TS.COMPLETE, TS.COMPLETE], logged)
        self.assertEqual([(t.user_attrs["member"], t.user_attrs["start_round"]) for t in trials],
                         [(0, 0), (1, 0), (0, 3), (1, 3)])
        self.assertEqual(client.loads, [(0, "ck1/0"), (1, "ck1/1")], "both slots started over")
        self.assertEqual(client.created, 1)

    def test_other_shape_closes(self):
        """the sampler's next draw has another batch: it is held for a
        population of its own, and this one takes no more trials"""
        client = self.Client(self.tmp)
        trials, members, logged = self.run_it(client, queue=("other",), running=1)
        self.assertEqual([t.state for t in trials], [TS.PRUNED, TS.COMPLETE, TS.RUNNING], logged)
        self.assertEqual([t.number for t, _ in self.held], [2])
        self.assertNotEqual(trials[2].params["batch"], trials[0].params["batch"])
        self.assertIn("trial 2 draws other shape fields than population p's: held for a population of its own; p "
                      "takes no more trials", logged)
        self.assertEqual(client.loads, [], "no slot refilled")

    def test_all_free_other_shape_ends(self):
        """both trials finish at round 6; the sampler's next draw has the
        population's shape, the one after it not: the population ends, both
        held for the next populations in the order drawn, no slot refilled"""
        client = self.Client(self.tmp)
        trials, members, logged = self.run_it(client, queue=("same", "other"), running=2, prune=False)
        self.assertEqual([t.state for t in trials], [TS.COMPLETE, TS.COMPLETE, TS.RUNNING, TS.RUNNING], logged)
        self.assertEqual([t.number for t, _ in self.held], [2, 3])
        self.assertEqual([t.number for t, _ in members], [0, 1])
        self.assertIn("population p: every slot free; trials 2 held for the next populations", logged)
        self.assertEqual(client.loads, [], "no slot refilled")
