"""Character-level ChatML tokenizer for the embedded (CPU) backend.

Every ordinary character is one token; the three Qwen special tokens and the role words are
single tokens too, so a chat-templated arithmetic prompt stays a few dozen tokens long. The
tokenizer is built offline from the `tokenizers` library (no hub download) and wrapped in
`transformers.PreTrainedTokenizerFast`, so it saves and loads like any Hugging Face tokenizer.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # end of a turn: the eos token
ENDOFTEXT = "<|endoftext|>"  # the pad token (and the model config's bos id, as in Qwen3)
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Role words are added (non-special) tokens: one id each, and `skip_special_tokens` keeps them.
ROLE_TOKENS = ("system", "user", "assistant")

# The ordinary character vocabulary. Order is the id order, so changing it changes every id
# (and the warm-start cache key, which hashes the vocabulary).
CHARACTERS = (
    "0123456789"  # digits
    "+-*=?"  # operators and the question mark
    "\\boxed{}"  # the characters of \boxed{} (b, o, x, e, d are reused by the prompt text)
    "Answri."  # the rest of "Answer in" and a full stop
    " \n"
)

# Qwen-style ChatML: <|im_start|>{role}\n{content}<|im_end|>\n per message; the generation
# prompt appends <|im_start|>assistant\n. Jinja string literals interpret the "\n" escapes.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Return the character-level ChatML tokenizer (deterministic: the same ids on every call).

    Contract:
      - ids 0..2 are `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos); then the role
        words `system`, `user`, `assistant`; then one id per character of `CHARACTERS`.
      - `bos_token` is unset (Qwen has none); `padding_side` is "left" (generation layout).
      - encoding never adds special tokens by itself; text outside the vocabulary raises
        (there is no unknown token: an uncovered character is a bug, not data).
      - `decode(ids, skip_special_tokens=True)` concatenates the characters with no separator,
        so a response `\\boxed{57}<|im_end|>` decodes to `\\boxed{57}`.
      - `save_pretrained(d)` then `AutoTokenizer.from_pretrained(d)` encodes identically.
    """
    if len(set(CHARACTERS)) != len(CHARACTERS):
        raise AssertionError("CHARACTERS lists a character twice")
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *ROLE_TOKENS, *CHARACTERS):
        vocab[token] = len(vocab)

    core = Tokenizer(models.WordLevel(vocab=vocab))
    # Split into single characters ([\s\S] rather than "." so the newline is one as well).
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()  # join tokens with no separator

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    # Ids are already fixed by the vocabulary; this registers them as added tokens so they
    # are matched before the per-character split.
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START]})
    tokenizer.add_tokens(list(ROLE_TOKENS))
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
