"""The Gemma 3 chat format: the prompt text, and how llama.cpp tokenizes it."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest
from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

from infra.gemma_chat import CHAT_FORMAT, TURN_MARKER_IDS, format_gemma3, gemma3_prompt

SYSTEM = {"role": "system", "content": "You are Sam from Acme Collections."}


def test_system_text_opens_the_first_user_turn() -> None:
    prompt = gemma3_prompt([SYSTEM, {"role": "user", "content": "Hello?"}])

    assert prompt == (
        "<start_of_turn>user\nYou are Sam from Acme Collections.\n\nHello?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_assistant_messages_become_model_turns() -> None:
    prompt = gemma3_prompt(
        [
            SYSTEM,
            {"role": "user", "content": "Who is this?"},
            {"role": "assistant", "content": "This is Sam."},
            {"role": "user", "content": "  What do you want?  "},
        ]
    )

    assert prompt == (
        "<start_of_turn>user\nYou are Sam from Acme Collections.\n\nWho is this?<end_of_turn>\n"
        "<start_of_turn>model\nThis is Sam.<end_of_turn>\n"
        "<start_of_turn>user\nWhat do you want?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_without_a_system_message_turns_are_plain() -> None:
    assert gemma3_prompt([{"role": "user", "content": "Hi"}]) == (
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    )


def test_a_call_that_opens_with_the_agent_keeps_its_instructions_first() -> None:
    prompt = gemma3_prompt(
        [
            SYSTEM,
            {"role": "assistant", "content": "Hello, may I speak with Alex?"},
            {"role": "user", "content": "Speaking."},
        ]
    )

    assert prompt == (
        "<start_of_turn>user\nYou are Sam from Acme Collections.<end_of_turn>\n"
        "<start_of_turn>model\nHello, may I speak with Alex?<end_of_turn>\n"
        "<start_of_turn>user\nSpeaking.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_a_later_system_message_joins_the_next_user_turn() -> None:
    prompt = gemma3_prompt(
        [
            {"role": "user", "content": "Yes."},
            {"role": "system", "content": "Identity verified."},
            {"role": "user", "content": "How much do I owe?"},
        ]
    )

    assert "<start_of_turn>user\nIdentity verified.\n\nHow much do I owe?<end_of_turn>\n" in prompt


def test_content_parts_and_empty_messages() -> None:
    parts = [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]
    prompt = gemma3_prompt(
        [
            {"role": "user", "content": parts},
            {"role": "assistant", "content": None},
            {"role": "tool", "content": "balance: 120.00"},
        ]
    )

    assert prompt == (
        "<start_of_turn>user\nHi there<end_of_turn>\n"
        "<start_of_turn>user\nbalance: 120.00<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_the_format_is_registered_and_stops_at_end_of_turn() -> None:
    response = format_gemma3(messages=[{"role": "user", "content": "Hi"}])

    assert response.stop == ["<end_of_turn>"]
    assert not response.added_special  # llama.cpp adds <bos> itself
    assert not response.prompt.startswith("<bos>")
    assert LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(CHAT_FORMAT)


@pytest.mark.models
def test_llama_cpp_adds_exactly_one_bos() -> None:
    from infra.llm_server import gemma_model_file

    vocab = llama_cpp.Llama(str(gemma_model_file()), vocab_only=True, verbose=False)
    prompt = gemma3_prompt([SYSTEM, {"role": "user", "content": "Hi"}])
    # The same call llama-cpp-python's chat handler makes when added_special is False.
    tokens = vocab.tokenize(prompt.encode(), add_bos=True, special=True)

    assert tokens[0] == vocab.token_bos()
    assert tokens.count(vocab.token_bos()) == 1
    assert tokens[1] == vocab.tokenize(b"<start_of_turn>", add_bos=False, special=True)[0]
    assert vocab.tokenize(b"<end_of_turn>", add_bos=False, special=True) == [106]


def test_generation_stops_at_either_turn_marker_token() -> None:
    # Special tokens detokenize to nothing, so only a stop on their ids can catch them.
    [stop] = format_gemma3(messages=[{"role": "user", "content": "Hi"}]).stopping_criteria
    logits = np.zeros(1, dtype=np.single)
    assert stop(np.array([2, 3, 106], dtype=np.intc), logits)
    assert stop(np.array([2, 3, 105], dtype=np.intc), logits)
    assert not stop(np.array([2, 106, 3], dtype=np.intc), logits)


@pytest.mark.models
def test_the_turn_marker_ids_are_gemmas() -> None:
    from infra.llm_server import gemma_model_file

    vocab = llama_cpp.Llama(str(gemma_model_file()), vocab_only=True, verbose=False)
    ids = {
        vocab.tokenize(marker.encode(), add_bos=False, special=True)[0]
        for marker in ("<start_of_turn>", "<end_of_turn>")
    }
    assert ids == TURN_MARKER_IDS
