"""The vLLM backend's glue, against a fake `vllm` module (real vLLM needs a CUDA GPU)."""

from __future__ import annotations

import json
import re
import sys
import types
from types import SimpleNamespace
from typing import ClassVar

import pytest

from headway.errors import ConfigError
from headway.llm.backend import BackendError, LoglikRequest
from headway.llm.models import ModelSource
from headway.llm.vllm import VLLMBackend

BOS = 1


def token_logprob(token_id, position):
    """The fake model's log-probability of a prompt token: depends on both its id and its position."""
    return -0.01 * (token_id % 7) - 0.001 * position


def expected_score(text, n_continuation, bos=False):
    """The sum the backend should report: the last `n_continuation` characters of `text`, bos shifting positions."""
    ids = ([BOS] if bos else []) + [ord(c) for c in text]
    return sum(token_logprob(ids[i], i) for i in range(len(ids) - n_continuation, len(ids)))


class FakeTokenizer:
    """One token per character, ids = ord(c), like a Hugging Face tokenizer when called."""

    bos_token_id = BOS

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([BOS] if add_special_tokens else []) + [ord(c) for c in text]}


class FakeSamplingParams:
    """Keeps its keyword arguments for inspection."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class FakeLLM:
    """Records what it is given and answers like vLLM's offline LLM; `fail` makes loading raise."""

    fail = None
    instances: ClassVar[list[FakeLLM]] = []

    def __init__(self, **kwargs):
        if FakeLLM.fail:
            raise FakeLLM.fail
        self.kwargs = kwargs
        self.generate_calls = []
        self.chat_calls = []
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return FakeTokenizer()

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.generate_calls.append((prompts, sampling_params, use_tqdm))
        return [SimpleNamespace(prompt_logprobs=self.prompt_logprobs(p["prompt_token_ids"])) for p in prompts]

    @staticmethod
    def prompt_logprobs(ids):
        """None for the first token, then {actual id: logprob} plus a decoy for another id."""
        entries = [None]
        for i in range(1, len(ids)):
            entries.append({ids[i]: SimpleNamespace(logprob=token_logprob(ids[i], i)),
                            ids[i] + 1000: SimpleNamespace(logprob=-0.5)})
        return entries

    def chat(self, messages, sampling_params, use_tqdm=True):
        self.chat_calls.append((messages, sampling_params, use_tqdm))
        return [SimpleNamespace(outputs=[SimpleNamespace(text=f"  reply to {m[0]['content']}\n")]) for m in messages]


@pytest.fixture
def fake_vllm(monkeypatch):
    """A fake `vllm` module in sys.modules; yields FakeLLM, whose instances record the calls."""
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(FakeLLM, "fail", None)
    monkeypatch.setattr(FakeLLM, "instances", [])
    return FakeLLM


@pytest.fixture
def model_dir(tmp_path):
    """A model folder that resolve_model accepts."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return tmp_path


def test_loglikelihood_sums_exactly_the_continuation_tokens(fake_vllm, model_dir):
    backend = VLLMBackend(str(model_dir))
    requests = [LoglikRequest("Answer:", " 7"), LoglikRequest("abc", "defg"), LoglikRequest("x", "y")]
    scores = backend.loglikelihood(requests)
    assert scores == pytest.approx([expected_score("Answer: 7", 2), expected_score("abcdefg", 4),
                                    expected_score("xy", 1)])
    (prompts, params, use_tqdm), = fake_vllm.instances[0].generate_calls
    assert prompts[0] == {"prompt_token_ids": [ord(c) for c in "Answer: 7"]}
    assert params.kwargs == {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    assert use_tqdm is False


def test_add_bos_puts_the_bos_first_and_does_not_count_it(fake_vllm, model_dir):
    backend = VLLMBackend(str(model_dir), add_bos=True)
    scores = backend.loglikelihood([LoglikRequest("ab", "cd")])
    assert scores == pytest.approx([expected_score("abcd", 2, bos=True)])
    assert scores != pytest.approx([expected_score("abcd", 2)])
    (prompts, _, _), = fake_vllm.instances[0].generate_calls
    assert prompts == [{"prompt_token_ids": [BOS] + [ord(c) for c in "abcd"]}]


def test_order_and_progress_kept_across_chunks(fake_vllm, model_dir):
    backend = VLLMBackend(str(model_dir), batch_size=2)
    requests = [LoglikRequest("c" * (i + 1), "z" * (5 - i)) for i in range(5)]
    done = []
    scores = backend.loglikelihood(requests, progress=done.append)
    assert scores == pytest.approx([expected_score(r.context + r.continuation, len(r.continuation))
                                    for r in requests])
    assert done == [2, 2, 1]
    assert [len(prompts) for prompts, _, _ in fake_vllm.instances[0].generate_calls] == [2, 2, 1]


def test_generate_sends_chat_messages_and_strips_replies(fake_vllm, model_dir):
    backend = VLLMBackend(str(model_dir), batch_size=2)
    done = []
    replies = backend.generate(["hi", "who are you?", "bye"], max_tokens=7, progress=done.append)
    assert replies == ["reply to hi", "reply to who are you?", "reply to bye"]
    assert done == [2, 1]
    calls = fake_vllm.instances[0].chat_calls
    assert [messages for messages, _, _ in calls] == [
        [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "who are you?"}]],
        [[{"role": "user", "content": "bye"}]],
    ]
    assert all(params.kwargs == {"max_tokens": 7, "temperature": 0.0} and use_tqdm is False
               for _, params, use_tqdm in calls)


def test_model_arguments_for_a_folder_and_for_gguf_files(fake_vllm, model_dir):
    backend = VLLMBackend(str(model_dir), gpu_memory_utilization=0.5, max_model_len=2048, seed=3)
    assert backend.model_id == str(model_dir.resolve())
    assert fake_vllm.instances[-1].kwargs == {"model": str(model_dir.resolve()), "gpu_memory_utilization": 0.5,
                                              "max_model_len": 2048, "seed": 3}
    gguf = ModelSource(model_dir, "m.gguf")
    VLLMBackend(gguf)
    assert fake_vllm.instances[-1].kwargs["model"] == str(model_dir / "m.gguf")
    assert "tokenizer" not in fake_vllm.instances[-1].kwargs
    (model_dir / "tokenizer.json").write_text("{}")
    backend = VLLMBackend(gguf)
    assert fake_vllm.instances[-1].kwargs["tokenizer"] == str(model_dir)
    assert backend.model_id == str(model_dir / "m.gguf")


def test_missing_vllm_names_the_install(monkeypatch, model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)
    hint = r"needs vLLM on a machine with a CUDA GPU; run: pip install 'headway\[vllm\]'"
    with pytest.raises(BackendError, match=hint):
        VLLMBackend(str(model_dir))


def test_load_failure_names_the_model(fake_vllm, model_dir):
    fake_vllm.fail = RuntimeError("CUDA out of memory")
    message = re.escape(f"cannot load model {model_dir.resolve()}: RuntimeError: CUDA out of memory")
    with pytest.raises(BackendError, match=message):
        VLLMBackend(str(model_dir))


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, r"batch_size = 0 is invalid"),
    ({"gpu_memory_utilization": 0.0}, r"gpu_memory_utilization = 0.0 is invalid"),
    ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization = 1.5 is invalid"),
    ({"max_model_len": 0}, r"max_model_len = 0 is invalid"),
    ({"seed": -1}, r"seed = -1 is invalid"),
    ({"add_bos": "yes"}, r"add_bos = 'yes' is not a boolean"),
])
def test_bad_settings_are_refused(fake_vllm, model_dir, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        VLLMBackend(str(model_dir), **kwargs)
    assert fake_vllm.instances == []


def test_bad_max_tokens_and_refused_inputs_are_one_line(fake_vllm, model_dir, monkeypatch):
    backend = VLLMBackend(str(model_dir))
    with pytest.raises(ConfigError, match=r"max_tokens = 0 is invalid"):
        backend.generate(["hi"], max_tokens=0)

    def too_long(prompts, sampling_params, use_tqdm=True):
        raise ValueError("The decoder prompt (length 9) is longer than the maximum model length of 4.")

    monkeypatch.setattr(backend.llm, "generate", too_long)
    with pytest.raises(BackendError, match=r"vLLM refused a request to model .*: The decoder prompt \(length 9\)"):
        backend.loglikelihood([LoglikRequest("Answer:", " 7")])


def test_missing_prompt_logprobs_are_reported(fake_vllm, model_dir, monkeypatch):
    backend = VLLMBackend(str(model_dir))
    monkeypatch.setattr(FakeLLM, "prompt_logprobs", staticmethod(lambda ids: None))
    with pytest.raises(BackendError, match=r"no prompt log-probabilities aligned with the 3 prompt tokens"):
        backend.loglikelihood([LoglikRequest("ab", "c")])


def test_add_bos_needs_a_bos_token(fake_vllm, model_dir, monkeypatch):
    monkeypatch.setattr(FakeTokenizer, "bos_token_id", None)
    with pytest.raises(BackendError, match=r"add_bos is set but the tokenizer of model .* has no BOS token"):
        VLLMBackend(str(model_dir), add_bos=True)
