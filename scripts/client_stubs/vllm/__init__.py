"""Stand-in for the `vllm` package, for scripts/client_suite.py only.

tpu-inference's kernels import nothing of vllm but its logger
(`tpu_inference/logger.py`: ``from vllm.logger import _VllmLogger,
init_logger``); the real vllm pulls in torch and a server stack that kernel
tests never touch. This package is put on sys.path by the harness, never
installed.
"""
