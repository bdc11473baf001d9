"""memrl's tool-eval metrics against τ²-bench's own ``compute_metrics`` on memrl's ``tau2_results.json``.

A ``memrl eval`` of the bundled library domain's 8 test tasks, 4 trials each, with a scripted model whose
every fifth request fails (those trials fail every try and are written as τ²-bench's ``infrastructure_error``);
τ²-bench's metrics code reads the results file memrl wrote. Printed: failed trials against its infrastructure
errors, the average reward and pass^1..k of both, and EQUAL or DIFFER.

    pip install loguru pandas toml addict deepdiff python-dotenv litellm   # what importing τ²-bench needs
    PYTHONPATH=~/tau2-bench/src python bench/tau2_metrics_parity.py
"""
import asyncio, json, sys, tempfile
from pathlib import Path
from memrl.config.schema import MemRLConfig
from memrl.eval.tool_eval import run_tool_eval
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import encode_text

tok = build_hf_tokenizer(["Nothing to change here."], vocab_size=400)
n = [0]
def reply(prompt, params):
    n[0] += 1
    if n[0] % 5 == 0:
        raise RuntimeError("server hung up")  # some trials fail every try: infrastructure_error
    return encode_text(tok, "Nothing to change here.") + [tok.convert_tokens_to_ids("<|im_end|>")]

c = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_turns": 2},
                                "env": {"domain": "library", "eval_split": "test"},
                                "sampling": {"temperature": 1.0}, "engine": {"concurrency": 1}})
out = Path(tempfile.mkdtemp()) / "out"
ours = asyncio.run(run_tool_eval(c, ScriptedEngine(reply), tok, out, 4))
from tau2.data_model.simulation import Results
from tau2.metrics.agent_metrics import compute_metrics
res = Results.model_validate(json.loads((out / "tau2_results.json").read_text()))
m = compute_metrics(res)
print("failed trials", ours["failed_trials"], "tau2 infra", m.infra_error_count)
print("memrl avg reward", ours["avg_reward"], "tau2", m.avg_reward)
print("memrl pass^k", ours["pass_hat_k"])
print("tau2  pass^k", {str(k): v for k, v in m.pass_hat_ks.items()})
same = ours["pass_hat_k"] == {str(k): v for k, v in m.pass_hat_ks.items()} and abs(ours["avg_reward"] - m.avg_reward) < 1e-12
print("EQUAL" if same else "DIFFER")
