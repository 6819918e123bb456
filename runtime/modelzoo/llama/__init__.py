"""llama: the LLaMA decoder (RMSNorm, SwiGLU, rotary positions, no biases, untied output)."""
