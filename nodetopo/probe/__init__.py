"""``nodetopo probe``: what a pod declared, what its node promised, what its container sees.

* ``checks``: the checks, pure over typed inputs, each pass/fail/warn/skip with a reason and, for a
  failure, an attribution (``PlacedWrong``, ``ResourceNotReal``, ``Undeclared``);
* ``observe``: the readers (annotations file, GPUs, NVML, RDMA, /dev/shm, hugepages, cpuset), each
  over a root path;
* ``events``: the Event on the pod;
* ``cli``: the command, with a timeout on every step.
"""
