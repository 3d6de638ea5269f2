"""LLM client: OpenAI-compatible streaming chat completions on the process's pool.

pipecat's OpenAI service does the streaming, context and tool-call work; what
it does not do is share one HTTP client between calls (it makes a new one per
service instance), so the client comes from ``ServiceSessions`` instead.
"""

from __future__ import annotations

from typing import Any

from pipecat.services.openai.llm import OpenAILLMService

from agent.sessions import ServiceSessions


class ChatCompletionsLLMService(OpenAILLMService):
    """pipecat's OpenAI LLM service on a shared, pooled client of any compatible server."""

    def __init__(
        self,
        *,
        sessions: ServiceSessions,
        base_url: str,
        api_key: str,
        model: str,
        max_tokens: int,
        system_instruction: str,
        **kwargs: Any,
    ) -> None:
        self._sessions = sessions
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            settings=OpenAILLMService.Settings(
                model=model,
                max_tokens=max_tokens,
                temperature=0.7,
                system_instruction=system_instruction,
                # One line per reply: what follows a newline is the model
                # inventing the caller's next turn.
                extra={"stop": ["\n"]},
            ),
            **kwargs,
        )

    def create_client(
        self,
        api_key: Any = None,
        base_url: Any = None,
        organization: Any = None,
        project: Any = None,
        default_headers: Any = None,
        **kwargs: Any,
    ) -> Any:
        return self._sessions.openai_client(base_url=base_url, api_key=api_key)
