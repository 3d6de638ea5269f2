"""The Gemma 3 chat format, registered with llama-cpp-python as ``gemma-3``.

The GGUF we ship has no chat template, so llama.cpp would fall back to Llama-2 formatting,
and its built-in ``gemma`` format drops system messages. Gemma has no system role: its own
template puts the system text at the start of the first user turn::

    <start_of_turn>user
    {system}

    {user}<end_of_turn>
    <start_of_turn>model
    {assistant}<end_of_turn>
    <start_of_turn>model

Generation stops on the turn-marker *tokens*: llama.cpp detokenizes special tokens to
nothing, so a stop *string* ``<end_of_turn>`` never matches, and the small base model
often opens a new ``<start_of_turn>`` instead of closing its own.

The prompt carries no ``<bos>``: llama-cpp-python adds it when it tokenizes (the model's
vocabulary asks for it), and a second one would change what the model sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp.llama import StoppingCriteriaList
from llama_cpp.llama_chat_format import ChatFormatterResponse, register_chat_format

CHAT_FORMAT = "gemma-3"
START_OF_TURN = "<start_of_turn>"
END_OF_TURN = "<end_of_turn>"
GENERATION_PROMPT = f"{START_OF_TURN}model\n"
#: Ids of ``<start_of_turn>`` and ``<end_of_turn>`` in the Gemma 3 vocabulary.
TURN_MARKER_IDS = frozenset({105, 106})


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    return "".join(part.get("text", "") for part in content if part.get("type") == "text").strip()


def gemma3_prompt(messages: Iterable[Mapping[str, Any]]) -> str:
    """Render OpenAI chat messages as a Gemma 3 prompt ending in the generation prompt.

    System messages are held back and put at the start of the next user turn, as
    Gemma's template does for a leading one; if a model turn or the end comes first,
    they become a user turn of their own so no instruction is lost. Assistant messages
    become ``model`` turns; any other role (tool results) is shown as a user turn.
    """
    prompt: list[str] = []
    pending_system: list[str] = []
    for message in messages:
        role = message.get("role")
        text = _text(message.get("content"))
        if role == "system":
            if text:
                pending_system.append(text)
            continue
        if not text:
            continue
        turn = "model" if role == "assistant" else "user"
        if pending_system:
            if turn == "user":
                text = "\n\n".join([*pending_system, text])
            else:
                prompt.append(_turn("user", "\n\n".join(pending_system)))
            pending_system = []
        prompt.append(_turn(turn, text))
    if pending_system:
        prompt.append(_turn("user", "\n\n".join(pending_system)))
    prompt.append(GENERATION_PROMPT)
    return "".join(prompt)


def _turn(role: str, text: str) -> str:
    return f"{START_OF_TURN}{role}\n{text}{END_OF_TURN}\n"


@register_chat_format(CHAT_FORMAT)
def format_gemma3(messages: list[Any], **kwargs: Any) -> ChatFormatterResponse:
    """llama-cpp-python's entry point for ``chat_format="gemma-3"``."""
    return ChatFormatterResponse(
        prompt=gemma3_prompt(messages),
        stop=[END_OF_TURN],
        stopping_criteria=StoppingCriteriaList([_at_turn_marker]),
    )


def _at_turn_marker(tokens: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
    return int(tokens[-1]) in TURN_MARKER_IDS
