"""rigforge: provision NVIDIA Blackwell LLM inference rigs with pyinfra."""
