"""The collection conversation as text: the policy that decides, what the caller's words mean,
the output guard, the prompts and the caller scripts."""
