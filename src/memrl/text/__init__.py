"""Text shared by the agent and its environment: tokenizer round trips and the tool-call text format.

Workflows (the agent's side) and ``memrl.envs`` (the user simulator and NL judge, which are models
too) both encode, decode and read tool calls the same way, so that code sits here, in the layer of
``memrl.envs``, and neither reaches into the other.
"""
