#!/usr/bin/python3
"""The repository's layers run one way (docs/architecture.md, "Layers"):
proto <- kernels <- daemon, and proto <- client, with no import loop anywhere.

From the sources alone: every #include "x" of proto/, kernels/ (cpu/, cuda/),
daemon/ and client/ is resolved to a file of the repository (headers made at
build time, such as dqnd.pb-c.h, belong to proto/). A file and its header are
one module (trainer.c and trainer.h); the test fails when
  - the modules' include graph has a cycle (it names the loop),
  - a directory includes one above it: kernels/ includes nothing of daemon/
    or client/; proto/ nothing of the others; daemon/ nothing of client/;
  - client/ includes from kernels/ more than the vocabulary a client may use
    (learner_types.h and the small shared helpers below), except the two
    files that run a learner in the process (dqn-demo's).
Run by meson (suite unit); prints the layers it found.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["proto", "kernels", "daemon", "client"]
# where #include "x" is looked up after the including file's own directory
ROOTS = ["proto", "kernels", "kernels/cpu", "kernels/cuda", "daemon", "client"]
GENERATED = {"dqnd.pb-c.h": "proto", "dqnd_build_config.h": "kernels"}
CLIENT_MAY_USE = {"kernels/learner_types.h", "kernels/philox.h", "kernels/suggest.h"}
RUNS_A_LEARNER = {"client/demo_learner.c", "client/demo_main.c"}
RANK = {"proto": 0, "kernels": 1, "daemon": 2, "client": 1}
ALLOWED = {"proto": {"proto"}, "kernels": {"kernels"}, "daemon": {"daemon", "kernels", "proto"},
           "client": {"client", "proto", "kernels"}}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def top(path):
    return path.split("/")[0]


def module(path):
    return os.path.splitext(path)[0]


def sources():
    for d in DIRS:
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, d)):
            dirnames[:] = [n for n in dirnames if n not in ("dev", "python")]
            for f in files:
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    yield os.path.relpath(os.path.join(dirpath, f), ROOT)


def resolve(src, name):
    for base in [os.path.dirname(src)] + ROOTS:
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(ROOT, p)):
            return p
    return None


def main():
    graph, problems = {}, []
    for src in sorted(sources()):
        text = open(os.path.join(ROOT, src), encoding="utf-8").read()
        m = module(src)
        graph.setdefault(m, set())
        for name in INC.findall(text):
            dst = resolve(src, name)
            if dst is None:
                if os.path.basename(name) in GENERATED:
                    dst_dir = GENERATED[os.path.basename(name)]
                    if dst_dir not in ALLOWED[top(src)]:
                        problems.append(f"{src} includes {name} ({dst_dir}/, a layer above it)")
                else:
                    problems.append(f"{src} includes {name}, which is no file of the repository")
                continue
            if top(dst) not in ALLOWED[top(src)]:
                problems.append(f"{src} includes {dst}: {top(src)}/ may not include {top(dst)}/")
            if top(src) == "client" and top(dst) == "kernels" and dst not in CLIENT_MAY_USE \
                    and src not in RUNS_A_LEARNER:
                problems.append(f"{src} includes {dst}: a client includes the learner's vocabulary "
                                f"(learner_types.h), not its API")
            if module(dst) != m:
                graph[m].add(module(dst))
    # cycles: Tarjan's strongly connected components
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    for comp in sccs:
        problems.append("import loop: " + " <-> ".join(comp))
    # the layers: each module's depth above what it includes
    depth = {}

    def d(v, seen=()):
        if v in depth:
            return depth[v]
        if v in seen:
            return 0
        depth[v] = 1 + max([d(w, seen + (v,)) for w in graph.get(v, ())], default=-1)
        return depth[v]

    for v in graph:
        d(v)
    for t in DIRS:
        mods = sorted((depth[v], v) for v in graph if top(v) == t)
        layers = {}
        for k, v in mods:
            layers.setdefault(k, []).append(os.path.basename(v))
        print(f"{t}/: " + " | ".join(f"{k}: {' '.join(vs)}" for k, vs in sorted(layers.items())))
    if problems:
        print("\n".join("FAIL: " + p for p in problems))
        return 1
    print(f"{len(graph)} modules, no import loop, every include goes down a layer or stays in its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
