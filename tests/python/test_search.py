#!/usr/bin/env python3
"""client/python/examples/optuna_search.py run as a user runs it (a
subprocess) against real daemons (DQND_BIN, --backend cpu), each on its own
temporary ipc socket and state directory:

  - a 6-trial search over two daemons (sqlite storage) finishes within 90 s,
    every trial COMPLETE or PRUNED, both daemons used, every trainer
    destroyed, and finds a config better than its worst (with matplotlib,
    --plot writes a PNG);
  - a daemon SIGKILLed while one of its trials runs and not back within
    --daemon-retry: that trial FAILs, the search finishes on the other
    daemon, a rerun resumes the stored study (journal storage), and a rerun
    with no daemon left exits 1;
  - a daemon SIGKILLed during a trial and restarted 2 s later (as systemd
    does) on the same state directory and URL: the trial resumes from its
    last evaluation's checkpoint at the learner step it had reached, and no
    trial FAILs; with --population 3, the population resumes from its
    last evaluation's population checkpoint the same way;
  - --env bitflip --dt: every feature in the search space, trials finishing;
  - --plot without matplotlib is a usage error (exit 2) before anything runs;
  - two drivers share one study through a PostgreSQL server this test starts
    in its own data directory (skipped when PostgreSQL is not installed or,
    run as root, when the postgres user is missing or cannot be switched to).
    It runs only with --postgres, and then alone.

With them run the stand-in cases of test_search_units.py (the driver's
functions without a daemon).

Run: meson test -C build python-search (and python-search-postgres), or
DQND_BIN=build/daemon/dqnd PYTHONPATH=build/client/python python3 tests/python/test_search.py [--postgres]
"""
import collections
import glob
import math
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings

import numpy as np
import optuna

import dqnd

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "client", "python", "examples", "optuna_search.py")
DQND_BIN = os.environ.get("DQND_BIN", os.path.join(ROOT, "build", "daemon", "dqnd"))
STARTED = re.compile(r"trial (\d+) started on (\S+) as (\S+):")
ROUND = re.compile(r"trial (\d+) round (\d+)/(\d+): value")
TS = optuna.trial.TrialState
optuna.logging.set_verbosity(optuna.logging.WARNING)


class Daemon:
    """One dqnd on DIR/d.sock with state in DIR/state, logging to DIR/dqnd.log."""

    def __init__(self, root, name):
        self.dir = os.path.join(root, name)
        os.makedirs(os.path.join(self.dir, "state"))
        self.sock = os.path.join(self.dir, "d.sock")
        self.url = "ipc://" + self.sock
        self.log = os.path.join(self.dir, "dqnd.log")
        self.start()

    def start(self):
        """(Again, after kill(): the same state directory, socket and log, as systemd restarts it.)"""
        with open(os.path.join(self.dir, "stderr"), "ab") as err:
            self.proc = subprocess.Popen(
                [DQND_BIN, "--listen", self.url, "--state-dir", os.path.join(self.dir, "state"), "--backend", "cpu",
                 "--log-file", self.log, "--checkpoint-interval", "0"],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dqnd exited with {self.proc.returncode}: {self.tail()}")
            if os.path.exists(self.sock):  # dial only a socket that is there (nng 1.5.2 #1518)
                try:
                    with dqnd.Client(self.url, timeout=5) as c:
                        if c.health()["serving"]:
                            return
                except dqnd.DqndError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dqnd on {self.url} not serving after 30 s: {self.tail()}")
            time.sleep(0.05)

    def tail(self):
        out = []
        for f in (os.path.join(self.dir, "stderr"), self.log):
            if os.path.exists(f):
                out.append(open(f, errors="replace").read()[-2000:])
        return "\n".join(out)

    def trainers(self):
        with dqnd.Client(self.url, timeout=10) as c:
            return [t["name"] for t in c.list_trainers()]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def search_cmd(*args):
    return [sys.executable, SCRIPT, *[str(a) for a in args]]


def run_search(*args, timeout=150, env=None):
    t = time.monotonic()
    p = subprocess.run(search_cmd(*args), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                       env=env)
    return p, time.monotonic() - t


def journal(path):
    with warnings.catch_warnings():  # "JournalStorage is experimental" in Optuna 3.1
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.JournalStorage(optuna.storages.JournalFileStorage(path))


def started(out):
    """{trial number: (daemon url, trainer name)} from a driver's output."""
    return {int(m[1]): (m[2], m[3]) for m in STARTED.finditer(out)}


class SearchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dqnd-search-")
        self.daemons = []
        self.t0 = time.monotonic()

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        print(f"\n{self.id().split('.')[-1]}: {time.monotonic() - self.t0:.1f} s", file=sys.stderr)

    def daemon(self, name):
        d = Daemon(self.tmp, name)
        self.daemons.append(d)
        return d

    def check(self, p, rc=0):
        self.assertEqual(p.returncode, rc, f"optuna_search.py exited {p.returncode}\nstdout:\n{p.stdout}\n"
                                           f"stderr:\n{p.stderr}")

    def test_search_two_daemons(self):
        a, b = self.daemon("a"), self.daemon("b")
        db = os.path.join(self.tmp, "search.db")
        png = os.path.join(self.tmp, "curves.png")
        try:  # --plot needs it (test_plot_without_matplotlib: a usage error without)
            import matplotlib  # noqa: F401
            plot = ["--plot", png]
        except ImportError:
            plot = []
        p, secs = run_search("--daemons", f"{a.url},{b.url}", "--storage", f"sqlite:///{db}", "--study", "two",
                             "--trials", 6, "--seed", 1, *plot)
        self.check(p)
        print(f"\n6 trials over two daemons: {secs:.1f} s\n{p.stdout[p.stdout.index('best'):]}", file=sys.stderr)
        self.assertLess(secs, 90)
        study = optuna.load_study(study_name="two", storage=f"sqlite:///{db}")
        trials = study.get_trials()
        self.assertEqual(len(trials), 6)
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in trials), [t.state for t in trials])
        self.assertEqual({t.user_attrs["daemon"] for t in trials}, {a.url, b.url}, "both daemons ran trials")
        values = [t.value for t in trials if t.state == TS.COMPLETE]
        self.assertGreaterEqual(len(values), 2)
        self.assertGreater(max(values), min(values), "the search found a config better than its worst")
        self.assertAlmostEqual(study.best_value, max(values))
        self.assertIn(f"{study.best_trial.number:5d} {study.best_value:8.4f}", p.stdout, "the best trial is listed")
        self.assertIn("trials by state: RUNNING 0, COMPLETE", p.stdout)
        self.assertEqual(set(started(p.stdout)), {t.number for t in trials})
        self.assertEqual(a.trainers() + b.trainers(), [], "every trial destroyed its trainer")
        if not plot:
            return
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_per_daemon_capacity(self):
        """--per-daemon 2 over two daemons: each runs two trials at once, and
        each ran at least its two (the counts then follow how fast each
        daemon's trials end: pruned ones free their slot early)"""
        a, b = self.daemon("a"), self.daemon("b")
        db = os.path.join(self.tmp, "cap.db")
        p, _ = run_search("--daemons", f"{a.url},{b.url}", "--storage", f"sqlite:///{db}", "--study", "cap",
                          "--trials", 8, "--per-daemon", 2, "--rounds", 20, "--seed", 3)
        self.check(p)
        study = optuna.load_study(study_name="cap", storage=f"sqlite:///{db}")
        trials = study.get_trials()
        self.assertEqual(len(trials), 8)
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in trials), [t.state for t in trials])
        count = collections.Counter(t.user_attrs["daemon"] for t in trials)
        self.assertGreaterEqual(min(count[a.url], count[b.url]), 2, count)
        # the most trials each daemon held at once, from the driver's log
        running, most = collections.Counter(), collections.Counter()
        where = {}
        for line in p.stdout.splitlines():
            m = STARTED.search(line)
            if m:
                where[int(m[1])] = m[2]
                running[m[2]] += 1
                most[m[2]] = max(most[m[2]], running[m[2]])
            m = re.search(r"trial (\d+) (COMPLETE|PRUNED|FAIL):", line)
            if m:
                running[where[int(m[1])]] -= 1
        self.assertEqual((most[a.url], most[b.url]), (2, 2), p.stdout)
        self.assertEqual(a.trainers() + b.trainers(), [])
        p, _ = run_search("--daemons", a.url, "--storage", f"sqlite:///{db}", "--per-daemon", 0)
        self.check(p, 2)
        self.assertIn("--per-daemon must be in [1, 64]", p.stderr)

    def test_population_and_pbt(self):
        """--population 3 --pbt 4: six trials of one shape (queued) in one
        population of three slots on one daemon, each trial reported, pruned or finished on its
        own, a slot whose trial ended refilled by the next (started over
        from the slot's fresh state: its replay empty, its rounds counted
        from its start), the worst member exploiting a better one every 4
        rounds."""
        a = self.daemon("a")
        db = os.path.join(self.tmp, "pop.db")
        # the sampler's shape draws, made alike (Optuna's queue): every slot refilled takes the next trial
        pre = optuna.create_study(study_name="pop", storage=f"sqlite:///{db}", direction="maximize")
        for _ in range(6):
            pre.enqueue_trial({"batch": 64, "prioritized": 0})
        p, secs = run_search("--daemons", a.url, "--storage", f"sqlite:///{db}", "--study", "pop", "--trials", 6,
                             "--population", 3, "--pbt", 4, "--eval-every", 2, "--rounds", 12, "--seed", 2)
        self.check(p)
        study = optuna.load_study(study_name="pop", storage=f"sqlite:///{db}")
        trials = study.get_trials()
        self.assertEqual(len(trials), 6)
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in trials), [t.state for t in trials])
        self.assertEqual({t.user_attrs["trainer"] for t in trials}, {"pop-pop0"}, "one population, refilled")
        self.assertEqual(sorted(t.user_attrs["member"] for t in trials), [0, 0, 1, 1, 2, 2])
        for k in ("batch", "prioritized"):  # the shape fields: one draw per population
            self.assertEqual(len({t.params[k] for t in trials}), 1, k)
        self.assertGreater(len({t.params["lr"] for t in trials}), 1, "each member its own lr")
        start = {t.number: t.user_attrs["start_round"] for t in trials}
        self.assertEqual([start[i] for i in range(3)], [0, 0, 0])
        for t in trials[3:]:  # a refilled slot: after the trial it replaced ended, at an evaluation
            before = [u for u in trials[:t.number] if u.user_attrs["member"] == t.user_attrs["member"]]
            self.assertGreater(start[t.number], 0)
            self.assertEqual(start[t.number] % 2, 0)
            self.assertEqual(max(start[u.number] + max(u.intermediate_values) for u in before), start[t.number])
        for t in trials:  # each trial's own rounds
            self.assertTrue(set(t.intermediate_values) <= set(range(2, 13, 2)), t.intermediate_values)
            if t.state == TS.COMPLETE:
                self.assertEqual(max(t.intermediate_values), 12)
        self.assertIn("(refilled at round", p.stdout)
        exploits = [(t, e) for t in trials for e in t.user_attrs.get("pbt", [])]
        self.assertTrue(exploits, "no member exploited another")
        for t, e in exploits:
            self.assertEqual(e["round"] % 4, 0)
            self.assertIn(e["lr_factor"], (0.8, 1.25))
            src = study.trials[e["from_trial"]]
            self.assertEqual(src.user_attrs["trainer"], t.user_attrs["trainer"], "exploits within its population")
            self.assertEqual(start[src.number], start[t.number], "ranked among the members of its age")
            # (each at its own round: e["round"] is the population's)
            self.assertGreaterEqual(src.intermediate_values[e["round"] - start[src.number]],
                                    t.intermediate_values[e["round"] - start[t.number]], "the worse copies the better")
            # what it trains with from then on: src's hyperparameters at that round, lr scaled
            before = [x for x in src.user_attrs.get("pbt", []) if x["round"] < e["round"]]
            src_h = dict(src.params, **(before[-1]["hparams"] if before else {}))
            for k, v in e["hparams"].items():
                want = np.float32(float(np.float32(src_h[k])) * e["lr_factor"]) if k == "lr" else src_h[k]
                if isinstance(v, float):
                    self.assertEqual(np.float32(v), np.float32(want), f"trial {t.number} round {e['round']}: {k}")
                else:
                    self.assertEqual(v, want, f"trial {t.number} round {e['round']}: {k}")
            self.assertEqual(t.user_attrs["effective"], t.user_attrs["pbt"][-1]["hparams"])
        top = sorted((t for t in trials if t.state == TS.COMPLETE), key=lambda t: -t.value)[:5]
        if any(t.user_attrs.get("effective") for t in top):  # the report marks them
            self.assertIn("* exploited another member (--pbt)", p.stdout)
        self.assertEqual(a.trainers(), [], "every population destroyed its trainer")
        # --no-refill: the same queue, two populations of three, no slot refilled
        pre = optuna.create_study(study_name="nr", storage=f"sqlite:///{db}", direction="maximize")
        for _ in range(6):
            pre.enqueue_trial({"batch": 64, "prioritized": 0})
        p, _ = run_search("--daemons", a.url, "--storage", f"sqlite:///{db}", "--study", "nr", "--trials", 6,
                          "--population", 3, "--eval-every", 2, "--rounds", 6, "--seed", 2, "--no-refill")
        self.check(p)
        nr = optuna.load_study(study_name="nr", storage=f"sqlite:///{db}").get_trials()
        self.assertEqual(sorted({t.user_attrs["trainer"] for t in nr}), ["nr-pop0", "nr-pop3"])
        self.assertEqual({t.user_attrs["start_round"] for t in nr}, {0})
        self.assertNotIn("(refilled at round", p.stdout)
        p, _ = run_search("--daemons", a.url, "--storage", f"sqlite:///{db}", "--pbt", 3, "--population", 2)
        self.check(p, 2)
        self.assertIn("--pbt needs --population 2 or more and a multiple of --eval-every", p.stderr)

    def test_dt_search_space(self):
        """--dt with --population 2: the Decision Transformer's fields in the
        search space (dt_layers, and when on dt_pretrain_steps and
        dt_handover), drawn once per population, each member pre-training its
        own DT on its own random episodes before it trains"""
        a = self.daemon("a")
        db = os.path.join(self.tmp, "dt.db")
        p, _ = run_search("--daemons", a.url, "--storage", f"sqlite:///{db}", "--study", "dt", "--trials", 4,
                          "--population", 2, "--dt", "--dt-episodes", 16, "--eval-every", 2, "--rounds", 4,
                          "--seed", 3)
        self.check(p)
        study = optuna.load_study(study_name="dt", storage=f"sqlite:///{db}")
        trials = study.get_trials()
        self.assertEqual(len(trials), 4)
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in trials), [t.state for t in trials])
        pops = {}
        for t in trials:
            self.assertIn(t.params["dt_layers"], (0, 1, 2))
            pops.setdefault(t.user_attrs["trainer"], []).append(t)
        with_dt = [t for t in trials if t.params["dt_layers"]]
        self.assertTrue(with_dt, "no trial drew a Decision Transformer: pick another --seed for this test")
        for t in with_dt:
            self.assertIn(t.params["dt_pretrain_steps"], (200, 600))
            self.assertIn(t.params["dt_handover"], ("none", "trunk1"))
            self.assertTrue(math.isfinite(t.user_attrs["dt_loss"]) and t.user_attrs["dt_loss"] > 0, t.user_attrs)
        for name, ts in pops.items():
            for k in ("dt_layers", "dt_pretrain_steps", "dt_handover"):
                self.assertEqual(len({t.params.get(k) for t in ts}), 1, f"{name}: {k}")
        self.assertIn("every member pre-trained its DT", p.stdout)
        self.assertEqual(a.trainers(), [], "every population destroyed its trainer")

    def test_bitflip_everything(self):
        """--env bitflip --dt (issue 31): bit flipping with every feature in
        the search space (attention, dt_layers, ensemble_k, NoisyNet, PER,
        her_ratio, her_strategy, n_step, lr, gamma), two trials at a time on
        one daemon: every trial finishes with a success rate in [0, 1], each
        with every field drawn, and the best learned something"""
        a = self.daemon("a")
        db = os.path.join(self.tmp, "bf.db")
        p, _ = run_search("--daemons", a.url, "--storage", f"sqlite:///{db}", "--env", "bitflip", "--bits", 4,
                          "--dt", "--dt-episodes", 16, "--trials", 4, "--per-daemon", 2, "--rounds", 8, "--envs", 8,
                          "--train-steps", 16, "--eval-every", 4, "--eval-episodes", 8, "--seed", 1, timeout=400)
        self.check(p)
        study = optuna.load_study(study_name="dqnd-bitflip", storage=f"sqlite:///{db}")
        trials = study.get_trials()
        self.assertEqual(len(trials), 4)
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in trials), [t.state for t in trials])
        space = {"lr", "gamma", "her_ratio", "her_strategy", "n_step", "prioritized", "noisy", "attention",
                 "ensemble_k", "dt_layers"}
        for t in trials:
            self.assertLessEqual(space, set(t.params), t.params)
            self.assertTrue(all(0 <= v <= 1 for v in t.intermediate_values.values()), t.intermediate_values)
        self.assertGreater(max(max(t.intermediate_values.values()) for t in trials), 0,
                           "no trial ever reached a goal")
        self.assertEqual(a.trainers(), [], "every trial destroyed its trainer")

    def test_sigkill_fails_trial_and_resume(self):
        a, b = self.daemon("a"), self.daemon("b")
        path = os.path.join(self.tmp, "search.journal")
        storage = f"journal:{path}"
        # longer trials than the default, so the kill lands well inside one
        # --daemon-retry 2: daemon a does not come back, and its trial FAILs 2 s after the kill
        proc = subprocess.Popen(search_cmd("--daemons", f"{a.url},{b.url}", "--storage", storage, "--study", "kill",
                                           "--trials", 6, "--rounds", 80, "--timeout", 5, "--daemon-retry", 2),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        watchdog = threading.Timer(150, proc.kill)
        watchdog.start()
        out, on, victim, killed_at = [], {}, None, None
        with proc:  # stderr goes with stdout: one pipe, read to its end
            try:
                for line in proc.stdout:
                    out.append(line)
                    m = STARTED.search(line)
                    if m:
                        on[int(m[1])] = m[2]
                    m = ROUND.search(line)
                    if victim is None and m and on.get(int(m[1])) == a.url and "pruned" not in line:
                        victim, killed_at = int(m[1]), (int(m[2]), int(m[3]))
                        a.kill()  # after this trial's first evaluation, long before its last round
                        out.append(f"---- SIGKILL to daemon a (trial {victim} at round {m[2]}/{m[3]})\n")
            finally:
                watchdog.cancel()
        out = "".join(out)
        p = subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
        self.check(p)
        self.assertIsNotNone(victim, f"no trial ran on daemon a:\n{out}")
        print(f"\nkilled daemon a during trial {victim} (round {killed_at[0]}/{killed_at[1]} reported):\n"
              + "".join(line for line in out.splitlines(True) if f"trial {victim} " in line or "daemon" in line),
              file=sys.stderr)
        self.assertNotRegex(out.split("---- SIGKILL")[0], rf"trial {victim} (COMPLETE|PRUNED|FAIL)",
                            "the trial was still running when its daemon was killed")
        self.assertRegex(out, rf"daemon {re.escape(a.url)} does not answer \(.*\); trying again for up to 2 s")
        self.assertRegex(out, rf"daemon {re.escape(a.url)} dropped \((UNAVAILABLE|DEADLINE_EXCEEDED)")
        study = optuna.load_study(study_name="kill", storage=journal(path))
        first = {t.number: (t.state, t.value, t.params) for t in study.get_trials()}
        self.assertEqual(len(first), 6)
        t = study.trials[victim]
        self.assertEqual(t.state, TS.FAIL)
        self.assertEqual(t.user_attrs["daemon"], a.url)
        self.assertLess(killed_at[0], killed_at[1], "rounds were left when the daemon died")
        self.assertEqual(max(t.intermediate_values), killed_at[0], "it had reported, and then nothing more")
        others = [t for t in study.trials if t.number != victim]
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in others), [t.state for t in others])
        after = [t for t in others if t.datetime_start > study.trials[victim].datetime_start]
        self.assertTrue(after and all(t.user_attrs["daemon"] == b.url for t in after),
                        "the trials after the kill ran on the other daemon")
        self.assertEqual(b.trainers(), [])

        # a rerun on the same storage resumes the study: two more trials, the six kept as they were
        p, _ = run_search("--daemons", b.url, "--storage", storage, "--study", "kill", "--trials", 8, "--timeout", 5)
        self.check(p)
        self.assertIn("study 'kill' holds 6 finished trials; running up to 2 more", p.stdout)
        trials = optuna.load_study(study_name="kill", storage=journal(path)).get_trials()
        self.assertEqual(len(trials), 8)
        self.assertEqual({t.number: (t.state, t.value, t.params) for t in trials if t.number < 6}, first)
        self.assertEqual(set(started(p.stdout)), {6, 7})

        # no daemon left (tried for 1 s): exit 1 with a message, and no trial taken from the study
        p, _ = run_search("--daemons", a.url, "--storage", storage, "--study", "kill", "--trials", 10, "--timeout", 5,
                          "--daemon-retry", 1)
        self.check(p, rc=1)
        self.assertIn("no daemon left", p.stderr)
        self.assertEqual(len(optuna.load_study(study_name="kill", storage=journal(path)).trials), 8)

    def run_killing(self, daemon, at, *args):
        """The search with args, its daemon SIGKILLed at the first output line
        matching at and restarted 2 s later (systemd's RestartSec) on the same
        state directory and URL: its output, checked to exit 0 and to have
        reached that line."""
        proc = subprocess.Popen(search_cmd(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        watchdog = threading.Timer(90, proc.kill)
        watchdog.start()
        out, restarter = [], None
        with proc:
            try:
                for line in proc.stdout:
                    out.append(line)
                    if restarter is None and re.search(at, line):
                        daemon.kill()
                        out.append(f"---- SIGKILL to daemon {daemon.url}; restarted in 2 s\n")
                        restarter = threading.Timer(2.0, daemon.start)
                        restarter.start()
            finally:
                watchdog.cancel()
                if restarter:
                    restarter.join()
        out = "".join(out)
        self.check(subprocess.CompletedProcess(proc.args, proc.returncode, out, ""))
        self.assertIsNotNone(restarter, f"no line matched {at!r}:\n{out}")
        return out

    def test_daemon_restart_resumes(self):
        """SIGKILL during trial 0, after its round-10 evaluation; the daemon
        comes back 2 s later (systemd's RestartSec) on the same state
        directory and URL and restores the trainer from its newest
        checkpoint, the one the trial saved at round 10: the trial resumes
        there (learner step 160 = 10 rounds x 16 steps), its round 20 shows
        exactly 10 rounds more (step 320), and it COMPLETEs, as does the
        other trial; its reported rounds are 10, 20, 30 and 40."""
        a = self.daemon("a")
        db = os.path.join(self.tmp, "search.db")
        # the trial saved its resume point before it printed this line
        out = self.run_killing(a, r"trial 0 round 10/40: value", "--daemons", a.url, "--storage", f"sqlite:///{db}",
                               "--study", "restart", "--trials", 2, "--rounds", 40, "--timeout", 5,
                               "--daemon-retry", 30)
        print("\n" + "".join(line for line in out.splitlines(True) if "trial 0" in line or "daemon" in line
                             or "----" in line), file=sys.stderr)
        self.assertRegex(out, rf"trial 0: daemon {re.escape(a.url)} lost \((UNAVAILABLE|DEADLINE_EXCEEDED)")
        self.assertIn(f"daemon {a.url} answers again", out)
        self.assertIn(f"trial 0 resumes on {a.url} from round 10 (learner step 160)", out)
        self.assertRegex(out, r"trial 0 round 20/40: value \S+ \(learner step 320,",
                         "the learner went on from the checkpoint: 10 rounds of 16 steps more")
        self.assertNotIn("dropped", out)
        with open(a.log) as f:
            self.assertRegex(f.read(), r"\[restart-0\] restored from .*: step 160", "the daemon restored it")
        trials = optuna.load_study(study_name="restart", storage=f"sqlite:///{db}").get_trials()
        self.assertEqual([t.state for t in trials], [TS.COMPLETE, TS.COMPLETE])  # the first two are never pruned
        self.assertEqual(trials[0].user_attrs.get("resumes"), 1)
        self.assertNotIn("resumes", trials[1].user_attrs)
        self.assertEqual(sorted(trials[0].intermediate_values), [10, 20, 30, 40])
        self.assertEqual(a.trainers(), [], "both trials destroyed their trainers")

    def test_population_restart_resumes(self):
        """--population 3: SIGKILL once the population saved its round-10
        resume point; the daemon comes back 2 s later on the same state
        directory and restores the population; the driver loads that
        checkpoint and goes on from round 11: no trial FAILs, the daemon is
        not dropped, each of the three trials records one resume, and the
        population's trainer is gone at the end."""
        a = self.daemon("a")
        db = os.path.join(self.tmp, "pop-restart.db")
        out = self.run_killing(a, r"population prs-pop0: resume point at round 10 ", "--daemons", a.url, "--storage",
                               f"sqlite:///{db}", "--study", "prs", "--trials", 3, "--population", 3, "--rounds", 20,
                               "--eval-every", 5, "--timeout", 5, "--daemon-retry", 30)
        print("\n" + "".join(line for line in out.splitlines(True) if "population" in line or "daemon" in line
                             or "----" in line), file=sys.stderr)
        step = re.search(r"population prs-pop0: resume point at round 10 \(learner step (\d+)\)", out).group(1)
        self.assertRegex(out, rf"population prs-pop0: daemon {re.escape(a.url)} lost \((UNAVAILABLE|DEADLINE_EXCEEDED)")
        self.assertIn(f"daemon {a.url} answers again", out)
        self.assertIn(f"population prs-pop0 resumes on {a.url} from round 10 (learner step {step})", out)
        self.assertNotIn("dropped", out)
        with open(a.log) as f:
            self.assertRegex(f.read(), rf"\[prs-pop0\] restored from .*: step {step}", "the daemon restored it")
        trials = optuna.load_study(study_name="prs", storage=f"sqlite:///{db}").get_trials()
        self.assertEqual(len(trials), 3)
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in trials), [t.state for t in trials])
        for t in trials:  # every member was live at round 10 (the pruner waits 2 trials and round 6)
            self.assertEqual(t.user_attrs.get("resumes"), 1, t.number)
            self.assertEqual(sorted(t.intermediate_values)[:3], [5, 10, 15], t.number)
        self.assertEqual(a.trainers(), [], "the population destroyed its trainer")

    def test_sigint_cancels_the_running_step(self):
        """Ctrl-C while a trial's Step of 10^6 steps runs (minutes on the
        CPU): the driver cancels it on the daemon, the trial FAILs, its
        trainer goes, and the driver exits 130 within seconds."""
        a = self.daemon("a")
        db = os.path.join(self.tmp, "int.db")
        proc = subprocess.Popen(search_cmd("--daemons", a.url, "--storage", f"sqlite:///{db}", "--study", "int",
                                           "--trials", 1, "--rounds", 3, "--train-steps", 1000000, "--timeout", 600,
                                           "--seed", 3), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            running = False
            while not running and time.monotonic() < deadline:  # the Step has started: it is the queued job
                time.sleep(0.2)
                with dqnd.Client(a.url, timeout=10) as c:
                    running = any(t["queued"] >= 1 for t in c.list_trainers())
            self.assertTrue(running, "no Step started within 60 s")
            time.sleep(0.5)
            t = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            secs = time.monotonic() - t
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 130, f"stdout:\n{out}\nstderr:\n{err}")
        self.assertLess(secs, 20, out)
        self.assertIn("its running command cancelled", out)
        trials = optuna.load_study(study_name="int", storage=f"sqlite:///{db}").get_trials()
        self.assertEqual([t.state for t in trials], [TS.FAIL])
        self.assertEqual(a.trainers(), [], "the trial's trainer destroyed")

    def test_plot_without_matplotlib(self):
        """--plot where matplotlib cannot be imported: exit 2 at the argument
        check, saying what to install, before a daemon or the storage is touched."""
        fake = os.path.join(self.tmp, "nomatplotlib", "matplotlib")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w") as f:
            f.write('raise ImportError("No module named \'matplotlib\' (this test hides it)")\n')
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(fake)] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
        db = os.path.join(self.tmp, "search.db")
        p, secs = run_search("--daemons", f"ipc://{self.tmp}/nothing.sock", "--storage", f"sqlite:///{db}",
                             "--plot", os.path.join(self.tmp, "curves.png"), timeout=60, env=env)
        self.check(p, rc=2)
        self.assertIn("--plot needs matplotlib", p.stderr)
        self.assertIn("apt-get install python3-matplotlib", p.stderr)
        self.assertFalse(os.path.exists(db), "nothing ran: the study was not even opened")
        self.assertEqual(p.stdout, "")

    def test_two_drivers_share_postgres(self):
        pg = Postgres.start_or_skip(self)
        a, b = self.daemon("a"), self.daemon("b")
        url = pg.url
        drivers = [subprocess.Popen(search_cmd("--daemons", d.url, "--storage", url, "--study", "shared", "--trials", 6,
                                               "--seed", i), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for i, d in enumerate((a, b))]
        runs = []
        for d in drivers:
            out, err = d.communicate(timeout=150)
            runs.append(subprocess.CompletedProcess(d.args, d.returncode, out, err))
        for p in runs:
            self.check(p)
        mine = [started(p.stdout) for p in runs]
        self.assertTrue(mine[0] and mine[1], "both drivers ran trials")
        self.assertFalse(set(mine[0]) & set(mine[1]), "no trial number ran in both drivers")
        names = [n for m in mine for _, n in m.values()]
        self.assertEqual(len(names), len(set(names)), "trainer names are unique")
        self.assertTrue(all(u == a.url for u, _ in mine[0].values()) and all(u == b.url for u, _ in mine[1].values()))
        trials = optuna.load_study(study_name="shared", storage=url).get_trials()
        self.assertEqual({t.number for t in trials}, set(mine[0]) | set(mine[1]), "the study holds every trial")
        self.assertTrue(all(t.state in (TS.COMPLETE, TS.PRUNED) for t in trials), [t.state for t in trials])
        self.assertEqual({t.number: t.user_attrs["trainer"] for t in trials},
                         {k: v[1] for m in mine for k, v in m.items()})
        # each driver stops at 6 finished trials plus its own running one: at most one over per other driver
        self.assertTrue(6 <= len(trials) <= 7, len(trials))
        print(f"\npostgres: driver 1 ran trials {sorted(mine[0])}, driver 2 {sorted(mine[1])}", file=sys.stderr)


class Postgres:
    """A throwaway PostgreSQL cluster: its data directory and unix socket in a
    fresh directory owned by the server's user (postgres when run as root)."""

    @classmethod
    def start_or_skip(cls, test):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins and shutil.which("initdb"):
            bins = [shutil.which("initdb")]
        if not bins:
            test.skipTest("PostgreSQL is not installed (no initdb)")
        as_user = []
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                test.skipTest("running as root and there is no postgres user for initdb")
            if shutil.which("runuser"):
                as_user = ["runuser", "-u", "postgres", "--"]
            elif shutil.which("setpriv"):
                as_user = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
            else:
                test.skipTest("running as root and neither runuser nor setpriv is there to become postgres")
            if subprocess.run(as_user + ["true"], capture_output=True).returncode:
                test.skipTest("cannot become the postgres user")
        pg = cls(os.path.dirname(bins[-1]), as_user)
        test.addCleanup(pg.stop)
        pg.start()
        return pg

    def __init__(self, bindir, as_user):
        self.bin, self.as_user = bindir, as_user
        self.base = tempfile.mkdtemp(prefix="dqnd-pg-")
        if as_user:
            pw = pwd.getpwnam("postgres")
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.data, self.sock = os.path.join(self.base, "data"), self.base
        self.started = False

    def run(self, *cmd):
        # PostgreSQL runs without this test's sanitizer preload (sanitize_build runs set one)
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS")}
        p = subprocess.run(self.as_user + [os.path.join(self.bin, cmd[0]), *cmd[1:]], cwd=self.base, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if p.returncode:
            log = os.path.join(self.base, "server.log")
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}\n"
                               + (open(log).read()[-2000:] if os.path.exists(log) else ""))
        return p

    def start(self):
        self.run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        self.run("pg_ctl", "-D", self.data, "-l", os.path.join(self.base, "server.log"), "-w", "-t", "60", "-o",
                 f"-k {self.sock} -c listen_addresses='' -c fsync=off", "start")
        self.started = True
        self.run("createdb", "-h", self.sock, "-U", "postgres", "optuna")
        self.url = f"postgresql://postgres@/optuna?host={self.sock}"

    def stop(self):
        try:
            if self.started:
                self.run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


if __name__ == "__main__":
    import test_search_units  # the driver's functions against stand-ins (beside this file)

    # meson runs this twice: the search tests, and with --postgres the one
    # that needs PostgreSQL, alone, so that its skip is reported as a skip
    # (exit 77; under CI scripts/test.sh fails it), never as a pass
    pg_only = "--postgres" in sys.argv[1:]
    loader = unittest.TestLoader()
    names = [n for n in loader.getTestCaseNames(SearchTest) if (n == "test_two_drivers_share_postgres") == pg_only]
    units = () if pg_only else (test_search_units.TrainTest, test_search_units.AskPopulationTest,
                                test_search_units.PopulationResumeTest, test_search_units.PopulationRefillTest)
    suite = unittest.TestSuite([SearchTest(n) for n in names] +
                               [c(n) for c in units for n in loader.getTestCaseNames(c)])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped:
        print("skipped: " + "; ".join(reason for _, reason in result.skipped))
        sys.exit(77)
