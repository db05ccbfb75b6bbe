"""bitsandbytes recipes: LLM.int8() and 4-bit (NF4, FP4) weights, applied by transformers at load.

* ``bnb-int8``: per-row absmax int8 weights with fp16 outlier decomposition
  (Dettmers et al. 2022, "LLM.int8(): 8-bit Matrix Multiplication for
  Transformers at Scale").
* ``bnb-nf4`` / ``bnb-fp4``: block-wise (64 weights) 4-bit weights with an absmax
  per block; NF4 places its 16 levels at normal quantiles (Dettmers et al. 2023,
  "QLoRA: Efficient Finetuning of Quantized LLMs").

transformers keeps ``lm_head`` in full precision for both. On the CPU the int8
matmul casts its inputs to float16 and the 4-bit path dequantizes per call;
both run without a GPU (bitsandbytes >= 0.45).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from gate.errors import ModelLoadError

Mode = Literal["int8", "nf4", "fp4"]


def quantization_config(mode: Mode, skip: Sequence[str] = ()) -> Any:
    """The ``BitsAndBytesConfig`` of a mode; a missing bitsandbytes names the package.

    ``skip``: exact module names left in full precision (``llm_int8_skip_modules``,
    which transformers reads as anchored patterns: the names are regex-escaped),
    besides ``lm_head``, which transformers always keeps.
    """
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as exc:
        raise ModelLoadError(
            f"recipe bnb-{mode} needs bitsandbytes ({exc})", "pip install bitsandbytes"
        ) from None
    from transformers import BitsAndBytesConfig

    extra: dict[str, Any] = {}
    if skip:
        extra["llm_int8_skip_modules"] = ["lm_head", *(re.escape(name) for name in skip)]
    if mode == "int8":
        return BitsAndBytesConfig(load_in_8bit=True, **extra)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=mode, **extra)
