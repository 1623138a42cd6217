"""optuna_search.py's population mode (--population N, --pbt R): N trials
trained as the members of one population trainer (CreateTrainer population=N,
docs/population.md), in the same launches on a CUDA daemon.

The first trial of a population draws every searched field; the others are
asked with its shape fields fixed (batch, prioritized, the DT's; with --env
bitflip also attention, ensemble_k and noisy: members differ only in seed
and hyperparameters) and draw their own hyperparameters (lr, gamma,
target_period; with bitflip also her_ratio, her_strategy and n_step), set on
their member. Each member has its own environments,
data and evaluation; one Step advances all of them. Each trial is reported,
pruned or finished on its own, and its member (slot) then takes the study's
next trial (refill) where the sampler, asked free, draws it with the
population's shape fields (a draw of other shapes is held for the next
population, and this one takes no more: the search keeps choosing its
shapes as it would population by population): the member is started over from its state as
created (parameters, Adam moments and counters, an empty replay; fetched
for every slot when the population starts, loaded with LoadCheckpoint
member_only, its seed kept), given the new trial's hyperparameters, and fed
until it holds a batch; the new trial counts its rounds from there (user
attribute "start_round"). The population ends when no slot holds a running
trial and the study wants no more; a slot left without one is no longer
collected for nor evaluated (it stays in the trainer, which steps it with
the data it has). A population whose trials have a Decision Transformer
(--dt, dt_layers drawn above 0) is not refilled: PretrainDT trains every
member's DT at once. A Step that finds every member diverged FAILs the
live trials and refills their slots. With --pbt R, every R of their own rounds the live members of one
age (started at the same round) are ranked by that round's evaluation and the worst quarter (at least one) each become a copy of one of
the best quarter (CopyMember: network, Adam moments, counters; no weights
over the wire) with lr times 0.8 or 1.25 (exploit and explore); the copy is
recorded in the trial's user attribute "pbt", each entry with the
hyperparameters the member trains with from then on (the source's, lr
scaled: CopyMember's answer), and the last of them in "effective". A trial's
params stay its first draw (Optuna's sampler learns from those); the report
marks the exploited trials and shows their effective hyperparameters, which
produced their value. A population resumes as a single trial does: every
--eval-every rounds it saves a pinned population checkpoint (every member, with its
replay) and keeps this side's state then; a daemon that goes away and comes
back within --daemon-retry (systemd restarts it) gets that checkpoint loaded
and the rounds go on from there, the trials told meanwhile staying told; a
trial that had refilled a slot after that point starts again from scratch
in the next free slot.
"""
import copy
import itertools
import os
import shutil
import tempfile
import warnings

import numpy as np
import optuna

# PartialFixedSampler is marked experimental (ExperimentalWarning): its
# behaviour is what ask_population relies on, as documented
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning, module=__name__)

SHAPE = ("batch", "prioritized", "dt_layers", "dt_pretrain_steps", "dt_handover",  # drawn once per population
         "attention", "ensemble_k", "noisy")  # (the last three: --env bitflip's)
HPARAMS = ("lr", "gamma", "target_period", "her_ratio", "her_strategy", "n_step")  # each member's own
PBT_FACTORS = (0.8, 1.25)
FAILED_PRECONDITION = 9


def ask_population(search, sample_config):
    """Up to --population trials (fewer when fewer are left), asked under
    search.lock and counted as running; [] when the study is done.

    The members after the first are asked through a PartialFixedSampler that
    holds the first's shape fields: this process's sampler, so drivers that
    share a study cannot take each other's members (Optuna's queue of
    enqueued trials is the storage's, shared by every driver). A trial
    enqueued with other shape fields (study.enqueue_trial) that an ask pops
    anyway is held, counted as running, and starts a later population."""
    a, study = search.a, search.study
    with search.lock:
        left = a.trials - search.finished() - search.running  # new trials this driver may ask
        if search.held:
            first, cfg = search.held.pop(0)
        elif left >= 1:
            first = study.ask()
            cfg = sample_config(first)
            search.running += 1
        else:
            return []
        out = [(first, cfg)]
        fixed = shape(first)
        while len(out) < a.population:
            m = _ask_shaped(search, sample_config, fixed, first.number)
            if m is None:
                break
            out.append(m)
    return out


def shape(trial):
    return {k: trial.params[k] for k in SHAPE if k in trial.params}


def _ask_shaped(search, sample_config, fixed, first):
    """(under search.lock) One more trial with the shape fields `fixed`: a
    held one of that shape, else one asked through a PartialFixedSampler
    that holds them, counted as running; None when the study is done. A
    trial popped from the queue with other shapes is held (ask_population)."""
    a, study = search.a, search.study
    m = _held_of(search, fixed)
    if m is not None:
        return m
    base = study.sampler
    study.sampler = optuna.samplers.PartialFixedSampler(fixed, base)
    try:
        while a.trials - search.finished() - search.running >= 1:
            m = _ask_one(search, sample_config, fixed,
                         f"came queued with other shape fields than trial {first}'s: held for a population of its own")
            if m is not None:
                return m
    finally:
        study.sampler = base
    return None


def _held_of(search, fixed):
    """(under search.lock) a held trial with the shape fields `fixed`, taken, or None"""
    for k, (t, _) in enumerate(search.held):
        if shape(t) == fixed:
            return search.held.pop(k)
    return None


def _ask_one(search, sample_config, fixed, why):
    """(under search.lock) The study's next trial, counted as running:
    (trial, config) where its shape fields are `fixed`, else held (logged:
    'trial N <why>') and None."""
    t = search.study.ask()
    c = sample_config(t)
    search.running += 1
    if shape(t) == fixed:
        return t, c
    search.held.append((t, c))
    search.log(f"trial {t.number} {why}")
    return None


def fail_held(search, TrialState):
    """The held trials (ask_population) that no population took: FAIL, so
    none stays RUNNING in the study after the driver ends."""
    with search.lock:
        while search.held:
            t, _ = search.held.pop()
            search.study.tell(t, state=TrialState.FAIL)
            search.running -= 1


def population_trials(search, link, sample_config, Collector, evaluate, TrialState, dqnd, Interrupted, UNREACHABLE,
                      refill=True):
    """The worker of one daemon in population mode: populations until the
    study holds --trials (refill False: --no-refill, a slot whose trial
    ended stays idle)."""
    while not search.stop.is_set() and link.url not in search.lost:
        members = ask_population(search, sample_config)
        if not members:
            return
        name = f"{search.trainer_prefix}-pop{members[0][0].number}"
        link.name = name  # (search.cancel_running)
        for i, (t, cfg) in enumerate(members):
            _started(search, link.url, name, i, t, 0)
        done, err = {}, None
        try:
            run_population(search, link, name, members, done, Collector, evaluate, TrialState, dqnd, Interrupted,
                           UNREACHABLE, sample_config if refill else None)
        except dqnd.DqndError as e:
            err = e
        except Interrupted:
            err = "interrupted"
        except Exception as e:  # noqa: BLE001 (a failed population must not end the search)
            err = repr(e)
        gone = isinstance(err, dqnd.DqndError) and err.code in UNREACHABLE
        if not gone:  # as a single trial's: once more after the daemon came back (a stale client's notice)
            try:
                search.resilient(link, lambda c: c.destroy_trainer(name))
            except dqnd.DqndError as e:
                if e.code in UNREACHABLE:
                    gone, err = True, e
            except Interrupted:
                pass
        for t, _ in members:
            if t.number not in done:  # the ones still running when it failed
                _tell(search, t, done, TrialState.FAIL, None)
        link.name = None
        nums = sorted(t.number for t, _ in members)
        search.log(f"population {name} ({len(nums)} trials, {nums[0]}..{nums[-1]}) ended"
                   + (f": {err}" if err else ""))
        if gone:
            return search.drop(link.url, err)


def _started(search, url, name, i, t, rnd):
    """Trial t's start in member i (slot i) of population `name` at round
    rnd (0: the population's start; later: a refilled slot)."""
    with search.lock:
        t.set_user_attr("daemon", url)
        t.set_user_attr("trainer", name)
        t.set_user_attr("member", i)
        t.set_user_attr("start_round", rnd)
    params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items())
    search.log(f"trial {t.number} started on {url} as {name} member {i}"
               + (f" (refilled at round {rnd})" if rnd else "") + f": {params}")


def _tell(search, trial, done, state, value):
    """The trial's end, told once; it stops counting as running now (a
    pruned member's trial is finished while its population runs on)."""
    with search.lock:
        if state.name == "COMPLETE":
            search.study.tell(trial, value)
        else:
            search.study.tell(trial, state=state)
        search.running -= 1
    done[trial.number] = (state, value)


MAX_RESUMES = 3  # a population resumed this often from the same point without getting past it FAILs


def run_population(search, link, name, members, done, Collector, evaluate, TrialState, dqnd, Interrupted,
                   UNREACHABLE, sample_config=None):
    """The population's rounds; when its daemon goes away meanwhile and comes
    back within --daemon-retry (systemd restarts it; it restores its
    trainers), again from its resume point: the population checkpoint saved
    at the last evaluation and this side's state then (which trial each
    slot holds and since when, each slot's collector and random generator,
    which are live, their last values and replay sizes), or the start before
    the first. A member's trial told meanwhile (pruned, failed, finished)
    stays told; one that had started in a slot after the resume point starts
    again from scratch in the next free slot. members grows by the trials
    that refill slots (sample_config: how to draw them; None: no refills)."""
    run = {"snap": None, "resumes_at": {}, "reported": set(), "url": link.url, "sample_config": sample_config,
           "files": {}, "dir": tempfile.mkdtemp(prefix="dqnd-pop-")}
    try:
        while True:
            try:
                return pop_rounds(search, link.client, name, members, done, run, Collector, evaluate, TrialState,
                                  dqnd, Interrupted)
            except dqnd.DqndError as e:
                if e.code not in UNREACHABLE:
                    raise
                at = run["snap"]["round"] if run["snap"] else 0
                run["resumes_at"][at] = run["resumes_at"].get(at, 0) + 1
                if run["resumes_at"][at] > MAX_RESUMES:  # its trials FAIL; the daemon, up again, stays in the search
                    raise RuntimeError(f"resumed {MAX_RESUMES} times from round {at} without getting past it; "
                                       f"the last time: {e}") from e
                search.log(f"population {name}: daemon {link.url} lost ({e})")
                search.reconnect(link, e)  # its error when the daemon does not come back: the live trials FAIL
                with search.lock:
                    for t, _ in members:
                        if t.number not in done:
                            t.set_user_attr("resumes", sum(run["resumes_at"].values()))
                search.log(f"population {name} resumes on {link.url} from round {at}"
                           + (f" (learner step {run['snap']['step']})" if run["snap"] else " (the start)"))
    finally:
        shutil.rmtree(run["dir"], ignore_errors=True)


def pop_start(search, client, name, members, TrialState, dqnd, run):
    """The population's trainer, new (a leftover of this very population,
    from a daemon restarted before its first resume point, replaced), its
    members' hyperparameters set, each member's fresh state kept for
    refilled slots (saved before any data and fetched: run["files"]) and,
    with --dt, their DTs pre-trained."""
    a, n = search.a, len(members)
    cfg0 = dict(members[0][1])
    cfg0["seed"] = a.seed * 1000 + members[0][0].number  # member i: this + i
    if a.samples_per_insert > 0:
        cfg0["samples_per_insert"], cfg0["min_replay"] = a.samples_per_insert, cfg0["batch"]
    try:
        created = client.create_trainer(name, cfg0, a.backend, population=n)["created"]
    except dqnd.DqndError as e:
        if e.code != 6:  # ALREADY_EXISTS: there with another config
            raise
        created = False
    if not created:
        client.destroy_trainer(name)
        client.create_trainer(name, cfg0, a.backend, population=n)
    for i, (t, cfg) in enumerate(members[1:], 1):
        client.set_hyperparams(name, member=i, **{k: cfg[k] for k in HPARAMS})
    # each slot's state before its first transition (an empty replay), kept
    # on this side (the daemon prunes the checkpoint with later saves): what a
    # trial refilling the slot starts from. Not with a DT (dt_layers > 0): PretrainDT trains
    # every member's DT at once, so a slot's new trial could not pre-train alone
    run["files"] = {}
    if run["sample_config"] is not None and not int(cfg0.get("dt_layers", 0)):
        ck = client.save_checkpoint(name, with_replay=True)["checkpoint"]
        for i in range(n):
            path = os.path.join(run["dir"], f"fresh-member{i}")
            client.fetch_checkpoint(name, path, checkpoint=ck, member=i)
            run["files"][i] = path
    if int(cfg0.get("dt_layers", 0)):  # --dt: each member's own random episodes, then one PretrainDT for all
        for i, (t, _) in enumerate(members):
            search.dt_warmup(client, name, t, cfg0, a.seed * 1000 + t.number, member=i, pretrain=False)
        st = search.pretrain_dt(client, name, members[0][0].params["dt_pretrain_steps"])
        for i, (t, _) in enumerate(members):
            with search.lock:
                t.set_user_attr("dt_loss", st["members"][i]["loss_mean"] if n > 1 else st["loss_mean"])
        search.log(f"population {name}: every member pre-trained its DT ({st['dt_step']} steps)")
    return cfg0


def pop_restore(search, client, name, snap, dqnd):
    """The trainer as it was at the resume point: its checkpoint loaded (the
    daemon restored its newest on restart, but the trainer may have gone on,
    or not come back). False when it cannot be loaded: the population then
    starts over."""
    try:
        client.trainer_info(name)
        exists = True
    except dqnd.DqndError as e:
        if e.code != 5:  # NOT_FOUND
            raise
        exists = False
    try:
        client.load_checkpoint(name, path=snap["path"], create=not exists, backend=search.a.backend)
        return True
    except dqnd.DqndError as e:
        if e.code in (4, 14):  # the daemon went again
            raise
        search.log(f"population {name}: cannot load its checkpoint {snap['path']} ({e}); starting over")
        return False


def pop_rounds(search, client, name, members, done, run, Collector, evaluate, TrialState, dqnd, Interrupted):
    a = search.a
    n = run.setdefault("n", len(members))  # the slots (members grows by the trials that refill them)
    if run["snap"] is not None and not pop_restore(search, client, name, run["snap"], dqnd):
        run["snap"] = None
    if run["snap"] is None:
        cfg0 = pop_start(search, client, name, members[:n], TrialState, dqnd, run)
        st = {
            # slot i holds trial members[slot[i]] since round start[i]: its
            # rounds are counted from there (refill)
            "slot": list(range(n)), "start": [0] * n,
            "collectors": [Collector(a.seed * 1000 + t.number, a.envs) for t, _ in members[:n]],
            "rngs": [np.random.default_rng([a.seed, t.number]) for t, _ in members[:n]],
            "pbt_rng": np.random.default_rng([a.seed, members[0][0].number, 7]),
            # (starting over after a loss: a trial told meanwhile, pruned or
            # failed, stays told, as on a resume)
            "live": [i for i in range(n) if members[i][0].number not in done], "last": {},
            # each slot's replay size, diverged ones dropped: a Step needs every
            # member it steps to hold a batch (pruned ones too: they stay in the
            # trainer), so a pruned member that holds less is still fed until it
            # does (bitflip's short episodes; a meanrev round always fills a batch)
            "sizes": dict.fromkeys(range(n), 0),
            "batch": int(cfg0["batch"]), "round": 0}
    else:  # copies: a second resume from the same point starts from it again
        st = copy.deepcopy(run["snap"]["state"])
        st["live"] = [i for i in st["live"] if members[st["slot"][i]][0].number not in done]  # told since: stays told
    pbt_forget(search, members, done, st["round"])
    slot, start, collectors, rngs = st["slot"], st["start"], st["collectors"], st["rngs"]
    live, last, sizes, batch = st["live"], st["last"], st["sizes"], st["batch"]
    trial = lambda i: members[slot[i]][0]  # noqa: E731 (slot i's trial)
    eval_envs = search.eval_envs()
    refill(search, client, name, members, done, st, run, st["round"], Collector)  # slots freed before a loss
    if not live:  # every trial of the resume point told since, and none to take their places
        return
    for rnd in itertools.count(st["round"] + 1):
        if search.stop.is_set():
            raise Interrupted()

        def diverged(i):  # it stops alone, its trial FAILs
            sizes.pop(i, None)
            if i in live:
                live.remove(i)
                _tell(search, trial(i), done, TrialState.FAIL, None)
                search.log(f"trial {trial(i).number} (member {i}) diverged -> FAIL")

        for i in list(sizes):
            if i in live or sizes[i] < batch:
                local = rnd - start[i]  # the slot's trial's own round
                eps = a.eps_start + (a.eps_end - a.eps_start) * (min(local, a.rounds) - 1) / max(1, a.rounds - 1)
                # a refilled slot is fed until it holds a batch (each round adds at least one
                # transition), so the others' Step need not wait for it
                for _ in range(batch if start[i] else 1):
                    try:
                        sizes[i] = client.submit(
                            name, *collectors[i].round(client, name, a.collect, eps, rngs[i], member=i), member=i)
                    except dqnd.DqndError as e:  # with --samples-per-insert no Step reports it: its next Submit does
                        if e.code != FAILED_PRECONDITION or f"member {i} of trainer" not in e.message:
                            raise
                        diverged(i)
                        break
                    if sizes[i] >= batch:
                        break
        if a.samples_per_insert == 0 and sizes and min(sizes.values()) >= batch:
            try:
                r = client.step(name, a.train_steps)
            except dqnd.DqndError as e:  # every member diverged: the trainer stopped training (a refill resumes it)
                if e.code != FAILED_PRECONDITION or "diverged" not in e.message:
                    raise
                r = {"stopped": False, "diverged": list(sizes)}
            for i in r.get("diverged", []):
                diverged(i)
            if r["stopped"]:  # members stepped unevenly (in order on the CPU): rounds would not compare
                if r["stop_reason"] == "shutdown":
                    raise dqnd.DqndError(14, f"Step of {name} stopped: the daemon is shutting down")
                raise RuntimeError(f"Step of {name} stopped ({r['stop_reason']}): member steps "
                                   f"{[m['steps_run'] for m in r.get('members', [r])]} of {a.train_steps}")
        due = [i for i in live if (rnd - start[i]) % a.eval_every == 0 or rnd - start[i] == a.rounds]
        if due and a.samples_per_insert > 0:  # before it is evaluated or copied: a member its submits' training diverged
            for i in list(due):
                if "diverged" in client.trainer_info(name, member=i)["state"]:
                    diverged(i)
                    due.remove(i)
        for i in due:
            t, local = trial(i), rnd - start[i]
            value = evaluate(client, name, eval_envs, member=i)
            last[i] = value
            with search.lock:
                if (t.number, local) not in run["reported"]:  # reported before its daemon went away: not again
                    t.report(value, local)
                    run["reported"].add((t.number, local))
                prune = local < a.rounds and t.should_prune()
            search.log(f"trial {t.number} round {local}/{a.rounds}: value {value:.4f} (member {i})"
                       f"{' -> pruned' if prune else ''}")
            if prune or local == a.rounds:
                live.remove(i)
                _tell(search, t, done, TrialState.PRUNED if prune else TrialState.COMPLETE, value)
        if a.pbt:  # every --pbt of their own rounds, the live members of one age rank among themselves
            ages = {}
            for i in due:
                if i in live and (rnd - start[i]) % a.pbt == 0:
                    ages.setdefault(rnd - start[i], []).append(i)
            for age in sorted(ages):
                if len(ages[age]) >= 2:
                    exploit(search, client, name, [members[k] for k in slot], ages[age], last, rnd, st["pbt_rng"])
        refill(search, client, name, members, done, st, run, rnd, Collector)
        if not live:  # every slot's trial told, and none left to take its place
            return
        if rnd % a.eval_every == 0:  # the resume point: the population's checkpoint, this side's state
            ck = client.save_checkpoint(name, with_replay=True, pin=True)  # not pruned by later saves
            st["round"] = rnd
            run["snap"] = {"round": rnd, "path": ck["path"], "step": ck["step"], "state": copy.deepcopy(st)}
            search.log(f"population {name}: resume point at round {rnd} (learner step {ck['step']})")


def refill(search, client, name, members, done, st, run, rnd, Collector):
    """Each free slot (its trial pruned, finished or failed) takes a trial
    that has not run to its end: one that started in a slot after the resume
    point restored (it starts again), else the study's next trial where the
    sampler, free, draws the population's shape fields (_ask_refill). Where
    every slot is free and the sampler draws other shapes, the population
    ends instead: the trials drawn before that one are held for the next
    populations with it (refilled, a slot or two would run a whole trial
    beside idle ones). The member is started over from its fresh state
    (pop_start's checkpoint: parameters, Adam moments and counters as
    created, an empty replay; its own seed) with the trial's
    hyperparameters, and the trial's rounds count from rnd."""
    if not run["files"] or search.stop.is_set():
        return
    a, slot, live = search.a, st["slot"], st["live"]
    free = [i for i in range(len(slot)) if i not in live]
    busy = {slot[j] for j in live}
    ks = [k for k, (t, _) in enumerate(members) if t.number not in done and k not in busy][:len(free)]
    new = []
    with search.lock:
        while len(ks) + len(new) < len(free) and not run.get("closed"):
            held = len(search.held)
            try:
                m = _ask_refill(search, run["sample_config"], shape(members[0][0]), name)
            except BaseException:  # (a storage error): the draws made stay the search's, held
                search.held.extend(new)
                raise
            if m is not None:
                new.append(m)
                continue
            run["closed"] = True  # no more (the study's wants only shrink), or a draw of other shapes held
            if not live and not ks and new and len(search.held) > held:
                search.held[-1:-1] = new  # before the draw of other shapes, which they came before
                search.log(f"population {name}: every slot free; trials {', '.join(str(t.number) for t, _ in new)} "
                           "held for the next populations")
                return
    for t, c in new:
        members.append((t, c))
        ks.append(len(members) - 1)
    for i, k in zip(free, ks):
        t, cfg = members[k]
        client.load_checkpoint(name, file=run["files"][i], member=i)
        client.set_hyperparams(name, member=i, **{h: cfg[h] for h in HPARAMS})
        slot[i], st["start"][i], st["sizes"][i] = k, rnd, 0
        st["collectors"][i] = Collector(a.seed * 1000 + t.number, a.envs)
        st["rngs"][i] = np.random.default_rng([a.seed, t.number])
        st["last"].pop(i, None)
        live.append(i)
        live.sort()
        _started(search, run["url"], name, i, t, rnd)


def _ask_refill(search, sample_config, fixed, name):
    """(under search.lock) A trial for a refilled slot: a held one of the
    population's shape fields `fixed`, else the study's next, asked with
    the sampler free (counted as running). Its shape fields are the
    sampler's to choose, as a new population's first trial's are: a search
    keeps exploring them. A draw of other shapes is held for a population of
    its own, and None says this population takes no more trials; None also
    when the study wants no more."""
    m = _held_of(search, fixed)
    if m is not None or search.a.trials - search.finished() - search.running < 1:
        return m
    return _ask_one(search, sample_config, fixed, f"draws other shape fields than population {name}'s: held for a "
                    f"population of its own; {name} takes no more trials")


def pbt_forget(search, members, done, rnd):
    """A resume (or a start over) from round rnd: the exploits recorded after
    it never happened to the state restored (the rounds are replayed and may
    rank the members otherwise), so the trials not yet told forget them."""
    with search.lock:
        for t, _ in members:
            hist = t.user_attrs.get("pbt")
            if t.number in done or not hist or all(h["round"] <= rnd for h in hist):
                continue
            hist = [h for h in hist if h["round"] <= rnd]
            t.set_user_attr("pbt", hist)
            t.set_user_attr("effective", hist[-1]["hparams"] if hist else None)


def exploit(search, client, name, members, live, last, rnd, rng):
    """The worst quarter of the live members (at least one) each copy one of
    the best quarter, lr times 0.8 or 1.25."""
    order = sorted(live, key=lambda i: last[i])
    q = max(1, len(order) // 4)
    worst, best = order[:q], order[-q:]
    for dst in worst:
        src = int(rng.choice(best))
        f = float(rng.choice(PBT_FACTORS))
        info = client.copy_member(name, dst, src, lr=f)
        t = members[dst][0]
        # what dst trains with now: src's hyperparameters, lr scaled (the
        # daemon's answer, in the types of the trial's own params)
        eff = {k: type(v)(info["config"][k]) if not isinstance(v, bool) else info["config"][k] in ("1", "true")
               for k, v in t.params.items() if k in HPARAMS and k in info["config"]}
        with search.lock:
            hist = [h for h in t.user_attrs.get("pbt", []) if h["round"] != rnd]  # (redone after a resume)
            hist.append({"round": rnd, "from_member": src, "from_trial": members[src][0].number, "lr_factor": f,
                         "hparams": eff})
            t.set_user_attr("pbt", hist)
            t.set_user_attr("effective", eff)
        search.log(f"trial {t.number} (member {dst}, value {last[dst]:.4f}) exploits member {src} "
                   f"(trial {members[src][0].number}, value {last[src]:.4f}), lr x {f:g}")
