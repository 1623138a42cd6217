/*
 * config_rows.h — the learner's config fields, one list per module, each row
 * (name, type, where it lives, bounds, whether it may change between steps,
 * default, meaning). config.c expands the lists, in this order, into the one
 * table that feeds validation, defaults, `dqnctl fields`, the canonical text
 * and its hash, and SetHyperparams. A module adds its fields by adding a list
 * here and naming it in config.c's table: nothing else learns the field.
 *
 * R(name, type, field, min, max, changeable, default, help); CF/HF give the
 * offset of a field of learner_config_t / of its hyperparameters.
 */
#ifndef DQN_CONFIG_ROWS_H
#define DQN_CONFIG_ROWS_H

/* the network: trunk -> dueling C51 heads per branch (cpu/linear_impl.h, cpu/heads_impl.h; docs/learner.md §2-3) */
#define NETWORK_ROWS(R)                                                                                          \
  R("state_dim", LCF_INT32, CF(state_dim), 1, 65536, 0, "64", "length of a state vector")                        \
  R("trunk_h1", LCF_INT32, CF(trunk_h1), 1, 16384, 0, "256", "first trunk layer width")                          \
  R("trunk_h2", LCF_INT32, CF(trunk_h2), 1, 16384, 0, "256", "second trunk layer width (h)")                     \
  R("value_hidden", LCF_INT32, CF(value_hidden), 1, 16384, 0, "128", "value head hidden width")                  \
  R("adv_hidden", LCF_INT32, CF(adv_hidden), 1, 16384, 0, "128", "advantage (branch) hidden width")              \
  R("atoms", LCF_INT32, CF(atoms), 2, LEARNER_MAX_ATOMS, 0, "51", "C51 atoms")                                  \
  R("v_min", LCF_FLOAT, CF(v_min), -1e6, 1e6, 0, "-10", "lowest atom value")                                     \
  R("v_max", LCF_FLOAT, CF(v_max), -1e6, 1e6, 0, "10", "highest atom value")                                     \
  R("branches", LCF_BRANCHES, CF(branch_sizes), 1, 65536, 0, "9,3,3", "action branch sizes, e.g. 9,3,3")         \
  R("leaky_slope", LCF_FLOAT, CF(leaky_slope), 0, 1, 0, "0.01", "LeakyReLU negative slope")                     \
  R("noisy", LCF_BOOL, CF(noisy), 0, 1, 0, "0", "NoisyNet (factorised Gaussian) head layers")                    \
  R("noisy_sigma0", LCF_FLOAT, CF(noisy_sigma0), 0, 10, 0, "0.5", "NoisyNet initial sigma0")

/* attention over the trunk output h (cpu/attn_impl.h, docs/learner.md §7): T tokens of
 * width trunk_h2 / T, n_h heads; fixed at creation (the parameter vector's shape) */
#define ATTN_ROWS(R)                                                                                             \
  R("attn_tokens", LCF_INT32, CF(attn_tokens), 0, 16384, 0, "0",                                                 \
    "attention tokens over h (0 = off, else >= 2 dividing trunk_h2)")                                            \
  R("attn_heads", LCF_INT32, CF(attn_heads), 0, 16384, 0, "1",                                                   \
    "attention heads (>= 1 when attn_tokens > 0, dividing trunk_h2 / attn_tokens)")

/* ensemble heads (cpu/loss_impl.h, docs/learner.md §8): K head sets on the shared trunk, bootstrap
 * masks, a diversity bonus, fixed random priors. K, p and beta_p are fixed at creation (K and the
 * priors shape the parameter vectors; p defines each head's bootstrap data set); lambda may change. */
#define ENSEMBLE_ROWS(R)                                                                                         \
  R("ensemble_k", LCF_INT32, CF(ensemble_k), 1, LEARNER_MAX_ENSEMBLE, 0, "1",                                    \
    "ensemble head sets K (1 = the plain network)")                                                               \
  R("ensemble_diversity", LCF_FLOAT, HF(ensemble_diversity), 0, 1e6, 1, "0",                                     \
    "ensemble diversity weight lambda (loss - lambda * mean pairwise KL)")                                       \
  R("ensemble_mask_p", LCF_FLOAT, CF(ensemble_mask_p), 0, 1, 0, "1",                                             \
    "bootstrap mask probability p in (0, 1] (1 = every head sees every transition)")                            \
  R("ensemble_prior_scale", LCF_FLOAT, CF(ensemble_prior_scale), 0, 1e6, 0, "0",                                 \
    "scale beta_p of the fixed random prior heads (0 = none)")

/* Act over the ensemble (docs/learner.md §8): which action the K heads' Q values pick; may change */
#define ACT_ROWS(R)                                                                                              \
  R("act_select", LCF_INT32, HF(act_select), 0, 2, 1, "mean",                                                    \
    "Act over ensemble heads: mean (argmax of the mean), ucb (mean + ucb_c * std), thompson (one head per "     \
    "episode); 0/1/2 also accepted")                                                                             \
  R("ucb_c", LCF_FLOAT, HF(ucb_c), 0, 1e6, 1, "1", "act_select=ucb: weight of the std over heads")

/* HER and n-step returns (her.h, cpu/her_cpu.c, docs/learner.md §9): G fixed at creation (the state
 * layout); the rest may change between steps */
#define HER_ROWS(R)                                                                                              \
  R("her_goal_dim", LCF_INT32, CF(her_goal_dim), 0, 32768, 0, "0",                                               \
    "HER goal width G (0 = off); state = obs | achieved goal (G) | desired goal (G)")                           \
  R("her_ratio", LCF_FLOAT, HF(her_ratio), 0, 1, 1, "0.8", "HER: share of each batch relabelled")                \
  R("her_strategy", LCF_INT32, HF(her_strategy), 0, 3, 1, "future",                                              \
    "HER donor: future (same episode, this step or later), final, episode, random (any slot)")                  \
  R("her_eps", LCF_FLOAT, HF(her_eps), 0, 1e30, 1, "0", "HER: success when the goal distance <= her_eps")        \
  R("her_norm", LCF_INT32, HF(her_norm), 0, 1, 1, "inf", "HER: goal distance norm, inf or l2")                   \
  R("her_reward_scale", LCF_FLOAT, HF(her_reward_scale), -1e6, 1e6, 1, "1",                                      \
    "HER: a relabelled reward is (success ? 0 : -1) * her_reward_scale")                                        \
  R("her_done_on_success", LCF_BOOL, HF(her_done_on_success), 0, 1, 1, "0",                                      \
    "HER: a relabelled row is terminal when it succeeds (else done as stored)")                                \
  R("n_step", LCF_INT32, HF(n_step), 1, 1000, 1, "1", "n-step returns, truncated at the episode's end")

/* the loss (cpu/loss_impl.h; docs/learner.md §4): Double DQN target, C51 projection, discount */
#define LOSS_ROWS(R)                                                                                             \
  R("double_dqn", LCF_BOOL, CF(double_dqn), 0, 1, 0, "1", "Double DQN target action selection")                 \
  R("gamma", LCF_FLOAT, HF(gamma), 0, 1, 1, "0.99", "discount factor")

/* replay and prioritised sampling (cpu/replay.h) */
#define REPLAY_ROWS(R)                                                                                           \
  R("batch", LCF_INT32, CF(batch), 1, 65536, 0, "256", "training batch size")                                    \
  R("replay_capacity", LCF_INT64, CF(replay_capacity), 1, 1LL << 31, 0, "1000000", "replay ring capacity")      \
  R("prioritized", LCF_BOOL, CF(prioritized), 0, 1, 0, "1", "prioritised replay (else uniform)")                 \
  R("per_alpha", LCF_FLOAT, CF(per_alpha), 0, 10, 0, "0.5", "PER priority exponent alpha")                       \
  R("per_beta0", LCF_FLOAT, HF(per_beta0), 0, 1, 1, "0.4", "PER IS exponent at step 0")                          \
  R("per_beta_steps", LCF_INT64, HF(per_beta_steps), 0, 1e15, 1, "1000000", "steps to anneal beta to 1")         \
  R("per_eps", LCF_FLOAT, HF(per_eps), 1e-12, 1, 1, "1e-06", "PER priority epsilon")

/* the optimiser and the target network (cpu/optim.h) */
#define OPTIM_ROWS(R)                                                                                            \
  R("lr", LCF_FLOAT, HF(lr), 0, 10, 1, "0.0001", "AdamW learning rate")                                          \
  R("tau", LCF_FLOAT, HF(tau), 0, 1, 1, "0", "Polyak factor per step (0 = hard copies)")                         \
  R("target_period", LCF_INT32, HF(target_period), 0, 1e9, 1, "1000", "steps between hard target copies")       \
  R("weight_decay", LCF_FLOAT, HF(weight_decay), 0, 10, 1, "0", "AdamW decoupled weight decay")                  \
  R("grad_clip", LCF_FLOAT, HF(grad_clip), 0, 1e9, 1, "10", "global grad-norm clip (0 = off)")                   \
  R("adam_beta1", LCF_FLOAT, HF(adam_beta1), 0, 0.999999, 1, "0.9", "Adam beta1")                                \
  R("adam_beta2", LCF_FLOAT, HF(adam_beta2), 0, 0.99999994, 1, "0.999", "Adam beta2 (below 1 as a float)")       \
  R("adam_eps", LCF_FLOAT, HF(adam_eps), 1e-12, 1, 1, "1e-08", "Adam epsilon")

/* randomness and the backends' arithmetic (the CUDA step: cuda/step.cu) */
#define BACKEND_ROWS(R)                                                                                          \
  R("seed", LCF_UINT64, CF(seed), 0, 1.8446744073709552e19, 0, "1", "Philox key: init, sampling, noise")         \
  R("tensor_cores", LCF_BOOL, CF(tensor_cores), 0, 1, 0, "0",                                                    \
    "CUDA: TF32 operands on the tensor cores, fp32 accumulation, in the DQN's and the Decision Transformer's "  \
    "GEMMs (gradients within ~5e-2 of fp32; the CPU backend runs fp32)")                                         \
  R("cuda_graph", LCF_BOOL, CF(cuda_graph), 0, 1, 0, "1",                                                        \
    "CUDA: replay each step as one captured graph (0: plain stream launches, for debugging)")                   \
  R("cuda_gemm_occupancy", LCF_INT32, CF(cuda_gemm_occupancy), 1, 4, 0, "2",                                     \
    "CUDA: blocks per SM the split-K planner aims for; 1 suits four or more trainers per GPU")

/* the Decision Transformer (cpu/dt.h, docs/learner.md §16): pre-training on the replay's episodes
 * (PretrainDT), Act by return conditioning, and the hand-over to the DQN's first trunk layer. The
 * shapes, the batch and the return scale are fixed at creation; the optimiser's fields may change.
 * Rows of this list appear in the canonical config text only when they differ from their default
 * (DT_ROWS is expanded with config.c's ROWQ), so a state saved before they existed re-saves byte for
 * byte and keeps its hash. */
#define DT_ROWS(R)                                                                                               \
  R("dt_layers", LCF_INT32, CF(dt_layers), 0, 16, 0, "0", "Decision Transformer blocks (0 = off)")              \
  R("dt_context", LCF_INT32, CF(dt_context), 1, 1024, 0, "20", "DT: steps a window holds (K; 3K tokens)")        \
  R("dt_embed", LCF_INT32, CF(dt_embed), 1, 4096, 0, "128", "DT: embedding width E (dt_heads must divide it)")  \
  R("dt_heads", LCF_INT32, CF(dt_heads), 1, 1024, 0, "1", "DT: attention heads")                                 \
  R("dt_max_ep_len", LCF_INT32, CF(dt_max_ep_len), 1, 1000000, 0, "1000",                                       \
    "DT: timestep embeddings (timesteps clip to [0, dt_max_ep_len - 1])")                                        \
  R("dt_rtg_scale", LCF_FLOAT, CF(dt_rtg_scale), 1e-6, 1e9, 0, "1000", "DT: returns-to-go are divided by this")  \
  R("dt_batch", LCF_INT32, CF(dt_batch), 1, 65535, 0, "64", "DT: windows per pre-training step")                \
  R("dt_handover", LCF_INT32, CF(dt_handover), 0, 1, 0, "none",                                                  \
    "DT: none, or trunk1 (after PretrainDT, before the first DQN step, the DT's state embedding becomes the "  \
    "first trunk layer; needs dt_embed = trunk_h1)")                                                             \
  R("dt_lr", LCF_FLOAT, HF(dt_lr), 0, 10, 1, "0.0001", "DT: AdamW learning rate after the warm-up")              \
  R("dt_warmup", LCF_INT64, HF(dt_warmup), 0, 1e15, 1, "10000", "DT: pre-training steps of linear lr warm-up")  \
  R("dt_weight_decay", LCF_FLOAT, HF(dt_weight_decay), 0, 10, 1, "0.0001", "DT: AdamW decoupled weight decay")  \
  R("dt_clip", LCF_FLOAT, HF(dt_clip), 0, 1e9, 1, "0.25", "DT: global grad-norm clip (0 = off)")

/* read by the daemon, not the learner: continuous training */
#define DAEMON_ROWS(R)                                                                                           \
  R("samples_per_insert", LCF_FLOAT, HF(samples_per_insert), 0, 1e6, 1, "0",                                     \
    "daemon: train as data arrives, this many samples per inserted transition (0 = off)")                       \
  R("min_replay", LCF_INT64, HF(min_replay), 0, 1LL << 40, 1, "0",                                               \
    "daemon: transitions held before continuous training starts")

#endif
