"""dqnd's Prometheus metrics against a real daemon (CPU backend, a temporary
ipc socket, --metrics-listen on 127.0.0.1 port 0: the daemon logs the port it
bound). A known set of requests, every one seen by a spy on the client's
_call plus two raw ones (garbage, no command), then /metrics must show
exactly those: requests by command and code, transitions, optimiser steps
(explicit and continuous training), the trainers' gauges; histograms whose
counts equal the requests and steps and whose buckets are cumulative.
Paths other than /metrics answer 404.
Run by meson (suite integration) with DQND_BIN and PYTHONPATH set; needs
prometheus_client (Debian: python3-prometheus-client)."""
import collections
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import sys

import numpy as np

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    # meson's skip (77); under CI scripts/test.sh fails it: .ci/run installs it
    print("prometheus_client is not importable (Debian: python3-prometheus-client): skipped")
    sys.exit(77)

import dqnd
from dqnd.v1 import dqnd_pb2 as pb

DQND_BIN = os.environ.get("DQND_BIN", "build/daemon/dqnd")
SMALL = {"state_dim": 6, "trunk_h1": 16, "trunk_h2": 12, "value_hidden": 8, "adv_hidden": 10, "atoms": 11,
         "branches": "3,4", "batch": 8, "replay_capacity": 500, "seed": 42, "lr": 0.01}


class Daemon:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="dqnd-metrics-")
        self.url = f"ipc://{self.dir}/d.sock"
        self.log = self.dir + "/dqnd.log"
        self.proc = subprocess.Popen([DQND_BIN, "--listen", self.url, "--state-dir", self.dir + "/state",
                                      "--backend", "cpu", "--log-file", self.log,
                                      "--metrics-listen", "http://127.0.0.1:0"],
                                     env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        for _ in range(250):
            if self.proc.poll() is not None:
                raise RuntimeError(f"dqnd exited with {self.proc.returncode}")
            try:
                with dqnd.Client(self.url, timeout=1) as c:
                    if c.health()["serving"]:
                        break
            except dqnd.DqndError:
                time.sleep(0.02)
        else:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("dqnd did not come up")
        with open(self.log) as f:
            m = re.search(r"metrics on (http://127\.0\.0\.1:(\d+)/metrics)", f.read())
        if not m or m.group(2) == "0":
            # stopped here, or its open stderr keeps meson waiting to its timeout
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("no 'metrics on http://127.0.0.1:PORT/metrics' line in the log")
        self.metrics_url = m.group(1)
        self.base = self.metrics_url[:-len("/metrics")]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def batch(n, tag, S=6, A=12):
    rng = np.random.default_rng(tag)
    return dict(states=rng.uniform(-1, 1, (n, S)).astype(np.float32), actions=(np.arange(n) * 7 + tag) % A,
                rewards=np.arange(n, dtype=np.float32), next_states=rng.uniform(-1, 1, (n, S)).astype(np.float32),
                dones=(np.arange(n) % 5 == 0))


def camel(field):
    """the Request oneof field's command name, as dispatch.c's table has it"""
    return "".join(p.capitalize() for p in field.split("_"))


class Spy:
    """Counts every request a client sends, by (command, code name)."""

    def __init__(self, client, counts):
        orig = client._call

        def call(field, msg, **kw):
            try:
                r = orig(field, msg, **kw)
            except dqnd.DqndError as e:
                counts[(camel(field), dqnd.CODES[e.code])] += 1
                raise
            counts[(camel(field), "OK")] += 1
            return r
        client._call = call


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def samples(text):
    """{(sample name, frozenset(labels)): value} and {family name: type}"""
    out, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"{key} twice"
            out[key] = s.value
    return out, types


def value(sm, name, **labels):
    return sm.get((name, frozenset(labels.items())), 0)


def by_labels(sm, name, drop=()):
    """{frozenset(labels without `drop`): [(labels, value)]} for one sample name"""
    g = collections.defaultdict(list)
    for (n, lab), v in sm.items():
        if n == name:
            d = dict(lab)
            g[frozenset((k, x) for k, x in d.items() if k not in drop)].append((d, v))
    return g


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0

    def check_histogram(self, sm, name):
        """cumulative buckets, +Inf == _count, _sum >= 0; returns {labels: count}"""
        counts = {}
        for key, rows in by_labels(sm, name + "_bucket", drop=("le",)).items():
            rows.sort(key=lambda r: float(r[0]["le"]))
            vals = [v for _, v in rows]
            self.assertEqual(rows[-1][0]["le"], "+Inf", f"{name}{dict(key)}: no +Inf bucket")
            self.assertEqual(vals, sorted(vals), f"{name}{dict(key)}: buckets not cumulative: {vals}")
            self.assertEqual(vals[-1], sm[(name + "_count", key)], f"{name}{dict(key)}: +Inf != _count")
            self.assertGreaterEqual(sm[(name + "_sum", key)], 0)
            counts[key] = vals[-1]
        return counts

    def test_heap_follows_a_trainer(self):
        """dqnd_heap_bytes (malloc's bytes in use) rises by at least a CPU
        trainer's replay ring when it is created (calloc: counted whole,
        before its pages are touched) and falls back within 5 s of its
        destruction"""
        def heap():
            sm, _ = samples(scrape(self.d.metrics_url)[2])
            return sm[("dqnd_heap_bytes", frozenset())]
        cap, S = 200_000, SMALL["state_dim"]
        ring = 2 * cap * S * 4  # states and next states, float32
        with dqnd.Client(self.d.url, timeout=30) as c:
            h0 = heap()
            c.create_trainer("heap", dict(SMALL, replay_capacity=cap))
            h1 = heap()
            c.destroy_trainer("heap")
            # the learner is freed by its worker after the reply
            deadline = time.monotonic() + 5
            while (h2 := heap()) - h0 >= ring / 10 and time.monotonic() < deadline:
                time.sleep(0.05)
        self.assertGreaterEqual(h1 - h0, ring, (h0, h1, h2))
        self.assertLess(abs(h2 - h0), ring / 10, (h0, h1, h2))

    def test_counts_match_requests(self):
        status, ctype, text = scrape(self.d.metrics_url)
        self.assertEqual(status, 200)
        self.assertEqual(ctype, "text/plain; version=0.0.4; charset=utf-8")
        before, _ = samples(text)

        sent = collections.Counter()
        with dqnd.Client(self.d.url, timeout=30) as c:
            Spy(c, sent)
            c.health()
            c.create_trainer("m", SMALL)
            c.create_trainer("m", SMALL)  # idempotent: OK again
            with self.assertRaises(dqnd.DqndError):
                c.create_trainer("m", dict(SMALL, batch=16))  # ALREADY_EXISTS
            for i, n in enumerate((30, 25, 45)):
                c.submit("m", **batch(n, i))
            for _ in range(3):
                c.step("m", 5)
            with self.assertRaises(dqnd.DqndError):
                c.step("nope", 1)  # NOT_FOUND
            with self.assertRaises(dqnd.DqndError):
                c.step("m", 0)  # INVALID_ARGUMENT
            c.act("m", batch(4, 9)["states"])
            with self.assertRaises(dqnd.DqndError):
                c.act("nope", batch(4, 9)["states"])
            # continuous training: samples_per_insert 4, batch 8: a submit of
            # n (replay >= batch) owes 4n/8 steps, run on the worker
            c.create_trainer("cont", dict(SMALL, samples_per_insert=4))
            c.submit("cont", **batch(20, 5))  # 10 steps
            c.submit("cont", **batch(6, 6))  # 3 steps
            c.list_trainers()
            # two requests no client sends: bytes that are no Request, and a
            # Request with no command
            junk = c._sock.call(b"\xff\xff\xff")
            empty = c._sock.call(pb.Request(version=1, request_id=999).SerializeToString())
            # every job has run and snapshotted its trainer once these are answered
            st_m, st_cont = c.stats("m"), c.stats("cont")
        for raw, code in ((junk, 3), (empty, 12)):
            rep = pb.Reply()
            rep.ParseFromString(raw)
            self.assertEqual(rep.status.code, code)
        sent[("unknown", "INVALID_ARGUMENT")] += 1
        sent[("unknown", "UNIMPLEMENTED")] += 1
        self.assertEqual((st_m["step"], st_m["replay_size"]), (15, 100))
        self.assertEqual((st_cont["step"], st_cont["replay_size"]), (13, 26))

        for _ in range(200):  # the last job's worker may still be finishing (queue_depth counts it)
            after, types = samples(scrape(self.d.metrics_url)[2])
            if all(value(after, "dqnd_trainer_queue_depth", trainer=t) == 0 for t in ("m", "cont")):
                break
            time.sleep(0.01)

        # requests: the delta is exactly what was sent, by command and code
        delta = collections.Counter()
        for (name, lab), v in after.items():
            if name == "dqnd_requests_total":
                d = v - before.get((name, lab), 0)
                if d:
                    delta[(dict(lab)["command"], dict(lab)["code"])] = d
        self.assertEqual(dict(delta), dict(sent))
        # the ones this test means to cause, spelled out
        for key, n in {("Step", "OK"): 3, ("Step", "NOT_FOUND"): 1, ("Step", "INVALID_ARGUMENT"): 1,
                       ("SubmitTransitions", "OK"): 5, ("CreateTrainer", "OK"): 3,
                       ("CreateTrainer", "ALREADY_EXISTS"): 1, ("Act", "OK"): 1, ("GetStats", "NOT_FOUND"): 1,
                       ("Health", "OK"): 1, ("ListTrainers", "OK"): 1}.items():
            self.assertEqual(delta[key], n, key)

        self.assertEqual(after[("dqnd_transitions_submitted_total", frozenset())]
                         - before[("dqnd_transitions_submitted_total", frozenset())], 30 + 25 + 45 + 20 + 6)
        steps = (after[("dqnd_training_steps_total", frozenset())]
                 - before[("dqnd_training_steps_total", frozenset())])
        self.assertEqual(steps, 15 + 13)

        # gauges
        self.assertEqual(after[("dqnd_trainers", frozenset())], 2)
        for t, step, size in (("m", 15, 100), ("cont", 13, 26)):
            self.assertEqual(value(after, "dqnd_trainer_step", trainer=t), step)
            self.assertEqual(value(after, "dqnd_trainer_replay_size", trainer=t), size)
            self.assertEqual(value(after, "dqnd_trainer_queue_depth", trainer=t), 0)
            self.assertGreater(value(after, "dqnd_trainer_memory_bytes", trainer=t), 0)
        self.assertEqual(types["dqnd_heap_bytes"], "gauge")
        with dqnd.Client(self.d.url, timeout=30) as c:
            dev = c.server_info()["device"]
            if dev == "none":  # no CUDA device: no GPU memory to report
                self.assertNotIn("dqnd_gpu_memory_used_bytes", types)
        # the device, as ServerInfo names it (no --device: no GPU index)
        self.assertEqual(after[("dqnd_device_info", frozenset({("device", ""), ("name", dev)}))], 1)

        # histograms: a request's duration is observed once per reply, a
        # step's once per optimiser step
        self.assertEqual(types["dqnd_request_duration_seconds"], "histogram")
        self.assertEqual(types["dqnd_step_duration_seconds"], "histogram")
        req_counts = self.check_histogram(after, "dqnd_request_duration_seconds")
        per_cmd = collections.Counter()
        for (name, lab), v in after.items():
            if name == "dqnd_requests_total":
                per_cmd[dict(lab)["command"]] += v
        self.assertEqual({dict(k)["command"]: v for k, v in req_counts.items()}, dict(per_cmd))
        step_counts = self.check_histogram(after, "dqnd_step_duration_seconds")
        self.assertEqual(step_counts, {frozenset(): after[("dqnd_training_steps_total", frozenset())]})
        self.assertEqual(self.check_histogram(before, "dqnd_step_duration_seconds"),
                         {frozenset(): before[("dqnd_training_steps_total", frozenset())]})
        self.assertEqual(types["dqnd_requests"], "counter")  # the parser drops _total from counters' names

    def test_trainer_states(self):
        """dqnd_trainer_members, _diverged_members and _error: a population
        of 3 whose member 1 diverges (lr 10, weight decay 10) shows 3 and 1,
        a lone trainer that diverges 1 and 1, neither in a device error; a
        copy of member 0 into member 1 brings the count back to 0"""
        with dqnd.Client(self.d.url, timeout=30) as c:
            c.create_trainer("pd", SMALL, population=3)
            c.create_trainer("ld", SMALL)
            for i in range(3):
                c.submit("pd", **batch(40, i), member=i)
            c.submit("ld", **batch(40, 7))
            c.set_hyperparams("pd", member=1, lr=10, weight_decay=10)
            c.set_hyperparams("ld", lr=10, weight_decay=10)
            self.assertEqual(c.step("pd", 40)["diverged"], [1])
            with self.assertRaises(dqnd.DqndError) as cm:
                c.step("ld", 40)
            self.assertEqual(cm.exception.code, 9, str(cm.exception))
            c.stats("pd"), c.stats("ld")  # answered after the steps' snapshots
            sm, types = samples(scrape(self.d.metrics_url)[2])
            for name in ("dqnd_trainer_members", "dqnd_trainer_diverged_members", "dqnd_trainer_error"):
                self.assertEqual(types[name], "gauge")
            self.assertEqual([value(sm, "dqnd_trainer_members", trainer=t) for t in ("pd", "ld")], [3, 1])
            self.assertEqual([value(sm, "dqnd_trainer_diverged_members", trainer=t) for t in ("pd", "ld")], [1, 1])
            self.assertEqual([value(sm, "dqnd_trainer_error", trainer=t) for t in ("pd", "ld")], [0, 0])
            c.copy_member("pd", 1, 0)
            c.stats("pd")
            sm, _ = samples(scrape(self.d.metrics_url)[2])
            self.assertEqual(value(sm, "dqnd_trainer_diverged_members", trainer="pd"), 0)
            c.destroy_trainer("pd")
            c.destroy_trainer("ld")

    def test_device_refused_at_start(self):
        """--device names a GPU that is not there: the start stops, naming it;
        out of range: a usage error; beyond CUDA_VISIBLE_DEVICES: named"""
        base = [DQND_BIN, "--listen", "ipc://" + self.d.dir + "/dev.sock", "--state-dir", self.d.dir + "/dev"]
        p = subprocess.run(base + ["--device", "1023"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("dqnd: device: 1023: no usable CUDA device there (", p.stderr)
        p = subprocess.run(base + ["--device", "-2"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("device", p.stderr)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
        p = subprocess.run(base + ["--device", "3"], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("dqnd: device: 3: CUDA_VISIBLE_DEVICES (0) names fewer devices", p.stderr)

    def test_other_paths_404(self):
        for path in ("/", "/other", "/metrics/x", "/metricsx", "/metrics/x/y"):
            with self.assertRaises(urllib.error.HTTPError, msg=path) as cm:
                scrape(self.d.base + path)
            self.assertEqual(cm.exception.code, 404, path)
        self.assertEqual(scrape(self.d.base + "/metrics?x=1")[0], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
