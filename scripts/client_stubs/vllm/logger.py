"""The two names tpu-inference imports from `vllm.logger`: a stdlib logger
with vllm's ``*_once`` methods (each distinct message logged once)."""

from __future__ import annotations

import logging

_seen: set = set()


class _VllmLogger(logging.Logger):
    def _once(self, level: int, msg, *args) -> None:
        key = (level, str(msg), args)
        if key not in _seen:
            _seen.add(key)
            self.log(level, msg, *args)

    def debug_once(self, msg, *args, **_kwargs) -> None:
        self._once(logging.DEBUG, msg, *args)

    def info_once(self, msg, *args, **_kwargs) -> None:
        self._once(logging.INFO, msg, *args)

    def warning_once(self, msg, *args, **_kwargs) -> None:
        self._once(logging.WARNING, msg, *args)


def init_logger(name: str) -> _VllmLogger:
    previous = logging.getLoggerClass()
    logging.setLoggerClass(_VllmLogger)
    try:
        logger = logging.getLogger(name)
    finally:
        logging.setLoggerClass(previous)
    if not isinstance(logger, _VllmLogger):  # made before, by someone else
        logger.__class__ = _VllmLogger
    return logger
