import pytest

from agent.conversation.prompts import PromptSet


def test_the_shipped_version_loads():
    prompts = PromptSet.load("collections-v3")
    assert "automated assistant" in prompts.greeting  # the AI disclosure is in the first sentence
    assert "recorded" in prompts.greeting
    assert "{consumer_name}" in prompts.greeting
    assert "attempt to collect a debt" in prompts.templates["mini_miranda"]
    messages = prompts.example_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]


def test_an_unknown_version_names_the_known_ones():
    with pytest.raises(ValueError, match="collections-v3"):
        PromptSet.load("v99")


def test_a_malformed_example_names_its_line(tmp_path):
    folder = tmp_path / "v1"
    folder.mkdir()
    (folder / "greeting.txt").write_text("Hello.")
    (folder / "system.txt").write_text("Be brief.")
    (folder / "examples.txt").write_text("caller: Hi\nrobot: Hello\n")
    with pytest.raises(ValueError, match="examples.txt:2"):
        PromptSet.load("v1", root=tmp_path)
