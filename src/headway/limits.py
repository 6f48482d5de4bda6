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
# Characters of prompt text one run draws (every question's body, projected from one question per formulation and
# hop count): drawn at about 0.2 M characters a second (measured on 2 shared cores: about 8 minutes at the limit),
# held in memory with their records at up to 27 bytes a character (2.7 GB) and written to questions.jsonl at up to
# 7 bytes a character (700 MB). The defaults draw about 18 M.
MAX_PROMPT_CHARACTERS = 10**8
# HTTP: an hour per request (its deadline: connecting, sending, waiting and reading the whole reply); 10 retries
# wait 1, 2, 4, … s, each at most MAX_BACKOFF_S (about 5 minutes in all).
MAX_TIMEOUT_S = 3600.0
# A server's reply, read in pieces and refused beyond this before it is parsed: the largest a scoring request gets
# echoes the longest prompt headway renders (23,000 characters: F2, 40 hops × 24 chains; under 10,000 tokens) at
# about 100 bytes a token with its log-probabilities, 1 MB; 16 MiB is 16 times that (4 GiB with 256 requests in
# flight, the most).
MAX_REPLY_BYTES = 16 * 2**20
# A token's log-probability from a server below this is nonsense, refused: it is the token's logit less the
# log-sum-exp of all logits, so it is at least minus their spread, tens of nats in real models (a 32-bit float
# probability is 0 below -104); -1e4 is 100 times past that.
MIN_TOKEN_LOGPROB = -1e4
# A served model's name: it keys the response cache and is printed in every report.
MAX_MODEL_NAME = 1024
MAX_RETRIES = 10
MAX_BACKOFF_S = 60.0
MAX_CONCURRENCY = 256  # requests in flight, one thread each
MAX_LLM_BATCH = 4096  # hf: sequences per forward
# Ray: resources one ensemble task reserves, and retries after a lost worker.
MAX_RAY_CPUS = 1024.0
MAX_RAY_GPUS = 64.0
MAX_RAY_RETRIES = 100
MAX_RAY_MEMORY = 2**50  # bytes: 1 PiB, beyond any node
# Files headway reads back, bounded from what precedes their contents, before anything is decoded
# (`headway.runs.layout`, `headway.runs.checkpoints`):
# JSON: a config.json lists about 0.9 KB per run and a summary.json 1.5 KB, so 15 MB at MAX_RUNS runs.
MAX_JSON_BYTES = 64 * 2**20
# JSON nesting: headway's files nest at most 5 deep (a study's summary.json); Python's parser recurses once per
# level and stops at its recursion limit (about 1000 levels), so a hand-made file 100,000 deep is read no further.
MAX_JSON_DEPTH = 32
# Characters of one JSON number: headway writes a float in at most 24 and its integers in at most 20 (64 bits);
# Python refuses to convert an integer of more than 4300 digits, and a longer float literal is only rounding.
MAX_JSON_NUMBER = 100
# Parquet: the footer (schema, row groups, metadata) is read before any value; headway's are a few KB.
MAX_PARQUET_FOOTER = 16 * 2**20
# A table is decoded whole into memory (8 bytes per row per column, plus its strings and lists, estimated from the
# footer): over 3000x the largest committed under results/ (1.2 MB). An ensemble's metrics are also bounded by the
# rows its runs log (`headway.runs.metrics`) and a study's tables by the columns it declares.
MAX_TABLE_BYTES = 4 * 2**30
# safetensors: the JSON header before the tensors names each tensor with its dtype, shape and offsets (about 100
# bytes each) and holds the file's metadata (a study's run ids: 13 bytes a run); the library itself allows 100 MB.
MAX_SAFETENSORS_HEADER = 16 * 2**20
