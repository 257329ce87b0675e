"""Build a Hugging Face model from a ``config.json`` mapping, for tracing.

Only the model classes transformers itself ships are used: ``auto_map`` entries
(custom code on the hub) are ignored and ``trust_remote_code`` is never passed, so
a config cannot make the server run code it supplies. Nothing is downloaded.

The config's ``model_type`` picks one of four kinds, each with the inputs its
training loop or ``generate`` gives it:

- **causal LM** (``AutoModelForCausalLM``: Llama, GPT-2, Mixtral, ...): ``input_ids``
  of ``sequence_length`` (and the same ``labels`` in training);
- **masked LM** (BERT, RoBERTa, ...): the same;
- **seq2seq** (``AutoModelForSeq2SeqLM``: T5, BART, mT5, Pegasus, Marian, ...): the
  encoder's ``input_ids`` of ``sequence_length`` and the decoder's
  ``decoder_input_ids`` of ``decoder_sequence_length``; in training the ``labels``
  too, beside the decoder ids already made from them, as transformers'
  ``DataCollatorForSeq2Seq`` batches them (so the model's own shift, which needs a
  ``decoder_start_token_id`` a minimal config may lack, is not taken);
- **speech seq2seq** (``AutoModelForSpeechSeq2Seq``, Whisper): the encoder's
  ``input_features`` of ``num_mel_bins`` × 2·``max_source_positions`` frames, what
  ``WhisperFeatureExtractor`` makes of every clip (padded to 30 s: 3,000 frames of
  10 ms; the encoder's two convolutions, the second of stride 2, bring them to its
  ``max_source_positions`` = 1,500 positions, and it refuses any other length), and
  decoder ids as above.

Any other kind (a vision or audio classifier, an unknown config class) is refused in a
line that names its ``model_type`` and these kinds.
"""

import importlib.metadata
from typing import Any, Literal

import torch

from gpuplan.core.trace.schema import TraceWorkload
from gpuplan.trace.step import TraceError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MASKED_LM = ("bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2")

Kind = Literal["causal LM", "masked LM", "seq2seq", "speech seq2seq"]
SUPPORTED_KINDS = (
    "causal LM (AutoModelForCausalLM)",
    "masked LM (bert, roberta, ...)",
    "seq2seq (AutoModelForSeq2SeqLM: t5, bart, ...)",
    "speech seq2seq (Whisper)",
)


class InvalidConfig(TraceError):
    """transformers refuses the configuration, or the tracer cannot build its kind.

    ``path`` is the request field to blame (JSONPath), for the API's problem."""

    def __init__(self, message: str, path: str = "$.model.hf_config") -> None:
        super().__init__(message)
        self.path = path


class InvalidWorkload(TraceError):
    """A workload field that this model cannot take (``path``: the field)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


def _unsupported(model_type: str, why: str = "") -> InvalidConfig:
    """The one-line refusal of a family the tracer cannot build (transformers' own lists
    every config class it has: 3 to 12 kB)."""
    kinds = ", ".join(SUPPORTED_KINDS[:-1]) + f" and {SUPPORTED_KINDS[-1]}"
    return InvalidConfig(
        f"model_type {model_type!r}{f' is {why}' if why else ''}: the tracer builds {kinds} "
        "models from a config; trace any other model as a Python target "
        "(gpuplan trace module:function)",
        "$.model.hf_config.model_type",
    )


def _whisper_style(config: Any) -> bool:
    """Whisper's encoder contract: log-mel ``input_features`` of ``num_mel_bins`` rows and
    2·``max_source_positions`` frames, a decoder of ``max_target_positions``."""
    return all(
        isinstance(getattr(config, name, None), int)
        for name in ("num_mel_bins", "max_source_positions", "max_target_positions")
    )


def model_kind(model_type: str, config: Any) -> Kind:
    """The kind of model the tracer builds for ``config`` (see the module's docstring);
    :class:`InvalidConfig` naming ``model_type`` when it builds none."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
    )

    # transformers lists BART, Whisper and others under causal LMs too (their decoder
    # alone): an encoder-decoder config is built whole.
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    speech = model_type in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES
    if encoder_decoder and speech and _whisper_style(config):
        return "speech seq2seq"
    if encoder_decoder and model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return "seq2seq"
    if model_type in MASKED_LM:
        return "masked LM"
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not encoder_decoder:
        return "causal LM"
    if speech:
        raise _unsupported(model_type, "a speech model whose inputs the tracer does not build")
    raise _unsupported(model_type)


class HfBuild:
    """A trace target: builds the model of ``hf_config`` with inputs of the workload's
    shape. ``kind`` and ``notes`` (the inputs it chose, for the result) are known before
    it runs."""

    def __init__(self, hf_config: dict[str, Any], workload: TraceWorkload) -> None:
        from transformers import CONFIG_MAPPING, AutoConfig

        values = {k: v for k, v in hf_config.items() if k not in ("auto_map", "_name_or_path")}
        model_type = values.pop("model_type", None)
        if not isinstance(model_type, str):
            raise InvalidConfig("hf_config has no model_type")
        if model_type not in CONFIG_MAPPING:
            # transformers' own refusal lists every model type it knows (12 kB).
            version = importlib.metadata.version("transformers")
            raise _unsupported(model_type, f"not a model type transformers {version} knows")
        try:
            config = AutoConfig.for_model(model_type, **values)
        except Exception as exc:  # transformers' validation errors have no common base
            raise InvalidConfig(f"transformers cannot read this config: {exc}") from None
        self.kind: Kind = model_kind(model_type, config)
        vocab = getattr(config, "vocab_size", None)
        if not isinstance(vocab, int) or vocab < 1:
            raise InvalidConfig("hf_config has no vocab_size")
        self.config = config
        self.model_type = model_type
        self.workload = workload
        self.vocab = vocab
        self.notes: list[str] = []
        self.decoder_length = self._decoder_length()

    def _decoder_length(self) -> int:
        """Tokens the decoder takes (0: no separate decoder); refuses what cannot run."""
        w = self.workload
        if self.kind in ("causal LM", "masked LM"):
            if w.decoder_sequence_length is not None:
                raise InvalidWorkload(
                    f"{self.model_type!r} is a {self.kind} without a separate decoder: "
                    "set sequence_length only",
                    "$.workload.decoder_sequence_length",
                )
            return 0
        if w.decoder_sequence_length is not None:
            length, said = w.decoder_sequence_length, "decoder_sequence_length"
        elif w.new_tokens:
            length, said = 1, "the decoder start token, as generate begins"
        elif self.kind == "speech seq2seq":
            length = int(self.config.max_target_positions)
            said = "max_target_positions, the longest transcript"
        else:
            length, said = w.sequence_length, "sequence_length, as decoder_sequence_length is unset"
        if self.kind == "speech seq2seq":
            most = int(self.config.max_target_positions)
            if length + w.new_tokens > most:
                field = "decoder_sequence_length" if w.decoder_sequence_length else "new_tokens"
                asked = f"{length} + {w.new_tokens} new tokens" if w.new_tokens else f"{length}"
                raise InvalidWorkload(
                    f"{self.model_type}'s decoder takes at most max_target_positions = {most} "
                    f"tokens, not {asked}",
                    f"$.workload.{field}",
                )
            frames = 2 * int(self.config.max_source_positions)
            self.notes.append(
                f"{self.model_type}: encoder input_features of {self.config.num_mel_bins} mel "
                f"bins x {frames:,} frames (30 s, as its feature extractor pads every clip; "
                f"sequence_length does not apply), decoder {length:,} token(s) ({said})"
            )
        else:
            self.notes.append(
                f"{self.model_type}: encoder input_ids of {w.sequence_length:,} tokens, "
                f"decoder_input_ids of {length:,} ({said})"
            )
        return length

    def __call__(self) -> tuple[torch.nn.Module, dict[str, Any]]:
        from transformers import (
            AutoModelForCausalLM,
            AutoModelForMaskedLM,
            AutoModelForSeq2SeqLM,
            AutoModelForSpeechSeq2Seq,
        )

        classes: dict[Kind, Any] = {
            "causal LM": AutoModelForCausalLM,
            "masked LM": AutoModelForMaskedLM,
            "seq2seq": AutoModelForSeq2SeqLM,
            "speech seq2seq": AutoModelForSpeechSeq2Seq,
        }
        w = self.workload
        dtype = DTYPES[w.dtype]
        try:
            model = classes[self.kind].from_config(
                self.config, dtype=dtype, attn_implementation=w.attention
            )
        except Exception as exc:  # a config transformers accepted but cannot build
            raise InvalidConfig(f"transformers cannot build this model: {exc}") from None
        if w.gradient_checkpointing:
            # transformers 5 renamed it; the old name warns there.
            enable = getattr(model, "activation_checkpointing_enable", None)
            (enable or model.gradient_checkpointing_enable)()
        training = w.mode != "inference"
        if self.kind in ("causal LM", "masked LM"):
            ids = torch.randint(0, self.vocab, (w.batch_size, w.sequence_length))
            if training:
                return model, {"input_ids": ids, "labels": ids}
            inputs: dict[str, Any] = {"input_ids": ids}
            if self.kind == "causal LM":
                inputs.update(use_cache=True, logits_to_keep=1)
            return model, inputs
        if self.kind == "speech seq2seq":
            # The features come in the weights' type, as the pipeline casts them.
            frames = 2 * int(self.config.max_source_positions)
            shape = (w.batch_size, int(self.config.num_mel_bins), frames)
            inputs = {"input_features": torch.randn(shape, dtype=dtype)}
        else:
            inputs = {"input_ids": torch.randint(0, self.vocab, (w.batch_size, w.sequence_length))}
        decoder = torch.randint(0, self.vocab, (w.batch_size, self.decoder_length))
        if training:
            # labels and the decoder ids made from them (shifted right) by the collator
            inputs.update(labels=decoder, decoder_input_ids=decoder.clone())
        else:
            inputs.update(decoder_input_ids=decoder, use_cache=True)
        return model, inputs


def builder(hf_config: dict[str, Any], workload: TraceWorkload) -> HfBuild:
    """A trace target for ``hf_config`` with inputs of the workload's shape; refuses at
    once (:class:`InvalidConfig`, :class:`InvalidWorkload`) what it cannot build."""
    return HfBuild(hf_config, workload)
