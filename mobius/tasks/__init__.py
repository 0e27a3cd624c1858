"""Tasks: the I/O contracts of CONTRACTS.md, by their Hugging Face pipeline names.

The order of ``TASKS`` is the order in which detection tries them when the config's
``architectures`` name no class (decoders first, then the bare encoder); ``detect.py`` picks one.

May import ``mobius.sources``, ``mobius.runtime`` (a VLM's genai config), ``mobius.fallbacks``,
``mobius.errors`` and ``mobius.failures``. Patterns and ``synth`` read the contracts; tasks never
import them.
"""

from mobius.tasks.base import Task, TensorSpec
from mobius.tasks.causal_lm import CausalLMTask
from mobius.tasks.head import HeadTask
from mobius.tasks.seq2seq import IMAGE2TEXT, SPEECH2TEXT, TEXT2TEXT
from mobius.tasks.vlm import IMAGE_TEXT_TO_TEXT

LOGITS = ("logits",)

TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        CausalLMTask(),
        HeadTask("feature-extraction", "MODEL", ("last_hidden_state",)),
        HeadTask("fill-mask", "MODEL_FOR_MASKED_LM", LOGITS),
        HeadTask("text-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION", LOGITS, classifies=True),
        HeadTask("token-classification", "MODEL_FOR_TOKEN_CLASSIFICATION", LOGITS, classifies=True),
        HeadTask("question-answering", "MODEL_FOR_QUESTION_ANSWERING", ("start_logits", "end_logits")),
        HeadTask("multiple-choice", "MODEL_FOR_MULTIPLE_CHOICE", LOGITS, multiple_choice=True),
        HeadTask("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION", LOGITS, classifies=True),
        HeadTask(
            "zero-shot-image-classification",
            "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION",
            ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds"),
            dual=True,
        ),
        HeadTask("automatic-speech-recognition", "MODEL_FOR_CTC", LOGITS),
        HeadTask("audio-classification", "MODEL_FOR_AUDIO_CLASSIFICATION", LOGITS, classifies=True),
    )
}  # fmt: skip

# encoder-decoder tasks, two graphs each (seq2seq.py); speech-to-text shares its name with CTC's
# head task and image-text-to-text with the three-graph VLM task, so these are looked up by name
# only for an encoder-decoder config
SEQ2SEQ_TASKS: dict[str, Task] = {t.name: t for t in (TEXT2TEXT, SPEECH2TEXT, IMAGE2TEXT)}
TASKS.setdefault(TEXT2TEXT.name, TEXT2TEXT)
# vision-language models, three graphs each (vlm.py); detected before text generation
TASKS.setdefault(IMAGE_TEXT_TO_TEXT.name, IMAGE_TEXT_TO_TEXT)

# other names ``--task`` takes: the name it stands for
ALIASES: dict[str, str] = {
    "causal-lm": "text-generation",
    "image-feature-extraction": "feature-extraction",  # on a vision model
}

__all__ = ["ALIASES", "SEQ2SEQ_TASKS", "TASKS", "CausalLMTask", "HeadTask", "Task", "TensorSpec"]
