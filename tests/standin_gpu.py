"""Make Triton's compiler target a GPU this machine does not have (compile, never launch).

Triton's compiler needs only a *target* (``GPUTarget("cuda", cc, 32)``) and the ``ptxas`` it
ships; the driver is asked for the target, the device and the stream, so a stand-in answers those
three. It replaces Triton's active driver for the rest of the process: the compile scripts
(``sm90_compile*.py``, ``arch_compile.py``) call it in a process of their own.
"""


def target_gpu(cc: int = 90) -> None:
    """From now on, this process's Triton compiles for compute capability ``cc`` (90 = sm90)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class StandIn:
        def get_current_target(self):
            return GPUTarget("cuda", cc, 32)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

    driver.set_active(StandIn())
