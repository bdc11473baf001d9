"""The JSON request bodies the ``tinker`` SDK (0.38) sends, as lenient pydantic models.

Field names and defaults follow the SDK's own request types (``tinker/types/*_request.py``); unknown
fields are ignored rather than refused, so a newer SDK that adds an optional field still talks to this
server. A body that does not fit is answered 400 with the field named (``memrl.serve.errors``).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


# The SDK's save_state docstring: a TTL is "between 1 hour (3600) and 10 years (None = never expires)".
Ttl = Annotated[Optional[int], Field(ge=3600, le=10 * 366 * 86400)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())


class CreateSession(Body):
    tags: list[str] = Field(default_factory=list)
    user_metadata: Optional[dict[str, Any]] = None
    sdk_version: str = ""


class SessionRef(Body):
    session_id: str


MAX_LORA_RANK = 1024  # also what a checkpoint's record may name (memrl.tinker.tenants.LoraSpec.from_dict)


class LoraConfigBody(Body):
    rank: int = Field(ge=1, le=MAX_LORA_RANK)
    seed: Optional[int] = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfigBody(Body):
    model_config = ConfigDict(extra="allow")
    type: str = "adamw"


class CreateModel(Body):
    session_id: str
    model_seq_id: int
    base_model: str
    user_metadata: Optional[dict[str, Any]] = None
    lora_config: Optional[LoraConfigBody] = None
    optimizer_config: Optional[OptimizerConfigBody] = None


class ModelRef(Body):
    model_id: str


class AdamParamsBody(Body):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)  # an infinite rate ran, then broke the result
    type: Optional[str] = None
    learning_rate: float = Field(default=1e-4, ge=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    eps: float = Field(default=1e-12, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip_norm: float = 0.0


class OptimStep(Body):
    model_id: str
    seq_id: Optional[int] = None
    optim_params: Optional[AdamParamsBody] = None
    adam_params: Optional[AdamParamsBody] = None
    optimizer_params: Optional[AdamParamsBody] = None  # where the SDK puts a non-Adam family's (DimuonParams)


class SaveWeights(Body):
    model_id: str
    path: Optional[str] = None
    seq_id: Optional[int] = None
    ttl_seconds: Ttl = None
    overwrite: bool = False
    user_metadata: Optional[dict[str, str]] = None
    sampling_session_seq_id: Optional[int] = None
    kind: str = "snapshot"


class CheckpointTtl(Body):
    ttl_seconds: Ttl = None


class LoadWeights(Body):
    model_id: Optional[str] = None
    seq_id: Optional[int] = None
    session_id: Optional[str] = None
    model_seq_id: Optional[int] = None
    base_model: Optional[str] = None
    user_metadata: Optional[dict[str, Any]] = None
    path: str
    optimizer: bool = False
    optimizer_config: Optional[OptimizerConfigBody] = None


class CreateSamplingSession(Body):
    session_id: str
    sampling_session_seq_id: int = 0
    base_model: Optional[str] = None
    model_path: Optional[str] = None


class SamplerRef(Body):
    sampling_session_id: str


class Chunk(Body):
    type: str = "encoded_text"
    tokens: list[int] = Field(default_factory=list)


class ModelInputBody(Body):
    chunks: list[Chunk]


class SamplingParamsBody(Body):
    max_tokens: Optional[int] = None
    seed: Optional[int] = None
    stop: Union[str, list[str], list[int], None] = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0


class Sample(Body):
    num_samples: int = 1
    prompt: ModelInputBody
    sampling_params: SamplingParamsBody
    base_model: Optional[str] = None
    model_path: Optional[str] = None
    sampling_session_id: Optional[str] = None
    seq_id: Optional[int] = None
    prompt_logprobs: Optional[bool] = None
    topk_prompt_logprobs: int = 0
    topk_sample_logprobs: int = 0
    target_prompt_logprobs: Optional[Any] = None
    prompt_alt_tokens_k: int = 0
    prompt_logprobs_last_n: Optional[int] = None
    record_stability_info: Optional[bool] = None


class RetrieveFuture(Body):
    request_id: str
    allow_metadata_only: bool = False


class CancelFuture(Body):
    request_id: str


class WeightsInfo(Body):
    tinker_path: str
