"""The largest value each count, size and range may take, with the reason for each (docs/cli.md#limits).

They are checked where a value is parsed or a config is built, before anything is allocated, so a typo
such as `--steps 1e12` is refused at once instead of hanging or failing deep inside an allocator. What a
value within them needs in memory is then estimated against the machine (`headway.execution.memory`).
"""

from __future__ import annotations

# Seeds: 32 bits, as numpy's legacy generator and most tools take them; a larger one means nothing more.
MAX_SEED = 2**32 - 1
# Values one option's list or A..B range may hold: each is parsed, checked and stored one by one.
MAX_LIST = 10_000
# Runs one command may train or plan: each is built, checked and hashed before training (3 s at the limit).
MAX_RUNS = 10_000
# Model shape: 32x the deepest scale (8 layers), far beyond any width a study uses (128).
MAX_LAYERS = 256
MAX_HEADS = 4096
MAX_WIDTH = 65_536  # d_model and d_head
MAX_MLP = 4 * MAX_WIDTH  # d_mlp
# Positions per example: attention scores grow as positions² (16 GiB of float32 for one head of one
# example at this length).
MAX_CONTEXT = 65_536
# Symbols (retrieval vocab, sorting values): rows of the embedding and readout, 2^20 is 20x GPT-2's vocabulary.
MAX_SYMBOLS = 2**20
# Modular addition materialises all p² pairs: 16.8 M at this modulus.
MAX_MODULUS = 4096
# Training: a week of steps at the H100's measured latency floor of a one-layer step (6.3 ms).
MAX_STEPS = 10**8
MAX_BATCH = 2**24  # examples per step
MAX_POOL = 2**28  # examples in a training pool or validation set (train_size, val_size)
# Checkpoints kept per ensemble (steps / checkpoint_every + log_checkpoints): each is a file of every weight.
MAX_CHECKPOINTS = 10_000
# Evaluations logged per run (steps / eval_every): every row is held in memory and rewritten at each save.
MAX_EVALUATIONS = 100_000
# `headway data TASK --count`: examples drawn in memory, then written as JSON lines (~30 GB at the limit).
MAX_EXAMPLES = 10**8
# `headway study … --examples`: lists each model is analysed on, all at once (10x the gpu scale's 10,000).
MAX_ANALYSIS_EXAMPLES = 100_000
# `headway reach --samples`: at 10^6 random orders the 95% interval is under ±0.001, the table's precision.
MAX_SAMPLES = 10**6
# Prompted questions (`llm-eval`, `data prompts`): hops and chains a prompt renders, questions per cell, and
# questions in all (each is held in memory with its prompt, options and answers: 5 KB at 4 hops, measured).
MAX_PROMPT_HOPS = 64
MAX_PROMPT_CHAINS = 64
MAX_QUESTIONS = 200_000
MAX_REPLY_TOKENS = 4096  # `--max-tokens`: a reply to a one-word question
# HTTP: an hour per request; 10 retries wait 1, 2, 4, … s, each at most MAX_BACKOFF_S (about 5 minutes in all).
MAX_TIMEOUT_S = 3600.0
MAX_RETRIES = 10
MAX_BACKOFF_S = 60.0
MAX_CONCURRENCY = 256  # requests in flight, one thread each
MAX_LLM_BATCH = 4096  # hf: sequences per forward
# Ray: resources one ensemble task reserves, and retries after a lost worker.
MAX_RAY_CPUS = 1024.0
MAX_RAY_GPUS = 64.0
MAX_RAY_RETRIES = 100
MAX_RAY_MEMORY = 2**50  # bytes: 1 PiB, beyond any node
