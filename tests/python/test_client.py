"""The Python package against a real dqnd (CPU backend, a temporary ipc
socket): every command, checked by its effect; bad inputs — wrong dtype,
wrong shape, unknown trainer, a closed daemon — raise DqndError with the
right code and a message naming the argument; the environments are the C
code's (the same rewards as a closed form of client/meanrev_env.h). Stopping a
Step (CancelTest): by the request's deadline (the client's timeout), by a
Cancel from another client while it runs or waits, by the client's own
timeout and by Ctrl-C (a SIGINT to this process), each time checked on the
trainer: the steps that ran, and nothing left running.
Run by meson (suite integration) with DQND_BIN and PYTHONPATH set."""
import faulthandler
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import zlib

import numpy as np

import dqnd
from dqnd import envs

DQND_BIN = os.environ.get("DQND_BIN", "build/daemon/dqnd")
SMALL = {"state_dim": 6, "trunk_h1": 16, "trunk_h2": 12, "value_hidden": 8, "adv_hidden": 10, "atoms": 11,
         "branches": "3,4", "batch": 8, "replay_capacity": 500, "seed": 42, "lr": 0.01}


class Daemon:
    def __init__(self, extra=()):
        self.dir = tempfile.mkdtemp(prefix="dqnd-py-")
        self.url = f"ipc://{self.dir}/d.sock"
        self.extra = extra
        self.start()

    def start(self):
        self.proc = subprocess.Popen([DQND_BIN, "--listen", self.url, "--state-dir", self.dir + "/state",
                                      "--backend", "cpu", "--log-file", self.dir + "/dqnd.log", *self.extra],
                                     env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        for _ in range(250):
            if self.proc.poll() is not None:
                raise RuntimeError(f"dqnd exited with {self.proc.returncode}")
            try:
                with dqnd.Client(self.url, timeout=1) as c:
                    if c.health()["serving"]:
                        return
            except dqnd.DqndError:
                time.sleep(0.02)
        raise RuntimeError("dqnd did not come up")

    def kill_and_restart(self):
        """SIGKILL, then a new process on the same URL and state directory."""
        self.proc.kill()
        self.proc.wait(60)
        self.start()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def batch(n, tag, S=6, A=12):
    rng = np.random.default_rng(tag)
    return dict(states=rng.uniform(-1, 1, (n, S)).astype(np.float32),
                actions=(np.arange(n) * 7 + tag) % A,
                rewards=np.arange(n, dtype=np.float32) + 1000 * tag,
                next_states=rng.uniform(-1, 1, (n, S)).astype(np.float32),
                dones=(np.arange(n) % 5 == 0))


class DaemonTest(unittest.TestCase):
    """Tests that share one CPU daemon, self.d, started before the class's
    first test and stopped cleanly (exit status 0) after its last."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0


class ClientTest(DaemonTest):

    def client(self):
        return dqnd.Client(self.d.url, timeout=30)

    def code(self, code, fn, *a, needle=None, **kw):
        with self.assertRaises(dqnd.DqndError) as cm:
            fn(*a, **kw)
        self.assertEqual(cm.exception.code, code, str(cm.exception))
        self.assertEqual(cm.exception.name, dqnd.CODES[code])
        if needle:
            self.assertIn(needle, cm.exception.message)
        return cm.exception

    def test_every_command(self):
        with self.client() as c:
            self.assertTrue(c.health()["serving"])
            self.assertEqual(c.server_info()["protocol"], 1)
            t = c.create_trainer("every", SMALL)
            self.assertTrue(t["created"])
            self.assertEqual((t["state_dim"], t["branches"], t["backend"]), (6, [3, 4], "cpu"))
            self.assertFalse(c.create_trainer("every", SMALL)["created"])  # idempotent
            self.code(6, c.create_trainer, "every", dict(SMALL, batch=16), needle="different config")
            b = batch(60, 1)
            self.assertEqual(c.submit("every", **b), 60)
            # per-branch actions [n, 2] are the same transitions as flat ones
            per = np.stack([b["actions"] // 4, b["actions"] % 4], axis=1)
            c.create_trainer("perbranch", SMALL)
            c.submit("perbranch", b["states"], per, b["rewards"], b["next_states"], b["dones"])
            s1, s2 = c.step("every", 10), c.step("perbranch", 10)
            self.assertEqual((s1["step"], s1["steps_run"]), (10, 10))
            self.assertEqual(s1["loss_mean"], s2["loss_mean"])  # same bits through float32
            # act: actions are the per-branch argmax of the returned Q values
            a, q = c.act("every", b["states"][:5], q=True)
            self.assertEqual(a.dtype, np.int32)
            self.assertEqual([x.shape for x in q], [(5, 3), (5, 4)])
            np.testing.assert_array_equal(a, q[0].argmax(1) * 4 + q[1].argmax(1))
            np.testing.assert_array_equal(c.act("every", b["states"][:5]), a)
            # SetHyperparams: the info shows it; SyncTarget hard then Polyak
            self.assertEqual(c.set_hyperparams("every", lr=0.002, gamma=0.9)["config"]["lr"], "0.00200000009")
            c.sync_target("every")
            c.sync_target("every", tau=0.5)
            st = c.stats("every")
            self.assertEqual(st["step"], 10)
            self.assertEqual(st["replay_size"], 60)
            # checkpoints: save, list, fetch (CRC-checked), load into a new trainer
            ck = c.save_checkpoint("every", with_replay=True)
            self.assertEqual(ck["step"], 10)
            self.assertEqual([x["seq"] for x in c.list_checkpoints("every")], [ck["seq"]])
            path = os.path.join(self.d.dir, "every.dqnd")
            got = c.fetch_checkpoint("every", path, checkpoint=ck["seq"])
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual((len(data), zlib.crc32(data)), (ck["bytes"], ck["crc32"]))
            self.assertEqual(got["crc32"], ck["crc32"])
            t2 = c.load_checkpoint("copy", file=path, create=True, chunk_bytes=100000)
            self.assertEqual(t2["stats"]["step"], 10)
            t3 = c.load_checkpoint("copy2", path=ck["path"], create=True)
            self.assertEqual(t3["stats"]["replay_size"], 60)
            # the copies continue exactly like the original
            x, y = c.step("every", 3), c.step("copy", 3)
            self.assertEqual(x["loss_mean"], y["loss_mean"])
            # a pinned checkpoint (a resume point) says so, and the list marks it alone
            pinned = c.save_checkpoint("copy2", pin=True)
            self.assertTrue(pinned["pinned"])
            self.assertFalse(c.save_checkpoint("copy2")["pinned"])
            self.assertEqual([p["seq"] for p in c.list_checkpoints("copy2") if p["pinned"]], [pinned["seq"]])
            names = {t["name"] for t in c.list_trainers()}
            self.assertTrue({"every", "perbranch", "copy", "copy2"} <= names)
            fin = c.destroy_trainer("copy", save=True)
            self.assertIn("/.retired/copy-", fin["path"])
            self.assertTrue(os.path.exists(fin["path"]))
            self.assertIsNone(c.destroy_trainer("copy2"))
            self.code(5, c.stats, "copy", needle="no trainer 'copy'")

    def test_population(self):
        """a population of 3 from Python: each member trains as a lone
        trainer of its seed (stats and Q, bit for bit); copy_member; bad
        member indices refused before sending or by the daemon"""
        with self.client() as c:
            t = c.create_trainer("popy", SMALL, population=3)
            self.assertEqual((t["population"], t["member"]), (3, 0))
            seed = int(SMALL["seed"]) if "seed" in SMALL else int(t["config"]["seed"])
            for i in range(3):
                c.create_trainer(f"popy-lone{i}", dict(SMALL, seed=seed + i))
                b = batch(30 + 10 * i, 40 + i)
                c.submit("popy", **b, member=i)
                c.submit(f"popy-lone{i}", **b)
            c.set_hyperparams("popy", member=1, lr=0.02)
            c.set_hyperparams("popy-lone1", lr=0.02)
            r = c.step("popy", 4)
            self.assertEqual(len(r["members"]), 3)
            self.assertEqual(r["diverged"], [])
            states = batch(5, 99)["states"]
            for i in range(3):
                lone = c.step(f"popy-lone{i}", 4)
                self.assertEqual(r["members"][i]["loss_last"], lone["loss_last"])  # same bits through float32
                self.assertEqual(r["members"][i]["step"], 4)
                a1, q1 = c.act("popy", states, q=True, member=i)
                a2, q2 = c.act(f"popy-lone{i}", states, q=True)
                np.testing.assert_array_equal(a1, a2)
                for x, y in zip(q1, q2):
                    np.testing.assert_array_equal(x, y)
            info = c.trainer_info("popy", member=2)
            self.assertEqual((info["member"], info["config"]["seed"]), (2, str(seed + 2)))
            d = c.copy_member("popy", 2, 1, lr=0.5)
            self.assertEqual(np.float32(d["config"]["lr"]), np.float32(float(np.float32(0.02)) * 0.5))
            self.assertEqual(d["stats"]["step"], 4)
            # one member's state: fetched from the population's checkpoint it is the
            # bytes of its lone twin's checkpoint; loaded into another member that
            # member acts as the twin does
            c.save_checkpoint("popy", with_replay=True)
            c.save_checkpoint("popy-lone1", with_replay=True)
            c.save_checkpoint("popy-lone0", with_replay=True)
            d = tempfile.mkdtemp(prefix="dqnd-member-")
            m1, l1, l0 = (os.path.join(d, f) for f in ("m1", "l1", "l0"))
            c.fetch_checkpoint("popy", m1, member=1)
            c.fetch_checkpoint("popy-lone1", l1)
            c.fetch_checkpoint("popy-lone0", l0)
            with open(m1, "rb") as f1, open(l1, "rb") as f2:
                self.assertEqual(f1.read(), f2.read(), "member 1's bytes are not its lone twin's")
            got = c.load_checkpoint("popy", file=l0, member=2)
            self.assertEqual((got["member"], got["config"]["seed"]), (2, str(seed + 2)), "it keeps its seed")
            a1, q1 = c.act("popy", states, q=True, member=2)
            a2, q2 = c.act("popy-lone0", states, q=True)
            np.testing.assert_array_equal(a1, a2)
            for x, y in zip(q1, q2):
                np.testing.assert_array_equal(x, y)
            self.code(3, c.load_checkpoint, "popy", file=l0, member=2, create=True,
                      needle="create: a member's state loads into an existing trainer's member")
            self.code(3, c.load_checkpoint, "popy", file=l0, member=5, needle="member: 5 is outside [0, 3)")
            self.code(3, c.fetch_checkpoint, "popy", m1, member=7, needle="member: 7 is outside [0, 3)")
            # an uploaded file is named as data, a daemon-side one as path
            whole = os.path.join(d, "whole")
            c.fetch_checkpoint("popy", whole)
            self.code(3, c.load_checkpoint, "popy", file=whole, member=1,
                      needle="data: the checkpoint holds 3 members; a member's state is a lone trainer's")
            self.code(9, c.load_checkpoint, "popy-lone0", file=whole,
                      needle="data: the checkpoint holds 3 members, trainer 'popy-lone0' 1")
            self.code(9, c.load_checkpoint, "popy-lone0", path=c.list_checkpoints("popy")[-1]["path"],
                      needle="path: the checkpoint holds 3 members, trainer 'popy-lone0' 1")
            shutil.rmtree(d)
            self.code(3, c.submit, "popy", **batch(5, 1), member=3, needle="member: 3 is outside [0, 3)")
            self.code(3, c.stats, "popy", member=-1, needle="member: -1 is not an integer")
            self.code(3, c.copy_member, "popy", 1, 1, needle="dst: 1 is src too")
            self.code(3, c.copy_member, "popy", 2, 0, lr=float("nan"), needle="factors: lr = nan")
            self.code(3, c.create_trainer, "popz", SMALL, population=0, needle="population: 0 is not")

    def test_bad_inputs(self):
        with self.client() as c:
            c.create_trainer("bad", SMALL)
            b = batch(20, 2)
            # wrong dtype, checked here before sending
            self.code(3, c.submit, "bad", **dict(b, actions=b["actions"].astype(np.float64)),
                      needle="actions: dtype float64, expected an integer array")
            self.code(3, c.submit, "bad", **dict(b, states=b["states"].astype(str)), needle="states: dtype")
            # wrong shapes, each named
            self.code(3, c.submit, "bad", **dict(b, states=b["states"][:, :5]),
                      needle="states: shape (20, 5), expected (n, 6)")
            self.code(3, c.submit, "bad", **dict(b, next_states=b["next_states"][:19]),
                      needle="next_states: shape (19, 6), expected (20, 6)")
            self.code(3, c.submit, "bad", **dict(b, rewards=b["rewards"][:3]), needle="rewards: shape (3,)")
            self.code(3, c.submit, "bad", **dict(b, actions=np.zeros((20, 3), int)), needle="actions: shape (20, 3)")
            self.code(3, c.submit, "bad", **dict(b, dones=np.full(20, 2)), needle="dones: every flag must be 0 or 1")
            self.code(3, c.submit, "bad", **dict(b, actions=np.full(20, 2**32 + 1)), needle="actions: 4294967297 is outside")
            self.code(3, c.submit, "bad", **dict(b, episode_ids=np.full(20, 2**64 - 1, dtype=np.uint64)),
                      needle="episode_ids: 18446744073709551615 is outside")
            self.code(3, c.act, "bad", np.zeros((2, 7), np.float32), needle="states: shape (2, 7)")
            # the daemon's own checks: an action out of range, a NaN, a misspelt field
            self.code(3, c.submit, "bad", **dict(b, actions=np.full(20, 12)), needle="actions[0]: 12 is outside [0, 12)")
            s = b["states"].copy()
            s[3, 2] = np.nan
            self.code(3, c.submit, "bad", **dict(b, states=s), needle="states[3][2]: not finite")
            self.code(3, c.set_hyperparams, "bad", lrr=0.1, needle="did you mean 'lr'")
            self.code(3, c.set_hyperparams, "bad", batch=4, needle="batch")
            self.code(3, c.create_trainer, "new", dict(SMALL, atoms=1), needle="atoms")
            self.code(3, c.create_trainer, "bad name!", SMALL, needle="name")
            # unknown trainer
            self.code(5, c.step, "ghost", 1, needle="ghost")
            self.code(5, c.submit, "ghost", **b, needle="ghost")
            self.code(5, c.fetch_checkpoint, "bad", os.path.join(self.d.dir, "x.dqnd"), needle="none written yet")
            self.assertFalse(os.path.exists(os.path.join(self.d.dir, "x.dqnd")))
            self.code(9, c.step, "bad", 1)  # FAILED_PRECONDITION: no batch in the replay yet
            # what the wire cannot carry: refused as INVALID_ARGUMENT naming the argument, nothing sent
            self.code(3, c.step, "bad", -1, needle="n: -1 is not an integer in [0, 2^32)")
            self.code(3, c.step, "bad", 1 << 32, needle="n: 4294967296 is not")
            self.code(3, c.pretrain_dt, "bad", -5, needle="n: -5 is not")
            self.code(3, c.copy_member, "bad", 1, 0, lr=10 ** 400, needle="factors: lr = ")
            self.code(3, c.cancel, "bad", -1, needle="request_id: -1 is not an integer in [0, 2^64)")
            self.assertEqual(c.stats("bad")["replay_total"], 0)  # none of the above stored anything

    def test_ensemble_act(self):
        """Act over K heads through the daemon: the mean and the variance come
        back, ucb picks the argmax of mean + ucb_c * std, thompson keeps one
        head per episode (the CPU learner's oracle test checks the numbers)."""
        with self.client() as c:
            c.create_trainer("ens", dict(SMALL, ensemble_k=3, act_select="ucb", ucb_c=2))
            b = batch(40, 5)
            c.submit("ens", **b)
            c.step("ens", 3)
            st = b["states"][:12] * 4
            a, q, v = c.act("ens", st, q_var=True)
            self.assertEqual([x.shape for x in v], [(12, 3), (12, 4)])
            self.assertTrue(all((x >= 0).all() for x in v) and any((x > 0).any() for x in v))
            score = [q[d] + 2 * np.sqrt(v[d].astype(np.float64)) for d in range(2)]
            np.testing.assert_array_equal(a, score[0].argmax(1) * 4 + score[1].argmax(1))
            c.set_hyperparams("ens", act_select="thompson")
            per_ep = [c.act("ens", st, episode=e) for e in range(12)]
            for e in range(3):
                np.testing.assert_array_equal(c.act("ens", st, episode=e), per_ep[e])  # the episode's head
            self.assertGreater(len({x.tobytes() for x in per_ep}), 1)  # episodes draw different heads
            self.code(3, c.set_hyperparams, "ens", act_select="greedy", needle="act_select")
            self.code(3, c.act, "ens", st, episode=-1, needle="episode")
            c.create_trainer("single", SMALL)  # K = 1: the variance is 0
            _, _, v1 = c.act("single", st, q_var=True)
            self.assertTrue(all((x == 0).all() for x in v1))

    def test_shapes_change_under_a_client(self):
        with self.client() as a, self.client() as b:
            a.create_trainer("shifty", SMALL)
            st = np.zeros((4, 6), np.float32)
            self.assertEqual([x.shape for x in a.act("shifty", st, q=True)[1]], [(4, 3), (4, 4)])
            b.destroy_trainer("shifty")
            b.create_trainer("shifty", dict(SMALL, branches="5"))
            self.code(9, a.act, "shifty", st, q=True, needle="changed shape")
            self.assertEqual([x.shape for x in a.act("shifty", st, q=True)[1]], [(4, 5)])  # asked again

    def test_restart_behind_the_client(self):
        """The daemon killed and restarted under a connected Client: its next
        call, answered by the new process (Reply.instance changed), raises
        UNAVAILABLE "the daemon restarted" instead of succeeding on a trainer
        rolled back to its checkpoint; the call after it is answered."""
        d = Daemon(extra=("--checkpoint-replay", "1"))
        try:
            with dqnd.Client(d.url, timeout=30) as c:
                c.create_trainer("r", SMALL)
                c.submit("r", **batch(16, 1))
                c.save_checkpoint("r", with_replay=True)
                c.submit("r", **batch(16, 2))  # after the checkpoint: lost with the kill
                self.assertEqual(c.stats("r")["replay_total"], 32)
                d.kill_and_restart()
                e = self.code(14, c.stats, "r", needle="the daemon restarted")
                self.assertFalse(e.transport, "a reply came, from the new process")
                self.assertEqual(c.stats("r")["replay_total"], 16)
        finally:
            self.assertEqual(d.stop(), 0)

    def test_upload_within_the_message_limit(self):
        """A checkpoint bigger than the daemon's max_message_bytes is uploaded
        in chunks that fit it when chunk_bytes is not given (they were 4 MiB
        whatever the daemon took, and nng dropped them), and arrives whole."""
        d = Daemon(extra=("--max-message-bytes", "65536"))
        try:
            with dqnd.Client(d.url, timeout=30) as c:
                c.create_trainer("u", dict(SMALL, replay_capacity=2000))
                for k in range(20):
                    c.submit("u", **batch(64, k))
                ck = c.save_checkpoint("u", with_replay=True)
                path = os.path.join(d.dir, "u.dqnd")
                c.fetch_checkpoint("u", path)
                self.assertGreater(os.path.getsize(path), 65536, "one message would hold it: nothing tested")
                t = c.load_checkpoint("copy", file=path, create=True)
                self.assertEqual(t["stats"]["replay_total"], c.stats("u")["replay_total"])
                self.assertEqual(ck["bytes"], os.path.getsize(path))
                self.code(3, c.load_checkpoint, "copy2", file=path, create=True, chunk_bytes=0, needle="chunk_bytes")
        finally:
            self.assertEqual(d.stop(), 0)

    def test_unreachable_and_closed(self):
        e = self.code(14, dqnd.Client, f"ipc://{self.d.dir}/nothing.sock")
        self.assertIn("is dqnd running?", e.message)
        # a closed client says so rather than touching a freed socket
        c = dqnd.Client(self.d.url, timeout=5)
        self.assertTrue(c.health()["serving"])
        c.close()
        self.code(14, c.health, needle="closed")
        # a socket directory in a world-writable one (as /tmp) that others may write, or a link: refused before
        # the dial (the C library's rule, proto/dqnd/default_url.c)
        pub = tempfile.mkdtemp(prefix="dqnd-pub-")
        try:
            os.chmod(pub, 0o1777)
            os.mkdir(os.path.join(pub, "open"))
            os.chmod(os.path.join(pub, "open"), 0o777)
            e = self.code(14, dqnd.Client, f"ipc://{pub}/open/dqnd.sock")
            self.assertIn("writable by others", e.message)
            os.symlink(self.d.dir, os.path.join(pub, "link"))
            e = self.code(14, dqnd.Client, f"ipc://{pub}/link/dqnd.sock")
            self.assertIn("a symbolic link", e.message)
        finally:
            shutil.rmtree(pub)


class Stepper:
    """step(name, n) on a Client of its own in a thread; started() returns
    once the request is sent (its request_id known)."""

    def __init__(self, url, name, n, timeout=30):
        self.c = dqnd.Client(url, timeout=timeout)
        self.result = self.error = None
        before = self.c.pending_request_id
        self.t = threading.Thread(target=self._run, args=(name, n), daemon=True)
        self.t.start()
        for _ in range(2000):
            if self.c.pending_request_id != before:
                break
            time.sleep(0.001)
        self.rid = self.c.pending_request_id
        assert self.rid != before, "the Step was not sent"

    def _run(self, name, n):
        try:
            self.result = self.c.step(name, n)
        except dqnd.DqndError as e:
            self.error = e

    def join(self):
        self.t.join(60)
        assert not self.t.is_alive(), "the Step did not answer"
        self.c.close()
        return self


class CancelTest(DaemonTest):
    """A Step of 10^6 steps (tens of seconds of SMALL's) stopped early."""

    def trainer(self, name):
        with dqnd.Client(self.d.url, timeout=30) as c:
            c.create_trainer(name, SMALL)
            c.submit(name, **batch(60, 1))
            c.step(name, 2)
            return c.stats(name)["step"]

    def test_request_ids_and_deadlines(self):
        with dqnd.Client(self.d.url, timeout=5) as a, dqnd.Client(self.d.url, timeout=5) as b:
            a.health()
            b.health()
            # random starts (62 bits, odd), one up per request: a Cancel naming one finds this client's Step
            self.assertNotEqual(a.pending_request_id, b.pending_request_id)
            self.assertTrue(a.pending_request_id > 1 << 32 and a.pending_request_id % 2 == 1, a.pending_request_id)
            first = a.pending_request_id
            a.health()
            self.assertEqual(a.pending_request_id, first + 1)
        # the deadline a request carries: the client's timeout less a tenth, at most 1 s (libdqnd's rule)
        self.assertEqual([dqnd.client.request_timeout_ms(t) for t in (5, 2000, 30000, 60000)], [5, 1800, 29000, 59000])

    def test_step_stopped_by_its_deadline(self):
        """timeout 2 s: the request carries 1800 ms; the Step stops there and
        answers with the steps that ran, before the client gives up."""
        before = self.trainer("deadline")
        with dqnd.Client(self.d.url, timeout=2) as c:
            t0 = time.monotonic()
            r = c.step("deadline", 1000000)
            took = time.monotonic() - t0
            self.assertTrue(r["stopped"], r)
            self.assertEqual(r["stop_reason"], "deadline")
            self.assertTrue(0 < r["steps_run"] < 1000000, r["steps_run"])
            self.assertTrue(1.7 <= took < 2.0, f"answered after {took:.2f} s")
            self.assertEqual(r["step"], before + r["steps_run"])
            self.assertEqual(c.stats("deadline")["step"], before + r["steps_run"], "the trainer holds those steps")
            # every step ran: stopped False, no reason
            r = c.step("deadline", 3)
            self.assertEqual((r["stopped"], r["stop_reason"], r["steps_run"]), (False, "", 3))
        with open(os.path.join(self.d.dir, "dqnd.log")) as f:
            self.assertIn("[deadline] Step deadline: stopped after", f.read())

    def test_cancel_running_queued_and_timed_out(self):
        """Three Steps on one trainer: the first runs; the second waits
        behind it and is cancelled there by another client (CANCELLED, it
        never runs); the third's client gives up after 1 s, and the client
        cancels it on the daemon before it raises DEADLINE_EXCEEDED; then
        the first is cancelled by its request_id while running."""
        before = self.trainer("cancel")
        running = Stepper(self.d.url, "cancel", 1000000)
        time.sleep(0.3)  # it runs (a Cancel now would find it "running")
        queued = Stepper(self.d.url, "cancel", 1000000)
        time.sleep(0.2)
        with dqnd.Client(self.d.url, timeout=1) as c:
            t0 = time.monotonic()
            e = self.code_of(c.step, "cancel", 5)
            self.assertTrue(1.0 <= time.monotonic() - t0 < 3.5)
            self.assertEqual(e.code, 4, str(e))
            self.assertIn("(the Step was cancelled on the daemon)", e.message)
            # its CANCELLED reply was taken before step() raised: nothing in flight when the socket closes
            self.assertFalse(c._sock.in_flight)
        with dqnd.Client(self.d.url, timeout=5) as c:
            self.assertEqual(c.cancel("cancel", queued.rid), "queued")
            self.assertEqual(c.cancel("cancel", running.rid), "running")
            running.join()
            queued.join()
            self.assertIsNone(running.error)
            r = running.result
            self.assertEqual((r["stopped"], r["stop_reason"]), (True, "cancelled"))
            self.assertTrue(0 < r["steps_run"] < 1000000, r["steps_run"])
            self.assertEqual(queued.error.code, 1, str(queued.error))  # CANCELLED, and it never ran:
            self.assertEqual(c.stats("cancel")["step"], before + r["steps_run"], "only the first Step's steps")
            # nothing to cancel: "none" (the trainer's current command, or an id it never saw);
            # no such trainer: NOT_FOUND
            self.assertEqual(c.cancel("cancel"), "none")
            self.assertEqual(c.cancel("cancel", 12345), "none")
            e = self.code_of(c.cancel, "nosuch", 1)
            self.assertEqual(e.code, 5)

    def test_timed_out_reply_is_settled(self):
        """A long call's receive that times out stays in flight for the late
        reply (keep): settle() takes it (True) once the daemon answers, the
        socket then carries the next call. libnng 1.5 can hang closing a pipe
        while a reply is being received on it; a client lets it land first."""
        self.trainer("settle")
        running = Stepper(self.d.url, "settle", 1000000)
        time.sleep(0.3)  # it runs: a second Step waits behind it
        with dqnd.Client(self.d.url, timeout=1) as c, dqnd.Client(self.d.url, timeout=5) as other:
            with self.assertRaises(dqnd.DqndError) as cm:
                c._call("step", dqnd.client.pb.Step(name="settle", n=5), keep=True)
            self.assertEqual(cm.exception.code, 4)
            self.assertTrue(cm.exception.transport)
            self.assertTrue(c._sock.in_flight, "the receive was kept")
            self.assertIsNone(other._sock.settle(10), "nothing in flight: None")
            self.assertEqual(other.cancel("settle", c.pending_request_id), "queued")
            self.assertTrue(c._sock.settle(5000), "its CANCELLED reply came")
            self.assertFalse(c._sock.in_flight)
            self.assertEqual(c.health()["serving"], True)
            # kept again and not settled: the next call gives it up first, the socket stays usable
            with self.assertRaises(dqnd.DqndError):
                c._call("step", dqnd.client.pb.Step(name="settle", n=5), keep=True)
            second = c.pending_request_id
            self.assertTrue(c._sock.in_flight)
            self.assertEqual(c.health()["serving"], True)
            self.assertFalse(c._sock.in_flight)
            self.assertEqual(other.cancel("settle", second), "queued")
            self.assertEqual(other.cancel("settle", running.rid), "running")
            running.join()

    def test_ctrl_c_cancels_the_step(self):
        """SIGINT to this process while step() waits: KeyboardInterrupt
        within a fraction of a second (the wait is sliced), and the Step
        stopped on the daemon (the trainer's counter stands still and a
        short Step answers at once, not behind the long one)."""
        self.trainer("ctrlc")
        with dqnd.Client(self.d.url, timeout=30) as c:
            before = c.pending_request_id
            sent = []

            def interrupt():
                while c.pending_request_id == before:
                    time.sleep(0.001)
                time.sleep(0.3)  # the Step runs
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGINT)

            t = threading.Thread(target=interrupt, daemon=True)
            t.start()
            with self.assertRaises(KeyboardInterrupt) as cm:
                c.step("ctrlc", 1000000)
            late = time.monotonic() - sent[0]
            t.join()
            self.assertLess(late, 2.0, f"KeyboardInterrupt {late:.2f} s after SIGINT")
            notes = " ".join(getattr(cm.exception, "__notes__", []))
            self.assertIn("of trainer 'ctrlc' was cancelled on the daemon", notes)
            # the client is usable, the trainer idle: its counter stands still and a short Step answers at once
            s1 = c.stats("ctrlc")["step"]
            time.sleep(0.3)
            self.assertEqual(c.stats("ctrlc")["step"], s1, "the Step still runs on the daemon")
            t0 = time.monotonic()
            self.assertEqual(c.step("ctrlc", 2)["steps_run"], 2)
            self.assertLess(time.monotonic() - t0, 1.0)
        with open(os.path.join(self.d.dir, "dqnd.log")) as f:
            log = f.read()
        self.assertIn("[ctrlc] Step cancelled: stopped after", log)
        self.assertIn(f"[ctrlc] Cancel (request {c.pending_request_id - 3}): running", log)

    def test_url_without_a_scheme(self):
        for url, needle in ((self.d.dir + "/d.sock", "has no scheme"), ("udp://localhost:5555", "the scheme 'udp'")):
            e = self.code_of(dqnd.Client, url)
            self.assertEqual(e.code, 3, str(e))  # INVALID_ARGUMENT, before any dial
            self.assertIn(needle, e.message)
            for scheme in ("ipc://", "tcp://", "tls+tcp://"):
                self.assertIn(scheme, e.message)

    def code_of(self, fn, *a):
        with self.assertRaises(dqnd.DqndError) as cm:
            fn(*a)
        return cm.exception


def make_certs(d):
    """openssl at test time: a CA, a server certificate for localhost and a
    client certificate signed by it, and another CA (tests/harness.c's recipe)"""
    k = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)
    run("req", "-x509", *k, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test CA")
    run("req", "-x509", *k, "-keyout", "other.key", "-out", "other.pem", "-days", "2", "-subj", "/CN=other CA")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost\n")
    for who, cn, ext in (("server", "localhost", ["-extfile", "san.ext"]), ("client", "a client", [])):
        run("req", *k, "-keyout", who + ".key", "-out", who + ".csr", "-subj", "/CN=" + cn)
        run("x509", "-req", "-in", who + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", who + ".pem", "-days", "2", *ext)


class TlsTest(unittest.TestCase):
    """tls_ca / tls_cert / tls_key: the Python package over tls+tcp:// with
    mutual TLS and a token, as libdqnd and dqnctl (tests/test-security.c)"""

    def test_mutual_tls(self):
        certs = tempfile.mkdtemp(prefix="dqnd-py-tls-")
        try:
            make_certs(certs)
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            p = lambda f: os.path.join(certs, f)
            d = Daemon(["--listen", f"tls+tcp://127.0.0.1:{port}", "--tls-cert", p("server.pem"),
                        "--tls-key", p("server.key"), "--tls-ca", p("ca.pem"), "--tls-verify-clients"])
            try:
                url = f"tls+tcp://localhost:{port}"
                with dqnd.Client(url, timeout=5, tls_ca=p("ca.pem"), tls_cert=p("client.pem"),
                                 tls_key=p("client.key")) as c:
                    self.assertTrue(c.health()["serving"])
                    c.create_trainer("overtls", SMALL)
                    self.assertEqual(c.submit("overtls", **batch(16, 1)), 16)
                with self.assertRaises(dqnd.DqndError) as e:  # no client certificate
                    dqnd.Client(url, timeout=3, tls_ca=p("ca.pem")).health()
                self.assertEqual(e.exception.code, 14)
                with self.assertRaises(dqnd.DqndError) as e:  # a CA that did not sign the daemon's
                    dqnd.Client(url, timeout=3, tls_ca=p("other.pem"), tls_cert=p("client.pem"),
                                tls_key=p("client.key"))
                self.assertEqual(e.exception.code, 14)
                self.assertIn("TLS", str(e.exception))
                with self.assertRaises(dqnd.DqndError) as e:  # no CA at all: named, before any connection
                    dqnd.Client(url, timeout=3, tls_ca="")
                self.assertEqual(e.exception.code, 3)
                self.assertIn("tls_ca", str(e.exception))
            finally:
                self.assertEqual(d.stop(), 0)
        finally:
            shutil.rmtree(certs, ignore_errors=True)


class EnvTest(unittest.TestCase):
    def test_meanrev_is_the_c_environment(self):
        e = envs.make("meanrev", seed=7)
        obs, info = e.reset()
        self.assertEqual(obs.shape, (4,))
        self.assertEqual(obs.dtype, np.float32)
        steps, ret = 0, 0.0
        while True:
            x, s, v = float(obs[0]), float(obs[1]), float(obs[2])
            a = info["optimal_action"]
            p, o, u = (a // 9 - 4) / 4, (a % 9) // 3, a % 3
            # the closed form of meanrev_env.h: r = -p x - 0.5 p^2 - c_o(s) - c_u(v)
            co = (0.3 * s, 0.1, 0.3 * (1 - s))[o]
            cu = (0.3 * v, 0.1, 0.3 * (1 - v))[u]
            want = -p * x - 0.5 * p * p - co - cu
            self.assertAlmostEqual(e.reward(a), want, places=5)
            # the optimal action is the best of all 81
            self.assertGreaterEqual(e.reward(a) + 1e-6, max(e.reward(k) for k in range(81)))
            self.assertEqual(e.encode((a // 9, (a % 9) // 3, a % 3)), a)
            obs, r, term, trunc, info = e.step(a)
            self.assertAlmostEqual(r, want, places=5)
            steps, ret = steps + 1, ret + r
            if term or trunc:
                break
        self.assertEqual(steps, e.horizon)
        # the same (seed, episode) replays the same episode
        o1, _ = e.reset(episode=0)
        o2, _ = envs.MeanRev(seed=7).reset()
        np.testing.assert_array_equal(o1, o2)
        with self.assertRaises(ValueError):
            e.step(81)
        with self.assertRaises(ValueError):
            e.reward(-1)
        with self.assertRaises(ValueError):
            e.step((1, 2))  # two indices for three branches
        # deep sea: the only positive return needs N - 1 moves right in N steps
        N = 8
        d = envs.make("deepsea", size=N, seed=5)
        rights = set()
        for plan in ("optimal", "all-right", "all-left"):
            obs, info = d.reset()
            ret, steps = 0.0, 0
            while True:
                self.assertEqual(obs.sum(), 1.0)  # the one-hot agent
                rights.add(info["right_action"])
                right = info["right_action"]
                a = {"optimal": right if steps > 0 else 1 - right, "all-right": right, "all-left": 1 - right}[plan]
                obs, r, term, trunc, info = d.step(a)
                ret, steps = ret + r, steps + 1
                if trunc:
                    break
            self.assertEqual(steps, N)
            want = {"optimal": 1 - 0.01 * (N - 1) / N, "all-right": 1 - 0.01, "all-left": 0.0}[plan]
            self.assertAlmostEqual(ret, want, places=5)
            self.assertAlmostEqual(obs.sum(), 0.0)  # past the last row
        self.assertEqual(rights, {0, 1}, "which action moves right varies from cell to cell")
        self.assertAlmostEqual(d.optimal_return, 1 - 0.01 * (N - 1) / N, places=6)
        with self.assertRaises(ValueError):
            d.step(2)
        cfg = envs.MeanRev.learner_config()
        self.assertEqual((cfg["state_dim"], cfg["branches"]), ("4", "9,3,3"))
        # deep sea's settings are the C environment's (deepsea_learner_config):
        # the ensemble the learning test holds to its bar, not a copy that drifts
        ds = envs.DeepSea.learner_config(N)
        self.assertEqual((ds["state_dim"], ds["branches"], ds["ensemble_k"], ds["act_select"]),
                         (str(N * N), "2", "10", "thompson"))
        self.assertEqual(np.float32(ds["lr"]), np.float32(1e-4))
        with self.assertRaises(KeyError):
            envs.make("nosuch")


if __name__ == "__main__":
    # meson stops this file at 120 s (a run takes ~6): a hang prints every
    # thread's stack first, so the log says where (one CI run on a loaded
    # machine timed out in test_cancel_running_queued_and_timed_out)
    faulthandler.dump_traceback_later(100, exit=False)
    unittest.main(verbosity=2)
